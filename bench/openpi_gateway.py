"""openpi's clients, N at once, served two ways in one run at equal model time:
  openpi   openpi's serving pattern (bench/openpi_baseline/server.py in .venv-openpi: one request at
           a time on one asyncio loop), with a stand-in model (bench/physai_bench/model_time.py) of our engine's
           time for one robot as measured in this run, so both pay the same model time per request;
  gateway  physai-fleet with the openpi gateway: every client is a fleet.yaml robot, batched and
           scheduled by the policy server's real engine (the shipped sim_pi0 on this machine);
           @b1 with server.max_batch 1 (one at a time, as openpi serves), @b8 batching.
The same load generator drives both (bench/openpi_baseline/client.py: openpi-client from PyPI, one
WebsocketClientPolicy per robot, closed loop, two 224x224 views). Reported per N: round-trip p50 and
p99 and chunks per second, and the gateway's ratios to openpi. A round the gateway's engine answers
past the task's SLO (2 s) gets the fallback (the state held; counted as "late", no engine time);
openpi has no SLO and waits however long its queue is. What the batch can buy depends on
the engine's batch curve (printed from the server's profile): on a CPU a batch of b costs about b
times one, so the gateway cannot multiply throughput there; on a GPU the curve is flat.

  bench/openpi_baseline/setup_venv.sh     # once: .venv-openpi
  python bench/openpi_gateway.py --clients 1,4,16 --rounds 20 [--json bench/results/openpi_gateway.json]
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from physai_bench import results

ROOT = Path(__file__).resolve().parents[1]
OPENPI_PY = ROOT / ".venv-openpi" / "bin" / "python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_clients(port: int, n: int, rounds: int, layout: str, tokens: list | None, tmp: Path) -> dict:
    cmd = [str(OPENPI_PY), str(ROOT / "bench/openpi_baseline/client.py"), "--port", str(port), "--robots", str(n),
           "--views", "2", "--rounds", str(rounds), "--warmup", "2", "--layout", layout]
    if tokens is not None:
        (tmp / "tokens.json").write_text(json.dumps(tokens[:n]))
        cmd += ["--tokens", str(tmp / "tokens.json")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"load generator failed:\n{out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    rtt, infer = np.asarray(res["rtt_ms"]), np.asarray(res["infer_ms"], dtype=float)
    return {"p50_ms": round(float(np.percentile(rtt, 50)), 1), "p99_ms": round(float(np.percentile(rtt, 99)), 1),
            "chunks_per_s": round(len(rtt) / res["wall_s"], 2), "answers": int(len(rtt)),
            "engine_ms_p50": round(float(np.nanmedian(infer)), 1) if np.isfinite(infer).any() else None,
            # answered by the task's fallback (the state held) past the SLO: no engine time
            "late": int(np.count_nonzero(~np.isfinite(infer)))}


def gateway_fleet(tmp: Path, n: int, port: int, max_batch: int) -> Path:
    doc = yaml.safe_load((ROOT / "config/fleet.yaml").read_text())
    doc["server"]["max_batch"] = max_batch
    template = doc["robots"][1]  # two 224x224 cameras, five joints
    doc["robots"] = [dict(template, id=f"robot_{k}") for k in range(n)]
    doc["gateway"] = {"openpi": {"port": port, "max_connections": n + 4, "max_rate_hz": 1000,
                                 "robots": {f"robot_{k}": {"layout": "libero", "fallback": "hold"} for k in range(n)}}}
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def start_gateway(tmp: Path, n: int, max_batch: int) -> tuple[subprocess.Popen, int, str]:
    port = free_port()
    logs = tmp / f"logs_b{max_batch}"
    proc = subprocess.Popen([sys.executable, "-m", "physai_ros.fleet", "--fleet", str(gateway_fleet(tmp, n, port, max_batch)),
                             "--duration", "7200", "--log-dir", str(logs), "--contact-sheet", str(tmp / "s.png")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    log = logs / "openpi_gateway.log"
    end = time.monotonic() + 300
    while not (log.exists() and "openpi gateway listening on" in log.read_text()):
        if proc.poll() is not None or time.monotonic() > end:
            raise SystemExit("the fleet did not start its gateway")
        time.sleep(0.5)
    profile = re.search(r"profiles engine_0: ([^)\n]*)", (logs / "policy_server.log").read_text())
    return proc, port, profile.group(1) if profile else ""


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--max-batch", default="8,1", help="the gateway's server.max_batch values, one run each "
                    "(1: served one at a time, as openpi does: the gateway's own cost at equal model time)")
    ap.add_argument("--quick", action="store_true", help="one client, 3 rounds")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.quick:
        args.clients, args.rounds = "1", 3
    if not OPENPI_PY.exists():
        raise SystemExit("no .venv-openpi: run bench/openpi_baseline/setup_venv.sh first")
    from physai_ros.security.config import auto_keystore_dir
    from physai_ros.security.gateway_token import robot_token
    from physai_ros.security.keystore import Keystore

    ns = [int(x) for x in args.clients.split(",")]
    run = results.start_run(f"physai-fleet with the openpi gateway (the shipped sim_pi0 on this CPU) vs openpi's "
                            f"serving pattern with a stand-in model of the engine's one-robot time; openpi-client "
                            f"from PyPI, {args.rounds} closed-loop rounds per client, two 224x224 views", __file__,
                            argv, quick=args.quick)
    with tempfile.TemporaryDirectory(prefix="openpi_gateway_bench_") as d:
        tmp = Path(d)
        rows = [{"clients": n} for n in ns]
        batches = [int(x) for x in args.max_batch.split(",")]
        for b in batches:
            fleet, port, profile = start_gateway(tmp, max(ns), b)
            try:
                ks = Keystore(auto_keystore_dir())
                tokens = [robot_token(ks, f"robot_{k}") for k in range(max(ns))]
                for row in rows:
                    row[f"gateway@b{b}"] = run_clients(port, row["clients"], args.rounds, "libero", tokens, tmp)
            finally:
                stop(fleet)
        # openpi's stand-in model: the engine's own time for one robot, measured in this run (the
        # one-client round served alone), so both sides pay the same model time per request.
        alone = rows[0][f"gateway@b{min(batches)}"]["engine_ms_p50"]
        batch1_ms = alone if alone else float(re.match(r"1:([\d.]+)ms", profile).group(1))
        anchor_port = free_port()
        anchor = subprocess.Popen([str(OPENPI_PY), str(ROOT / "bench/openpi_baseline/server.py"), "--port",
                                   str(anchor_port), "--horizon", "10", "--action-dim", "5", "--model-ms", str(batch1_ms)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert anchor.stdout.readline().strip() == "ready"
            for row in rows:
                row["openpi"] = run_clients(anchor_port, row["clients"], args.rounds, "anchor", None, tmp)
        finally:
            anchor.terminate()
            anchor.wait(timeout=30)
    systems = [f"gateway@b{b}" for b in batches]
    for row in rows:
        o = row["openpi"]
        row["ratio_to_openpi"] = {s: {"p50": round(row[s]["p50_ms"] / o["p50_ms"], 2),
                                      "p99": round(row[s]["p99_ms"] / o["p99_ms"], 2),
                                      "chunks_per_s": round(row[s]["chunks_per_s"] / o["chunks_per_s"], 2)}
                                  for s in systems}
    doc = results.write_result(args.json, run, {"engine_profile": profile, "openpi_model_ms": batch1_ms,
                                                "rounds_per_client": args.rounds, "rows": rows})
    print(f"engine batch curve (policy server profile): {profile}; openpi's stand-in model {batch1_ms:g} ms "
          f"(the engine's time for {rows[0]['clients']} client(s) alone in this run)")
    print(f"{'clients':>7} {'system':>12} | {'p50 ms':>8} {'p99 ms':>8} {'chunks/s':>8} {'late':>5} | "
          f"to openpi: p50 p99 chunks/s")
    for row in rows:
        for s in ["openpi"] + systems:
            m = row[s]
            r = row["ratio_to_openpi"].get(s)
            print(f"{row['clients']:>7} {s:>12} | {m['p50_ms']:>8.1f} {m['p99_ms']:>8.1f} {m['chunks_per_s']:>8.2f} "
                  f"{m['late']:>5} | "
                  + (f"{r['p50']:>5} {r['p99']:>5} {r['chunks_per_s']:>5}" if r else ""))
    print(f"commit {doc['commit']}, load {doc['load_average']['start']} -> {doc['load_average']['end']}")


if __name__ == "__main__":
    main()
