"""Test hook: make an engine slot fail on chosen batches, in a real server process.

Fault tests need an engine that fails at a known point without patching code inside the process
under test. The server calls this module's `attach` through its slot hook (physai_ros.serving.
slot_hook) when the environment says so, and `attach` reads PHYSAI_FAULT_INJECTION:

    PHYSAI_SLOT_HOOK="physai_lab.fault_injection:attach"
    PHYSAI_FAULT_INJECTION="engine_0:raise@3,engine_0:die@6"      (both: fault_env(spec))

  raise@k  the k-th batch the slot runs raises InjectedEngineError (an ordinary Exception, as a
           CUDA OOM or a bad kernel would): those requests get ERROR chunks, the instance lives on.
  die@k    the k-th batch raises InjectedInstanceDeath (a BaseException, not caught by
           `except Exception`): the instance's thread dies, as with a fatal driver error.
  stall@k  the k-th batch blocks for STALL_S before it runs, as a hung kernel or a very long
           batch would (a node must still stop within its budget: physai_ros.ros.spin); it
           says so on stderr first, so a test knows the engine thread is inside the batch.
  slow@k   from the k-th batch on, every batch waits SLOW_S before it runs, as a throttled GPU or a
           neighbour's load would make it: the slot's measured service times drift (the factory
           plan's online profile); said once on stderr.

Batches count from 1 and only batches served by ServingCore.run_batch count (not the start-up
profile or warm-up).
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

ENV_VAR = "PHYSAI_FAULT_INJECTION"
HOOK = "physai_lab.fault_injection:attach"
KINDS = ("raise", "die", "stall", "slow")
STALL_S = 600.0
SLOW_S = 0.25


class InjectedEngineError(RuntimeError):
    """An injected engine failure on one batch (the instance stays usable)."""


class InjectedInstanceDeath(BaseException):
    """An injected fatal failure: the instance's thread ends with it."""


@dataclass
class FaultPlan:
    """Which batch numbers of one slot fail, and how."""

    raise_on: frozenset[int] = frozenset()
    die_on: frozenset[int] = frozenset()
    stall_on: frozenset[int] = frozenset()
    slow_on: frozenset[int] = frozenset()  # slow from the first of these batches on
    fired: list[str] = field(default_factory=list)

    def before_batch(self, instance_id: str, batch_no: int) -> None:
        if self.slow_on and batch_no >= min(self.slow_on):
            if not any(f.startswith("slow@") for f in self.fired):
                self.fired.append(f"slow@{batch_no}")
                print(f"{ENV_VAR}: {instance_id} slowed by {SLOW_S:g} s a batch from batch {batch_no} on",
                      file=sys.stderr, flush=True)
            time.sleep(SLOW_S)
        if batch_no in self.stall_on:
            self.fired.append(f"stall@{batch_no}")
            print(f"{ENV_VAR}: stalling {instance_id} on batch {batch_no} for {STALL_S:g} s",
                  file=sys.stderr, flush=True)
            time.sleep(STALL_S)
        if batch_no in self.die_on:
            self.fired.append(f"die@{batch_no}")
            raise InjectedInstanceDeath(f"injected death of {instance_id} on batch {batch_no}")
        if batch_no in self.raise_on:
            self.fired.append(f"raise@{batch_no}")
            raise InjectedEngineError(f"injected failure of {instance_id} on batch {batch_no}")


def parse_fault_spec(spec: str) -> dict[str, FaultPlan]:
    """`"engine_0:raise@3,engine_1:die@2,engine_0:stall@5"` -> {instance_id: FaultPlan}. Raises
    ValueError with the offending item for anything else (a typo must not silently test nothing)."""
    plans: dict[str, dict[str, set[int]]] = {}
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        iid, sep, what = item.partition(":")
        kind, at, num = what.partition("@")
        if not (iid and sep and at and kind in KINDS and num.isdigit() and int(num) >= 1):
            raise ValueError(f"{ENV_VAR}: bad item {item!r}; expected <instance_id>:<kind>@<k> with kind "
                             f"one of {', '.join(KINDS)} and k >= 1")
        plans.setdefault(iid, {k: set() for k in KINDS})[kind].add(int(num))
    return {iid: FaultPlan(*(frozenset(p[k]) for k in KINDS)) for iid, p in plans.items()}


def faults_from_env(environ: dict | None = None) -> dict[str, FaultPlan]:
    return parse_fault_spec((os.environ if environ is None else environ).get(ENV_VAR, ""))


def fault_env(spec: str) -> dict[str, str]:
    """The environment a server process needs to run `spec`'s faults."""
    return {"PHYSAI_SLOT_HOOK": HOOK, ENV_VAR: spec}


def attach(slots: list) -> None:
    """The slot hook: each slot PHYSAI_FAULT_INJECTION names fails as its plan says; naming a slot
    the server does not have is an error (a typo must not silently test nothing)."""
    plans = faults_from_env()
    unknown = sorted(set(plans) - {s.instance_id for s in slots})
    if unknown:
        raise ValueError(f"{ENV_VAR}: no engine instance {unknown[0]!r} "
                         f"(instances: {[s.instance_id for s in slots]})")
    for s in slots:
        plan = plans.get(s.instance_id)
        s.before_batch = plan.before_batch if plan is not None else None
