#!/usr/bin/env python3
"""Cost of authenticating one message: HMAC-SHA256 with a session key vs Ed25519
sign / verify, per message size, side by side in one run. Medians of --repeat timings.

    .venv/bin/python bench/auth_cost.py [--repeat 200] [--json out/auth_cost.json]

Sizes: an action chunk (10 x 5 float32 + header), an observation with 2 x 224x224 RGB views, one
with a 640x480 RGB view. The figures justify the split in physai_ros/security/message_auth.py.

"as wired": what the nodes do per message (physai_ros.security.endpoints on the real generated
message types): the canonical SHA-256 digest of the fields (ros/message_digest.py), then an HMAC
or an Ed25519 signature over domain + counter + digest, so the size-dependent part is one
SHA-256 pass whichever tag is used.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from physai_ros.security.message_auth import SessionMac, Signer, Verifier

SIZES = {"chunk (10x5 f32)": 10 * 5 * 4 + 120, "observation 2x224x224x3": 2 * 224 * 224 * 3 + 200,
         "observation 640x480x3": 640 * 480 * 3 + 200}
SHAPES = {"chunk (10x5 f32)": None, "observation 2x224x224x3": (2, 224, 224), "observation 640x480x3": (1, 480, 640)}


def real_message(name: str):
    import array

    from physai_ros_interfaces.msg import ActionChunk, Observation
    from sensor_msgs.msg import Image

    shape = SHAPES[name]
    if shape is None:
        m = ActionChunk(robot_id="robot_0", task_id="t", round_id=7, joint_names=[f"j{i}" for i in range(5)])
        m.actions = array.array("f", os.urandom(10 * 5 * 4))
        return m
    views, h, w = shape
    m = Observation(robot_id="robot_0", task_id="t", round_id=7, prompt="pick up the cube")
    for _ in range(views):
        im = Image(height=h, width=w, encoding="rgb8", step=w * 3)
        im.data = array.array("B", os.urandom(h * w * 3))
        m.images.append(im)
    m.state = array.array("f", [0.0] * 5)
    return m


def wired_costs(name: str, repeat: int, mac: SessionMac, signer: Signer, verifier: Verifier) -> dict:
    from physai_ros.ros.message_digest import digest
    from physai_ros.security.endpoints import OBSERVATION, signed_content

    msg = real_message(name)
    sig = signer.sign(signed_content(OBSERVATION, 1, digest(msg)))
    return {"wired_digest_us": median_us(lambda: digest(msg), repeat),
            "wired_hmac_us": median_us(lambda: mac.tag(signed_content(OBSERVATION, 1, digest(msg))), repeat),
            "wired_sign_us": median_us(lambda: signer.sign(signed_content(OBSERVATION, 1, digest(msg))), repeat),
            "wired_verify_us": median_us(lambda: verifier.check(signed_content(OBSERVATION, 1, digest(msg)), sig),
                                         repeat)}


def median_us(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    key = Ed25519PrivateKey.generate()
    mac = SessionMac(os.urandom(32), b"bench")
    signer, verifier = Signer(key, b"bench"), Verifier(key.public_key(), b"bench")
    rows = []
    for name, size in SIZES.items():
        m = os.urandom(size)
        tag, sig = mac.tag(m), signer.sign(m)
        row = {"message": name, "bytes": size,
               "hmac_tag_us": median_us(lambda: mac.tag(m), a.repeat),
               "hmac_check_us": median_us(lambda: mac.check(m, tag), a.repeat),
               "ed25519_sign_us": median_us(lambda: signer.sign(m), a.repeat),
               "ed25519_verify_us": median_us(lambda: verifier.check(m, sig), a.repeat)}
        row["sign_over_hmac"] = row["ed25519_sign_us"] / row["hmac_tag_us"]
        row.update(wired_costs(name, a.repeat, mac, signer, verifier))
        rows.append(row)
        print(f"{name:26s} {size:8d} B  HMAC tag {row['hmac_tag_us']:8.1f} us  check {row['hmac_check_us']:8.1f} us"
              f"  | Ed25519 sign {row['ed25519_sign_us']:8.1f} us  verify {row['ed25519_verify_us']:8.1f} us"
              f"  (sign / HMAC {row['sign_over_hmac']:.1f}x)\n{'':37s}as wired: digest {row['wired_digest_us']:8.1f} us"
              f"  +HMAC {row['wired_hmac_us']:8.1f} us  +sign {row['wired_sign_us']:8.1f} us"
              f"  +verify {row['wired_verify_us']:8.1f} us")
    doc = {"rows": rows, "repeat": a.repeat, "load_avg": os.getloadavg(), "cpu": platform.processor() or platform.machine()}
    print(f"load average at the end: {doc['load_avg'][0]:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
