"""The robot client's plain data: its state, the hold it asks the controller for, what a tick
returns, and its counters."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from physai_ros.protocol.observation import ObservationData


class ClientState(str, enum.Enum):
    UNREGISTERED = "unregistered"
    RUNNING = "running"
    STOPPED = "stopped"  # escalated: needs an operator


@dataclass(frozen=True)
class HoldCommand:
    """Publish a hold chunk: `num_actions` copies of `positions`, `dt` apart from `capture_time`.

    The controller refuses a chunk whose capture time is older than the last one it accepted, so
    a hold that keeps waiting for round r carries r's capture time (r is then still taken), and
    the hold spans until one SLO past now (the buffer drops the part already due)."""

    round_id: int
    positions: np.ndarray
    reason: str
    capture_time: float
    dt: float
    num_actions: int


@dataclass
class TickOutput:
    observation: ObservationData | None = None
    hold: HoldCommand | None = None
    register: bool = False


@dataclass
class ClientCounters:
    chunks_ok: int = 0
    refused: int = 0
    errors: int = 0
    slo_misses: int = 0
    slo_startup_misses: int = 0  # of slo_misses, those in the start-up grace (not escalated)
    fallbacks: dict[str, int] = field(default_factory=dict)
    registrations: int = 0
    server_restarts: int = 0
    latencies_s: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class ExecutionReport:
    """The controller's newest execution info, as the client received it."""

    received: float
    actions_remaining: int
    control_period: float
    exec_phase_start: float
    executing_round_id: int = 0
