"""openpi's own clients served by a fleet: `openpi-client` from PyPI (in .venv-openpi, which pins
numpy<2) talks to physai-fleet's openpi_gateway, each client in its own process, beside a ROS robot
of the same fleet. Each gets the engine's chunk for its robot ([chunk, joints], finite, rounds in
order, from the fleet's engine); hostile traffic is refused with a counted reason on /diagnostics
(no token, a wrong token, a second connection as a connected robot, not msgpack, a wrong image, a
flood, a frame over the size limit) and costs no one else's service; the ROS robot keeps being
served throughout."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from physai_ros.config.fleet import default_fleet_path
from physai_ros.security.config import auto_keystore_dir
from physai_ros.security.gateway_token import robot_token
from physai_ros.security.keystore import Keystore

from machine_load import scaled
from ros_rig import SpunNode, wait_for

pytestmark = [pytest.mark.ros, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
OPENPI_PY = REPO / ".venv-openpi" / "bin" / "python"
GATEWAY_STATUS = "openpi_gateway: gateway"

CLIENT = r"""
import json, sys, time
import numpy as np
from openpi_client import websocket_client_policy as wcp
url, token, layout, n, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
policy = wcp.WebsocketClientPolicy(url, api_key=token)
rng = np.random.default_rng(seed)
img = lambda: rng.integers(0, 255, (224, 224, 3), dtype=np.uint8)
answers = []
for i in range(n):  # at a robot's control rate (10 Hz), as openpi's example clients call infer
    time.sleep(0.1)
    if layout == "libero":
        obs = {"observation/image": img(), "observation/wrist_image": img(),
               "observation/state": rng.normal(size=5).astype(np.float32), "prompt": "move the gripper to the goal"}
    else:
        obs = {"observation/exterior_image_1_left": img(), "observation/wrist_image_left": img(),
               "observation/joint_position": rng.normal(size=4), "observation/gripper_position": [0.5]}
    out = policy.infer(obs)
    a = out["actions"]
    answers.append({"shape": list(a.shape), "finite": bool(np.isfinite(a).all()), **out.get("physai", {})})
print(json.dumps({"meta": policy.get_server_metadata(), "answers": answers}))
"""

HOSTILE = r"""
import json, sys, time
import numpy as np
import websockets.sync.client as ws
from websockets.exceptions import InvalidStatus, ConnectionClosed
from openpi_client import msgpack_numpy
url, token = sys.argv[1], sys.argv[2]
seen = {}
def status(headers):
    try:
        ws.connect(url, additional_headers=headers, open_timeout=30).close()
        return 101
    except InvalidStatus as e:
        return e.response.status_code
seen["no_token"] = status(None)
seen["wrong_token"] = status({"Authorization": "Api-Key physai_" + "A" * 43})
a = ws.connect(url, additional_headers={"Authorization": f"Api-Key {token}"}, open_timeout=30, max_size=None)
msgpack_numpy.unpackb(a.recv())
seen["second"] = status({"Authorization": f"Api-Key {token}"})
a.send(b"\xc1"); seen["malformed"] = a.recv()
time.sleep(0.1)
a.send(msgpack_numpy.packb({"observation/image": np.zeros((224, 224), np.float32)})); seen["bad_image"] = a.recv()
for _ in range(8):  # a flood: the messages beyond the burst (max_burst) are refused
    a.send(b"\xc1")
seen["flood"] = [a.recv() for _ in range(8)]
try:
    a.send(b"\x00" * 3_000_000); a.recv()
except ConnectionClosed as e:
    seen["huge"] = e.rcvd.code if e.rcvd is not None else None
print(json.dumps(seen))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fleet(tmp_path: Path, port: int) -> Path:
    doc = yaml.safe_load(default_fleet_path().read_text())
    ros, gw = doc["robots"][0], doc["robots"][1]
    doc["robots"] = [ros, gw, dict(gw, id="robot_2")]
    doc["gateway"] = {"openpi": {"port": port, "max_message_bytes": 1_000_000, "max_rate_hz": 20, "max_burst": 3,
                                 "robots": {"robot_1": {"layout": "libero", "fallback": "hold"},
                                            "robot_2": {"layout": "droid", "fallback": "hold"}}}}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.skipif(not OPENPI_PY.exists(), reason="no .venv-openpi: make test sets it up "
                    "(bench/openpi_baseline/setup_venv.sh)")
