"""How many aten ops one call dispatches (torch.profiler): the streaming tick's cost on a CPU is
op dispatch, not arithmetic, so its benchmark reports these and its tests bound them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

_GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


@dataclass(frozen=True)
class AtenOps:
    all: int  # every aten event, nested ones included
    top: int  # aten events with no aten caller (what Python dispatched)
    gemm: int  # top-level matrix products


def count_aten_ops(fn: Callable[[], object]) -> AtenOps:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = [e for e in prof.events() if e.name.startswith("aten::")]

    def top(e) -> bool:
        p = e.cpu_parent
        while p is not None:
            if p.name.startswith("aten::"):
                return False
            p = p.cpu_parent
        return True

    tops = [e for e in events if top(e)]
    return AtenOps(len(events), len(tops), sum(e.name in _GEMMS for e in tops))
