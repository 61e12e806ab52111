"""ROSA §3.4 factory scheduler: steady-state solver (placement, routing, batching, request rates)
and runtime adaptation (admission, hot-standby failover)."""
from physai_ros.scheduler.factory.admission import AdmissionDecision, admit, failover, release
from physai_ros.scheduler.factory.colocation import hosted_components
from physai_ros.scheduler.factory.solver import solve
from physai_ros.scheduler.factory.types import (
    COMPONENTS, CONTINUOUS, GOAL_COUPLED, OBLIGATION, STATIC, ComponentSpec, FactoryProblem, FactorySchedule,
    ModelProfile, ProfilePoint, Route, ServerAssignment, ServerPool, TaskClass,
)

__all__ = [
    "AdmissionDecision", "admit", "failover", "hosted_components", "release", "solve",
    "COMPONENTS", "CONTINUOUS", "GOAL_COUPLED", "OBLIGATION", "STATIC", "ComponentSpec", "FactoryProblem",
    "FactorySchedule", "ModelProfile", "ProfilePoint", "Route", "ServerAssignment", "ServerPool", "TaskClass",
]
