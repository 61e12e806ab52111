"""ROSA §3.4.3 compaction: greedily merge servers of one model component across task classes.

Isolated packing gives every (component, class) its own servers. Compaction recovers cross-class
sharing: for each server the profile gives its SLO-compatible rate capacity and the headroom left;
low-load servers are merged into high-headroom servers of the same component and model (obligation
servers: of the same model, whatever obligation components they host - colocation.py), a merge
accepted only if some batch size serves the union with every class's SLO (and eq. (4) mean cap)
met (configs.LatencyTable.best_batch). Merges move whole servers' streams, so routes stay intact
apart from the server they point to.
"""
from __future__ import annotations

import math

from physai_ros.scheduler.factory.colocation import merged_label, pool_key
from physai_ros.scheduler.factory.configs import LatencyTable
from physai_ros.scheduler.factory.packing import PlannedServer


def headroom(table: LatencyTable, server: PlannedServer) -> float:
    """Rate the server could still take at its strictest stream's SLO (best batch size)."""
    if not server.streams:
        return math.inf
    strict = min(server.streams, key=lambda s: s.slo_s)
    mean_cap = min(s.mean_cap_s for s in server.streams)
    cap = max((table.rate_cap(server.model, b, strict.slo_s, strict.quantile, mean_cap)
               for b in table.batch_sizes(server.model)), default=0.0)
    return cap - server.load_hz


def try_merge(table: LatencyTable, into: PlannedServer, donor: PlannedServer) -> PlannedServer | None:
    if pool_key(into.component, into.model) != pool_key(donor.component, donor.model):
        return None
    streams = into.streams + donor.streams
    best = table.best_batch(into.model, streams)
    if best is None:
        return None
    return PlannedServer(merged_label(into.component, donor.component), into.model, best[0], streams)


def compact(table: LatencyTable, servers: list[PlannedServer], budget: int | None = None) -> list[PlannedServer]:
    """Merge servers until no merge is SLO-feasible, or (given a budget) the plan fits it."""
    servers = list(servers)
    while budget is None or len(servers) > budget:
        merged = False
        donors = sorted(range(len(servers)), key=lambda i: servers[i].load_hz)
        for d in donors:
            receivers = sorted((i for i in range(len(servers)) if i != d),
                               key=lambda i: -headroom(table, servers[i]))
            for r in receivers:
                if headroom(table, servers[r]) < servers[d].load_hz:
                    break  # sorted by headroom: no later receiver can take this donor either
                new = try_merge(table, servers[r], servers[d])
                if new is not None:
                    servers[r] = new
                    del servers[d]
                    merged = True
                    break
            if merged:
                break
        if not merged:
            break
    return servers


def drain(table: LatencyTable, servers: list[PlannedServer], budget: int | None = None) -> list[PlannedServer]:
    """Stream-level compaction: empty the lowest-load server by moving its streams one by one to
    the servers with the most headroom (each move SLO-checked); repeat while a server can be freed.

    Whole-server merges cannot reach the minimum footprint when every server is more than half
    full (two classes at 16 Hz on 20 Hz servers never merge, though their streams spread over the
    others would); obligations.py uses this to get the aggregate-rate footprint of eq. (2).
    """
    servers = list(servers)
    while budget is None or len(servers) > budget:
        freed = False
        for d in sorted(range(len(servers)), key=lambda i: servers[i].load_hz):
            others = [s for i, s in enumerate(servers) if i != d]
            for st in sorted(servers[d].streams, key=lambda s: -s.rate_hz):
                key = pool_key(servers[d].component, servers[d].model)
                targets = sorted((i for i, s in enumerate(others) if pool_key(s.component, s.model) == key),
                                 key=lambda i: -headroom(table, others[i]))
                for i in targets:
                    best = table.best_batch(others[i].model, others[i].streams + (st,))
                    if best is not None:
                        others[i] = PlannedServer(merged_label(others[i].component, servers[d].component),
                                                  others[i].model, best[0], others[i].streams + (st,))
                        break
                else:
                    break  # this stream fits nowhere: the donor stays
            else:
                servers, freed = others, True
                break
        if not freed:
            break
    return servers
