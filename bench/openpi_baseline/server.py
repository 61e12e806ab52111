"""openpi's serving pattern, the anchor of bench/serving_vs_openpi.py (runs in .venv-openpi).

openpi (Physical Intelligence) serves a policy with a websockets server: on connect it sends its
metadata, then per message it unpacks the observation with openpi_client.msgpack_numpy, calls
policy.infer, adds server_timing.infer_ms and sends the packed result; one asyncio loop serves
every connection and infer runs on it (blocking), so robots are served one at a time. openpi's
server module is not published on PyPI; this follows that description with the published
openpi_client codec and the websockets package it uses.

The policy here does only the work a transport benchmark should see besides the wire: it reads
every image and the state (so the payload is really received and touched) and returns an action
chunk of the engine's shape. Its time is reported as infer_ms and subtracted, as ours is.
--model-ms adds that many milliseconds of matrix products to each infer (bench/physai_bench/model_time.py
says why).

  python bench/openpi_baseline/server.py --port 8765 --horizon 50 --action-dim 32 [--model-ms 40]
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import numpy as np
import websockets
import websockets.asyncio.server
from openpi_client import msgpack_numpy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from physai_bench.model_time import compute_for  # noqa: E402  (numpy only: this venv has no physai_bench install)


class TouchPolicy:
    def __init__(self, horizon: int, action_dim: int, model_ms: float = 0.0):
        self.chunk = np.zeros((horizon, action_dim), dtype=np.float32)
        self.model_ms = model_ms

    def infer(self, obs: dict) -> dict:
        # One pass over every byte of every image: the payload is used, not just received.
        checksum = sum(int(np.asarray(v).sum(dtype=np.uint64)) for k, v in obs.items() if k.startswith("image"))
        state = np.asarray(obs["state"], dtype=np.float32)
        actions = self.chunk.copy()
        actions[:, : min(len(state), actions.shape[1])] = state[: actions.shape[1]]
        compute_for(self.model_ms)
        return {"actions": actions, "checksum": checksum}


async def handler(ws, policy: TouchPolicy) -> None:
    packer = msgpack_numpy.Packer()
    await ws.send(packer.pack({"policy": "touch"}))
    while True:
        try:
            obs = msgpack_numpy.unpackb(await ws.recv())
        except websockets.ConnectionClosed:
            return
        t0 = time.monotonic()
        out = policy.infer(obs)
        out["server_timing"] = {"infer_ms": (time.monotonic() - t0) * 1e3}
        await ws.send(packer.pack(out))


async def serve(port: int, policy: TouchPolicy) -> None:
    async with websockets.asyncio.server.serve(lambda ws: handler(ws, policy), "127.0.0.1", port,
                                               compression=None, max_size=None) as server:
        print("ready", flush=True)
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--horizon", type=int, default=50)
    ap.add_argument("--action-dim", type=int, default=32)
    ap.add_argument("--model-ms", type=float, default=0.0, help="model time to stand in for, per infer")
    args = ap.parse_args()
    try:
        asyncio.run(serve(args.port, TouchPolicy(args.horizon, args.action_dim, args.model_ms)))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
