"""Measured latency-vs-batch profiles kept between starts of the policy server.

Measuring the profile at start-up took 59 s of a busy 2-core machine's first `make demo` (every
batch size run twice through the real model). What it measures depends only on the machine, the
model and the measurement, so the server keeps it in the user's cache folder keyed by all of
those, and a later start with the same key takes it from there (after one warm-up call) instead
of measuring again. A key holds: the CPU model and core count, torch's version and thread count,
the device and dtype, the model section of fleet.yaml and the checkpoint files' sizes and times,
the engine's config, the instance and the measurement's parameters. Entries older than MAX_AGE_S are measured
again (a machine's load and software drift); `server.profile.cache: false` never reads one. The key
cannot hold the load the measurement ran under, so a cached profile is also measured again when
this start's own warm-up call disagrees with it (`agrees_with_warm_up`): one measured under a
benchmark's load (3.3 s for a sim_pi0 call that takes 50-70 ms idle) held the demo's dispatches
back for a week.

    $XDG_CACHE_HOME/physai_ros/profiles/<key>.json   (~/.cache when unset)
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from physai_ros.scheduler.types import LatencyProfile

MAX_AGE_S = 7 * 24 * 3600.0
# A cached batch-1 latency this many times the warm-up call's own time came from a busier machine
# (the first call is the slow one: lazy inits, cold caches; steady calls are faster, never slower).
WARM_UP_FACTOR = 3.0
ENV_DIR = "PHYSAI_ROS_PROFILE_CACHE"  # tests point the cache elsewhere


def cache_dir() -> Path:
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "physai_ros" / "profiles"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _files(checkpoint: str | None) -> list:
    if not checkpoint or not Path(checkpoint).exists():
        return []
    root = Path(checkpoint)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return [[str(p.relative_to(root) if p != root else p.name), p.stat().st_size, p.stat().st_mtime_ns]
            for p in files]


def profile_key(*, model: Any, checkpoint: str | None, engine_config: Any, device: str, dtype: str,
                threads: int, measurement: Any) -> str:
    import torch

    doc = {"cpu": _cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__, "threads": threads,
           "device": device, "dtype": dtype, "model": repr(model), "files": _files(checkpoint),
           "engine": repr(engine_config), "measurement": repr(measurement)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


def load(key: str, now: float | None = None) -> tuple[LatencyProfile, Path] | None:
    """The cached profile and its file, or None (absent, unreadable, or older than MAX_AGE_S)."""
    path = cache_dir() / f"{key}.json"
    try:
        doc = json.loads(path.read_text())
        if (time.time() if now is None else now) - float(doc["measured_at"]) > MAX_AGE_S:
            return None
        return LatencyProfile.from_pairs(doc["profile"]), path
    except (OSError, ValueError, KeyError, TypeError):  # a damaged entry is measured again
        return None


def store(key: str, profile: LatencyProfile, took_s: float) -> Path | None:
    """Written atomically; a cache folder that cannot be written costs only the next start's time."""
    path = cache_dir() / f"{key}.json"
    doc = {"measured_at": time.time(), "took_s": took_s, "profile": profile.to_pairs()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(doc))
        tmp.replace(path)
    except OSError:
        return None
    return path


def agrees_with_warm_up(profile: LatencyProfile, warm_up_s: float) -> bool:
    """Whether a cached profile fits this start: its batch-1 latency is at most WARM_UP_FACTOR
    times the warm-up call's (batch 1, measured now)."""
    return profile.latency(1) <= WARM_UP_FACTOR * warm_up_s