def test_openpi_clients_are_served_beside_a_ros_robot_and_hostile_traffic_is_refused(tmp_path):
    port = _free_port()
    url = f"ws://127.0.0.1:{port}"
    summary, logs = tmp_path / "summary.json", tmp_path / "logs"
    fleet = subprocess.Popen([sys.executable, "-m", "physai_ros.fleet", "--fleet", str(_fleet(tmp_path, port)),
                              "--duration", "600", "--summary-json", str(summary), "--log-dir", str(logs),
                              "--contact-sheet", str(tmp_path / "s.png")],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ))
    spun = SpunNode("openpi_gateway_test")
    diag: dict = {}

    def on_diag(arr):
        for st in arr.status:
            if st.name == GATEWAY_STATUS:
                diag.update({kv.key: kv.value for kv in st.values})
    from diagnostic_msgs.msg import DiagnosticArray
    spun.node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 50)
    # The ROS robot's own progress, from its trajectory controller: on a busy machine its sim
    # and cameras can start after the gateway's clients have finished, so the test waits for it.
    from physai_ros_interfaces.msg import ExecutionInfo
    from physai_ros.ros.qos import sensor_data_qos
    accepted = {"robot_0": 0}
    spun.node.create_subscription(
        ExecutionInfo, "/robot_0/execution_info",
        lambda m: accepted.__setitem__("robot_0", max(accepted["robot_0"], m.chunks_accepted)), sensor_data_qos(10))
    try:
        gateway_log = logs / "openpi_gateway.log"
        wait_for(lambda: gateway_log.exists() and "openpi gateway listening on" in gateway_log.read_text(),
                 120.0, "the gateway listening", lambda: gateway_log.read_text() if gateway_log.exists() else "")
        ks = Keystore(auto_keystore_dir())
        tokens = {r: robot_token(ks, r) for r in ("robot_1", "robot_2")}
        clients = [subprocess.Popen([str(OPENPI_PY), "-c", CLIENT, url, tokens[r], layout, "6", str(k)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for k, (r, layout) in enumerate((("robot_1", "libero"), ("robot_2", "droid")))]
        results = []
        for c in clients:
            out, err = c.communicate(timeout=scaled(180))
            assert c.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
        for robot, res in zip(("robot_1", "robot_2"), results):
            assert res["meta"]["robot_id"] == robot and res["meta"]["joints"][-1] == "gripper"
            answers = res["answers"]
            assert len(answers) == 6 and all(a["finite"] and a["shape"][1] == 5 for a in answers), answers
            rounds = [a["round_id"] for a in answers]
            assert rounds == sorted(rounds) and len(set(rounds)) == 6 and all(a["robot_id"] == robot for a in answers)
            # Answered by the engine (a hold fallback has no engine instance), at the chunk's length.
            assert sum("engine_instance" in a for a in answers) >= 4, answers
            assert {a["shape"][0] for a in answers if "engine_instance" in a} == {10}, answers

        hostile = subprocess.run([str(OPENPI_PY), "-c", HOSTILE, url, tokens["robot_1"]], capture_output=True,
                                 text=True, timeout=scaled(120))
        assert hostile.returncode == 0, hostile.stderr[-3000:]
        seen = json.loads(hostile.stdout.strip().splitlines()[-1])
        assert seen["no_token"] == 401 and seen["wrong_token"] == 401 and seen["second"] == 409, seen
        assert seen["malformed"].startswith("refused (malformed)"), seen
        assert seen["bad_image"].startswith("refused (bad_image)"), seen
        assert any(m.startswith("refused (rate_limited)") for m in seen["flood"]), seen
        assert seen["huge"] == 1009, seen
        wait_for(lambda: all(int(diag.get(f"refused.{r}", 0)) >= 1 for r in (
            "missing_token", "wrong_token", "already_connected", "malformed", "bad_image", "rate_limited",
            "too_large")), 30.0, "the refusals counted on /diagnostics", lambda: str(diag))

        # After all that, robot_1 is served again on a fresh connection.
        again = subprocess.run([str(OPENPI_PY), "-c", CLIENT, url, tokens["robot_1"], "libero", "2", "9"],
                               capture_output=True, text=True, timeout=scaled(120))
        assert again.returncode == 0, again.stderr[-3000:]
        assert len(json.loads(again.stdout.strip().splitlines()[-1])["answers"]) == 2
        wait_for(lambda: accepted["robot_0"] > 0, 120.0, "robot_0 (the ROS robot) executing a chunk",
                 lambda: str(accepted))
    finally:
        spun.close()
        fleet.send_signal(signal.SIGINT)
        try:
            out, _ = fleet.communicate(timeout=scaled(90))
        except subprocess.TimeoutExpired:
            fleet.kill()
            out, _ = fleet.communicate()
    text = out.decode(errors="replace")
    report = json.loads(summary.read_text())
    robots = {r["id"]: r for r in report["robots"]}
    assert robots["robot_0"]["rounds"] > 0 and robots["robot_0"]["chunks_executed"] > 0, (robots, text[-3000:])
    # The gateway's robots in the summary, from its client_status: every round over all connections.
    # (8 rounds for robot_1, 6 for robot_2, up to 2 of each answered by the fallback instead)
    assert robots["robot_1"]["rounds"] >= 6 and robots["robot_2"]["rounds"] >= 4, robots
    assert robots["robot_1"]["latency_ms_p50"] is not None and robots["robot_1"]["refused_inputs"] >= 2, robots
    assert "Traceback" not in (logs / "openpi_gateway.log").read_text()
