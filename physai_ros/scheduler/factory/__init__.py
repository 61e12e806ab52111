"""ROSA §3.4 factory scheduler: steady-state solver (placement, routing, batching, request rates)
and runtime adaptation (admission, hot-standby failover).

The names below load on first use (PEP 562): the solver's modules import scipy.optimize (~0.4 s),
and every robot-side node reads fleet.yaml, whose schema needs only `types`."""
from importlib import import_module

_HOMES = {
    "admission": ("AdmissionDecision", "admit", "failover", "release"),
    "colocation": ("hosted_components",),
    "solver": ("solve",),
    "types": ("COMPONENTS", "CONTINUOUS", "GOAL_COUPLED", "OBLIGATION", "STATIC", "ComponentSpec", "FactoryProblem",
              "FactorySchedule", "ModelProfile", "ProfilePoint", "Route", "ServerAssignment", "ServerPool",
              "TaskClass"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)
