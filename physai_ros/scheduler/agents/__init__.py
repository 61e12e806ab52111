"""Kairos multi-agent language-request scheduling: workflow analysis from system
identifiers, per-agent latency distributions, agent priority by Wasserstein + 1-D MDS, priority
queues, and a memory-aware time-slot dispatcher. Pure Python plain data; see each module."""
from physai_ros.scheduler.agents.dispatcher import (
    InstanceSpec,
    MemoryDemand,
    Placement,
    RoundRobinDispatcher,
    TimeSlotDispatcher,
)
from physai_ros.scheduler.agents.latency_dist import (
    AgentLatencyProfiler,
    ConvergenceCheck,
    ConvergenceConfig,
    LatencyDistribution,
    mode_of,
)
from physai_ros.scheduler.agents.ordering import LanguageRequest, RequestQueue, make_queue
from physai_ros.scheduler.agents.priority import AgentPriority, agent_priorities
from physai_ros.scheduler.agents.workflow import ExecRecord, Workflow, WorkflowAnalyzer, reconstruct

__all__ = [
    "InstanceSpec", "MemoryDemand", "Placement", "RoundRobinDispatcher", "TimeSlotDispatcher",
    "AgentLatencyProfiler", "ConvergenceCheck", "ConvergenceConfig", "LatencyDistribution", "mode_of",
    "LanguageRequest", "RequestQueue", "make_queue", "AgentPriority", "agent_priorities",
    "ExecRecord", "Workflow", "WorkflowAnalyzer", "reconstruct",
]
