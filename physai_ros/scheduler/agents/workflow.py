"""Workflow reconstruction from system identifiers and remaining-latency samples (Kairos §4.1-§4.3).

In physai_ros a workflow (one msg_id) is one pipeline step of a robot: e.g. a safety check and a
monitor question in parallel, then a System 2 replan. Every language request of it is recorded
with Kairos's system identifiers: agent name, msg_id, upstream agent name and execution start/end
timestamps (ExecRecord).

Reconstruction (§4.2): each record's parent is the latest-finishing record of its upstream agent
in the same msg_id that ended no later than the child started (temporal causality disambiguates
repeated agents, e.g. a planner called twice). A parent with several children gets its call
pattern from a sweep line over the children's spans: children whose spans overlap form one
parallel group, groups follow each other sequentially (Fig. 11 (b), (d)).

Remaining latency (§4.3): for each request, time from its start to the end of the workflow's
last request. Each sample is tagged with its (agent, downstream path) and pooled into the agent's
distribution, which is therefore the union of its per-path sample sets: a path contributes in
proportion to how often it was taken (the paper's frequency-weighted merge, e.g. a safety check
that only sometimes triggers a replan). path_counts keeps the per-path frequencies.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from physai_ros.scheduler.agents.latency_dist import AgentLatencyProfiler


@dataclass(frozen=True)
class ExecRecord:
    """One executed request with its system identifiers (§4.1). upstream None: a workflow root."""
    agent: str
    msg_id: str
    upstream: Optional[str]
    start_s: float
    end_s: float

    def __post_init__(self) -> None:
        if self.end_s < self.start_s:
            raise ValueError(f"record ends before it starts: {self}")


@dataclass(frozen=True)
class Workflow:
    """Reconstructed call graph of one msg_id.

    records: sorted by (start, end, agent). parent[i]: index of record i's parent or -1.
    groups[i]: record i's children as sequential stages, each a tuple of parallel child indices.
    """
    msg_id: str
    records: Tuple[ExecRecord, ...]
    parent: Tuple[int, ...]
    groups: Tuple[Tuple[Tuple[int, ...], ...], ...]

    @property
    def end_s(self) -> float:
        return max(r.end_s for r in self.records)

    def remaining_latency(self, i: int) -> float:
        """Time from request i's start to the end of the workflow's last request."""
        return self.end_s - self.records[i].start_s

    def path_of(self, i: int) -> Tuple[str, ...]:
        """Downstream path key of request i: agents of its descendants in start order."""
        out: List[int] = []
        stack = [i]
        while stack:
            j = stack.pop()
            for stage in self.groups[j]:
                for c in stage:
                    out.append(c)
                    stack.append(c)
        out.sort(key=lambda c: (self.records[c].start_s, self.records[c].agent))
        return tuple(self.records[c].agent for c in out)


def _sweep_groups(children: Sequence[int], records: Sequence[ExecRecord]) -> Tuple[Tuple[int, ...], ...]:
    """Sweep line over child spans: overlapping spans are one parallel stage. Spans that only
    touch (one ends exactly when the next starts) are sequential."""
    order = sorted(children, key=lambda c: (records[c].start_s, records[c].end_s))
    stages: List[List[int]] = []
    stage_end = float("-inf")
    for c in order:
        r = records[c]
        if stages and r.start_s < stage_end:
            stages[-1].append(c)
            stage_end = max(stage_end, r.end_s)
        else:
            stages.append([c])
            stage_end = r.end_s
    return tuple(tuple(s) for s in stages)


def reconstruct(msg_id: str, records: Sequence[ExecRecord]) -> Workflow:
    """Call graph of one workflow from its records (§4.2)."""
    if not records:
        raise ValueError(f"workflow {msg_id!r} has no records")
    if any(r.msg_id != msg_id for r in records):
        raise ValueError(f"records of another msg_id in workflow {msg_id!r}")
    recs = tuple(sorted(records, key=lambda r: (r.start_s, r.end_s, r.agent)))
    parent = [-1] * len(recs)
    by_agent: Dict[str, List[int]] = defaultdict(list)
    for i, r in enumerate(recs):
        by_agent[r.agent].append(i)
    for i, r in enumerate(recs):
        if r.upstream is None:
            continue
        cands = [j for j in by_agent.get(r.upstream, ()) if j != i and recs[j].end_s <= r.start_s]
        if not cands:
            raise ValueError(f"{msg_id!r}: no finished {r.upstream!r} before {r.agent!r} at {r.start_s}")
        parent[i] = max(cands, key=lambda j: (recs[j].end_s, recs[j].start_s))
    children: Dict[int, List[int]] = defaultdict(list)
    for i, p in enumerate(parent):
        if p >= 0:
            children[p].append(i)
    groups = tuple(_sweep_groups(children[i], recs) if children.get(i) else () for i in range(len(recs)))
    return Workflow(msg_id, recs, tuple(parent), groups)


class WorkflowAnalyzer:
    """Collects records per msg_id; on `complete`, reconstructs the workflow and feeds the
    profiler (single-request latency per record, remaining latency per record and path)."""

    def __init__(self, profiler: AgentLatencyProfiler, record_single: bool = True) -> None:
        """record_single=False: the caller records single-request latencies as requests finish."""
        self.profiler = profiler
        self.record_single = record_single
        self._open: Dict[str, List[ExecRecord]] = defaultdict(list)
        self.path_counts: Counter = Counter()      # (agent, path) -> workflows seen
        self.completed = 0

    def add(self, record: ExecRecord) -> None:
        self._open[record.msg_id].append(record)

    def complete(self, msg_id: str) -> Optional[Workflow]:
        """The workflow ended (the application said so): analyse it. None if nothing recorded."""
        records = self._open.pop(msg_id, None)
        if not records:
            return None
        wf = reconstruct(msg_id, records)
        for i, r in enumerate(wf.records):
            if self.record_single:
                self.profiler.add_single(r.agent, r.end_s - r.start_s)
            self.profiler.add_remaining(r.agent, wf.remaining_latency(i))
            self.path_counts[(r.agent, wf.path_of(i))] += 1
        self.completed += 1
        return wf

    def discard(self, msg_id: str) -> None:
        """A workflow that will not complete (its application left): forget its records."""
        self._open.pop(msg_id, None)

    def open_workflows(self) -> int:
        return len(self._open)

    def path_frequencies(self, agent: str) -> Dict[Tuple[str, ...], float]:
        """Share of each downstream path among the agent's recorded requests."""
        counts = {p: n for (a, p), n in self.path_counts.items() if a == agent}
        total = sum(counts.values())
        return {p: n / total for p, n in counts.items()} if total else {}
