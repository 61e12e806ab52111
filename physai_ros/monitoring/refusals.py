"""Bounded per-source refusal records for /diagnostics: count, counts by reason, last reason.

Sources are whatever a sender claims to be (a robot id in a registration request or an
observation), so a fuzzer or a misconfigured fleet can invent any number of them: the log keeps
at most `max_ids` sources and folds the rest into one `OTHER` entry, and truncates ids and
details, so its memory and its diagnostics stay bounded whatever arrives.
"""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

OTHER = "<other>"
MAX_ID_CHARS = 64
MAX_DETAIL_CHARS = 160


@dataclass
class RefusalRecord:
    count: int = 0
    by_reason: Counter = field(default_factory=Counter)
    last_reason: str = ""
    last_detail: str = ""
    last_time: float = 0.0
    seq: int = 0  # order of the newest refusal across sources


class RefusalLog:
    def __init__(self, max_ids: int = 32):
        if max_ids < 1:
            raise ValueError(f"max_ids must be >= 1, got {max_ids}")
        self.max_ids = int(max_ids)
        self._records: dict[str, RefusalRecord] = {}
        self._lock = threading.Lock()  # DDS callbacks add, the diagnostics timer reads
        self.total = 0

    @staticmethod
    def _key(source_id: str) -> str:
        s = str(source_id)
        cut = s[:MAX_ID_CHARS] + ("..." if len(s) > MAX_ID_CHARS else "")
        # Unprintable ids are shown escaped, cut first so the key stays bounded either way.
        return repr(s[:MAX_ID_CHARS]) + cut[MAX_ID_CHARS:] if not s.isprintable() or not s else cut

    def add(self, source_id: str, reason: str, detail: str = "", now: float = 0.0) -> str:
        """Record one refusal; returns the key it was counted under."""
        key = self._key(source_id)
        with self._lock:
            rec = self._records.get(key)
            if rec is None:
                if len(self._records) >= self.max_ids - 1 and key != OTHER:
                    key = OTHER  # one slot stays for the overflow
                rec = self._records.setdefault(key, RefusalRecord())
            rec.count += 1
            rec.by_reason[reason] += 1
            rec.last_reason = reason
            rec.last_detail = detail[:MAX_DETAIL_CHARS]
            rec.last_time = now
            self.total += 1
            rec.seq = self.total
        return key

    def snapshot(self) -> dict[str, RefusalRecord]:
        with self._lock:
            return {k: RefusalRecord(r.count, Counter(r.by_reason), r.last_reason, r.last_detail, r.last_time, r.seq)
                    for k, r in self._records.items()}

    def count(self, source_id: str) -> int:
        with self._lock:
            rec = self._records.get(self._key(source_id))
            return rec.count if rec else 0


class RefusalHealth:
    """A RefusalLog as one diagnostic status: WARN when something was refused since the previous
    update (OK once it stops, totals kept), a key per source with its count and last reason."""

    def __init__(self, log: RefusalLog, what: str):
        self.log = log
        self.what = what
        self._seen = 0

    def run(self, stat):
        from physai_ros.monitoring.diagnostics import OK, WARN, level_byte

        total = self.log.total
        new, self._seen = total - self._seen, total
        snap = self.log.snapshot()
        if new:
            last = max(snap.items(), key=lambda kv: kv[1].seq)
            stat.summary(level_byte(WARN), f"{new} {self.what} refused since last update; last: "
                                           f"{last[0]}: {last[1].last_reason}")
        else:
            stat.summary(level_byte(OK), f"no {self.what} refused since last update ({total} in total)")
        stat.add("refused_total", str(total))
        for key, rec in sorted(snap.items()):
            stat.add(f"{key}.count", str(rec.count))
            stat.add(f"{key}.last_reason", f"{rec.last_reason}: {rec.last_detail}" if rec.last_detail
                     else rec.last_reason)
        return stat
