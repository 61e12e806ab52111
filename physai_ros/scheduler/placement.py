"""Edge/cloud placement and batching of an ordered request list (Kairos §3.2.3, Alg. 1 l.15-19).

Only idle instances get a batch (an instance runs one batch at a time, pi0 has no
continuous batching across diffusion steps). Each batch holds at most the instance's cap: the
saturation point of its latency-vs-batch profile, bounded by the engine's max_batch.
The edge tier takes the first N_e requests (N_e = total free edge slots). Each later request
would queue on the edge behind the edge's current and already-queued batches; it goes to an
idle cloud instance instead (at most N_c go there) when:
  placement_rule="paper" (default; Alg. 1 l.17, §3.2.3): the cloud latency, network round trip
      included, is lower than its expected queueing delay at the edge (the time until an edge
      instance can start it);
  placement_rule="completion" (our earlier reading): its completion on the cloud is earlier than
      its completion on the edge, i.e. the edge's own compute time is added to the edge side.
Worked example (docs/scheduler.md, test_cloud_offload_rule_worked_example): edge busy for
0.15 s more, edge batch 0.10 s, cloud RTT 0.10 s + compute 0.08 s. Paper: 0.18 < 0.15 is false,
the request waits for the edge and completes at 0.25 s; completion rule: 0.18 < 0.25, it goes to
the cloud and completes at 0.18 s. The paper's rule offloads only when the queue alone already
costs more than the whole cloud trip: more conservative, it keeps requests on the edge where
the paper's deployments prefer them (§3.2.3), at the price of some completion time.
"""
from __future__ import annotations

import heapq
from typing import Sequence, TypeVar

from physai_ros.scheduler.types import EngineInstanceInfo

T = TypeVar("T")

IDLE_EPS_S = 1e-9
PLACEMENT_RULES = ("paper", "completion")


def place(ordered: Sequence[T], instances: Sequence[EngineInstanceInfo], now: float,
          saturation_tolerance: float = 0.05, rule: str = "paper") -> list[tuple[EngineInstanceInfo, list[T]]]:
    """Assign a prefix-and-overflow subset of `ordered` to idle instances.

    Returns (instance, items) for every instance that got at least one item, in instance order
    of appearance. Items not returned stay queued.
    """
    if not ordered:
        return []
    edge = [i for i in instances if i.tier != "cloud"]
    cloud = [i for i in instances if i.tier == "cloud"]
    caps = {id(i): i.batch_cap(saturation_tolerance) for i in instances}
    out: dict[int, list[T]] = {}

    # Edge first: fill idle edge instances in the given order.
    n = len(ordered)
    pos = 0
    for inst in edge:
        if inst.busy_until > now + IDLE_EPS_S or pos >= n:
            continue
        end = min(n, pos + caps[id(inst)])
        out[id(inst)] = [ordered[j] for j in range(pos, end)]
        pos = end

    idle_cloud = [c for c in cloud if c.busy_until <= now + IDLE_EPS_S]
    if pos < n and idle_cloud:
        # Virtual edge queue: when will each edge instance be able to start its next batch?
        heap: list[tuple[float, int, int]] = []  # (free_at, index, slots left in that batch)
        for k, inst in enumerate(edge):
            assigned = len(out.get(id(inst), ()))
            free_at = now + inst.service_time(assigned) if assigned else max(now, inst.busy_until)
            heap.append((free_at, k, caps[id(inst)]))
        heapq.heapify(heap)
        cloud_slots = [(c, caps[id(c)]) for c in idle_cloud]
        ci = 0
        for j in range(pos, n):
            if ci >= len(cloud_slots):
                break
            item = ordered[j]
            if heap:
                free_at, k, slots = heap[0]
                einst = edge[k]
                edge_delay = free_at - now  # expected queueing delay at the edge
                if rule == "completion":
                    edge_delay += einst.service_time(einst.batch_cap(saturation_tolerance))
            else:
                edge_delay = float("inf")
            cinst, ccap = cloud_slots[ci]
            n_c = len(out.get(id(cinst), ()))
            if cinst.service_time(n_c + 1) < edge_delay:  # cloud latency, network included
                out.setdefault(id(cinst), []).append(item)
                if n_c + 1 >= ccap:
                    ci += 1
            elif heap:
                # Stays queued for the edge: it takes a slot of that future edge batch.
                heapq.heapreplace(heap, (free_at, k, slots - 1) if slots > 1 else
                                  (free_at + einst.service_time(caps[id(einst)]), k, caps[id(einst)]))
    return [(i, out[id(i)]) for i in instances if out.get(id(i))]
