"""fleet.yaml's per-task `chunk_merge`: how consecutive action chunks join (docs/rtc.md).

- `off` (default): the controller replaces the old plan from the new chunk's first node on
  (control.trajectory_buffer's `replace`), as before this option existed;
- `crossfade`: the controller blends the old plan into the new chunk over `crossfade_s`;
- `rtc`: real-time chunking (Black et al. 2025): the server denoises each chunk so that the
  actions due before it arrives equal the previous chunk's, and the following ones stay close to
  it (engine/rtc.py); the controller then switches to the new chunk where it lands, with no blend.

Plain data and parsing only (no torch): robot-side nodes load fleet.yaml too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from physai_ros.config_fields import FleetConfigError, integer, join_key, mapping, no_unknown, number, string

CHUNK_MERGES = ("off", "crossfade", "rtc")
# engine.rtc.SCHEDULES, repeated so that loading fleet.yaml never imports torch (a test checks
# that the two agree).
RTC_SCHEDULES = ("exp", "linear", "ones", "zeros")
RTC_JACOBIANS = ("vjp", "identity")  # engine.rtc.JACOBIANS
_KEYS = {
    "off": {"name"},
    "crossfade": {"name", "crossfade_s"},
    "rtc": {"name", "execution_horizon", "max_guidance_weight", "schedule", "latency_window", "jacobian"},
}


@dataclass(frozen=True)
class ChunkMergeConfig:
    """name: off | crossfade | rtc.
    crossfade_s: crossfade: the blend window, seconds (the controller's `crossfade_s`).
    execution_horizon: rtc: s, the first action of a chunk no longer guided towards the previous
      one (None: as far as the previous chunk reaches); at most the model's chunk size.
    max_guidance_weight: rtc: beta, the clip of the guidance weight.
    schedule: rtc: the soft mask's ramp, exp (the paper's) | linear | ones | zeros.
    latency_window: rtc: the inference delay comes from the largest of the robot's last this
      many measured latencies (LeRobot uses the largest seen).
    jacobian: rtc: vjp (the paper: guidance differentiates through the model) | identity
      (LeRobot 0.6.1's J = I: pulls harder on a confident model, no backward pass)."""

    name: str = "off"
    crossfade_s: float = 0.05
    execution_horizon: int | None = None
    max_guidance_weight: float = 5.0
    schedule: str = "exp"
    latency_window: int = 20
    jacobian: str = "vjp"

    @property
    def rtc(self) -> bool:
        return self.name == "rtc"

    @property
    def controller_merge(self) -> str:
        """The trajectory buffer's merge rule (control.trajectory_buffer.MergeRule value)."""
        return "crossfade" if self.name == "crossfade" else "replace"


def parse_chunk_merge(v: Any, path: str) -> ChunkMergeConfig:
    """`off`, `crossfade`, `rtc`, or a mapping with `name` and that merge's parameters."""
    if v is None or v is False:  # YAML 1.1 reads a bare `off` as false
        return ChunkMergeConfig()
    if isinstance(v, str):
        return ChunkMergeConfig(name=string(v, path, CHUNK_MERGES))
    if not isinstance(v, dict):
        raise FleetConfigError(f"{path}: expected one of {list(CHUNK_MERGES)} or a mapping with `name`, got {v!r}")
    d = mapping(v, path)
    if "name" not in d:
        raise FleetConfigError(f"{path}.name: missing (required)")
    name = string(d["name"], join_key(path, "name"), CHUNK_MERGES)
    no_unknown(d, _KEYS[name], path)
    kw: dict[str, Any] = {"name": name}
    if "crossfade_s" in d:
        kw["crossfade_s"] = number(d["crossfade_s"], join_key(path, "crossfade_s"), allow_zero=True)
    if "execution_horizon" in d and d["execution_horizon"] is not None:
        kw["execution_horizon"] = integer(d["execution_horizon"], join_key(path, "execution_horizon"), 1)
    if "max_guidance_weight" in d:
        kw["max_guidance_weight"] = number(d["max_guidance_weight"], join_key(path, "max_guidance_weight"))
    if "schedule" in d:
        kw["schedule"] = string(d["schedule"], join_key(path, "schedule"), RTC_SCHEDULES)
    if "jacobian" in d:
        kw["jacobian"] = string(d["jacobian"], join_key(path, "jacobian"), RTC_JACOBIANS)
    if "latency_window" in d:
        kw["latency_window"] = integer(d["latency_window"], join_key(path, "latency_window"), 1)
    return ChunkMergeConfig(**kw)


def check_against_model(tasks, chunk_size: int) -> None:
    """The model's chunk size is known only once the server has loaded it: an `rtc` execution
    horizon beyond it is an error naming the key (FleetConfigError)."""
    for name, task in tasks.items():
        cm = task.chunk_merge
        if cm.rtc and cm.execution_horizon is not None and cm.execution_horizon > chunk_size:
            raise FleetConfigError(
                f"tasks.{name}.chunk_merge.execution_horizon: expected at most the model's chunk size "
                f"{chunk_size}, got {cm.execution_horizon}")
