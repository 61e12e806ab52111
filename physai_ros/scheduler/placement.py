"""Edge/cloud placement and batching of an ordered request list (Kairos §3.2.3, Alg. 1 l.15-19).

Only idle instances get a batch (an instance runs one batch at a time, pi0 has no
continuous batching across diffusion steps). Each batch holds at most the instance's cap: the
saturation point of its latency-vs-batch profile, bounded by the engine's max_batch.
The edge tier takes the first N_e requests (N_e = total free edge slots). Each later request
goes to an idle cloud instance only if its completion there (network round trip + profile
latency at the cloud batch size) is earlier than its expected completion on the edge, where it
would queue behind the edge's current and already-queued batches; at most N_c go to the cloud.
Comparing completion times (not cloud latency against edge queueing alone) is the paper's
rule with the edge's own compute time added to the edge side, so that equal-speed tiers are
not favoured by accident.
"""
from __future__ import annotations

import heapq
from typing import Sequence, TypeVar

from physai_ros.scheduler.types import EngineInstanceInfo

T = TypeVar("T")

IDLE_EPS_S = 1e-9


def place(ordered: Sequence[T], instances: Sequence[EngineInstanceInfo], now: float,
          saturation_tolerance: float = 0.05) -> list[tuple[EngineInstanceInfo, list[T]]]:
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
                edge_done = free_at + einst.service_time(einst.batch_cap(saturation_tolerance))
            else:
                edge_done = float("inf")
            cinst, ccap = cloud_slots[ci]
            n_c = len(out.get(id(cinst), ()))
            cloud_done = now + cinst.service_time(n_c + 1)
            if cloud_done < edge_done:
                out.setdefault(id(cinst), []).append(item)
                if n_c + 1 >= ccap:
                    ci += 1
            elif heap:
                # Stays queued for the edge: it takes a slot of that future edge batch.
                heapq.heapreplace(heap, (free_at, k, slots - 1) if slots > 1 else
                                  (free_at + einst.service_time(caps[id(einst)]), k, caps[id(einst)]))
    return [(i, out[id(i)]) for i in instances if out.get(id(i))]
