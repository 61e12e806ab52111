"""A robot's own account of its rounds: every observation it sent and every answer it got.

A round is *lost* when no answer (a chunk, an error or a refusal) has come `lost_after_s` after
the round was sent; a later answer moves it to *answered late*. A round is *orphaned* when the
server that had it was replaced (a restart: the new server never saw it), which is not a loss of
the serving path but of the process that held it. *Duplicated*: more than one OK chunk for one
round. The client keeps this ledger itself because an outside observer over DDS cannot be exact:
a starved subscriber misses messages that the robot did get (the soak benchmark's first
observer counted answers to rounds it never saw sent).

Memory stays bounded for a node that runs for days: pending rounds are few (the client has one
in flight, plus refetches), and the ids kept for duplicate detection and reports are capped.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from physai_ros.protocol.chunk import STATUS_ERROR, STATUS_OK

KEEP_IDS = 1024  # answered ids kept for duplicate detection
REPORT_IDS = 10  # ids listed per kind in a summary


@dataclass(frozen=True)
class LedgerSummary:
    sent: int
    answered: int
    answered_late: int
    pending: int
    lost: int
    orphaned: int
    duplicated: int
    unknown_answers: int  # answers to round ids this client never sent (another client's rounds?)
    answers: dict[str, int] = field(default_factory=dict)  # "ok", "error:<reason>", "refused:<reason>"
    lost_ids: tuple[int, ...] = ()
    duplicated_ids: tuple[int, ...] = ()

    def as_dict(self) -> dict:
        return {"sent": self.sent, "answered": self.answered, "answered_late": self.answered_late,
                "pending": self.pending, "lost": self.lost, "orphaned": self.orphaned,
                "duplicated": self.duplicated, "unknown_answers": self.unknown_answers,
                "answers": dict(self.answers), "lost_ids": list(self.lost_ids),
                "duplicated_ids": list(self.duplicated_ids)}


class RoundLedger:
    def __init__(self, lost_after_s: float):
        if lost_after_s <= 0:
            raise ValueError(f"lost_after_s must be > 0, got {lost_after_s}")
        self.lost_after_s = float(lost_after_s)
        self._pending: dict[int, float] = {}  # round -> time first sent
        self._lost: OrderedDict[int, float] = OrderedDict()
        self._ok_answers: OrderedDict[int, int] = OrderedDict()  # answered round -> OK chunks seen
        self._sent = self._answered = self._late = self._orphaned = 0
        self._duplicated = self._unknown = 0
        self._lost_total = 0  # lost rounds ever, including the ones answered late since
        self._orphans: OrderedDict[int, float] = OrderedDict()
        self._duplicated_ids: list[int] = []
        self._answers: dict[str, int] = {}

    def on_sent(self, round_id: int, now: float) -> None:
        """An observation was published (a refetch of a pending round is not a new round)."""
        rid = int(round_id)
        if rid in self._pending or rid in self._ok_answers or rid in self._lost or rid in self._orphans:
            return
        self._pending[rid] = now
        self._sent += 1

    def on_answer(self, round_id: int, status: int, reason: str, now: float) -> None:
        rid = int(round_id)
        kind = "ok" if status == STATUS_OK else \
            f"{'error' if status == STATUS_ERROR else 'refused'}:{reason.split(':', 1)[0]}"
        self._answers[kind] = self._answers.get(kind, 0) + 1
        if rid in self._pending:
            del self._pending[rid]
            self._answered += 1
        elif rid in self._lost:
            del self._lost[rid]
            self._answered += 1
            self._late += 1
        elif rid in self._orphans:  # the old server answered after all
            del self._orphans[rid]
            self._answered += 1
            self._orphaned -= 1
        elif rid not in self._ok_answers:
            self._unknown += 1
            return
        if status == STATUS_OK:
            n = self._ok_answers.get(rid, 0) + 1
            self._ok_answers[rid] = n
            self._ok_answers.move_to_end(rid)
            if n == 2:
                self._duplicated += 1
                if len(self._duplicated_ids) < REPORT_IDS:
                    self._duplicated_ids.append(rid)
        else:
            self._ok_answers.setdefault(rid, 0)
        _trim(self._ok_answers)

    def on_server_replaced(self) -> None:
        """A new server instance registered us: the rounds the old one held are never answered."""
        self._orphaned += len(self._pending)
        self._orphans.update(self._pending)
        self._pending.clear()
        _trim(self._orphans)

    def check(self, now: float) -> None:
        """Move rounds unanswered for longer than lost_after_s to lost."""
        for rid, sent_at in list(self._pending.items()):
            if now - sent_at > self.lost_after_s:
                del self._pending[rid]
                self._lost[rid] = sent_at
                self._lost_total += 1
        _trim(self._lost)

    def summary(self, now: float) -> LedgerSummary:
        self.check(now)
        return LedgerSummary(
            sent=self._sent, answered=self._answered, answered_late=self._late,
            pending=len(self._pending), lost=self._lost_total - self._late, orphaned=self._orphaned,
            duplicated=self._duplicated, unknown_answers=self._unknown, answers=dict(self._answers),
            lost_ids=tuple(list(self._lost)[:REPORT_IDS]), duplicated_ids=tuple(self._duplicated_ids))


def _trim(ids: OrderedDict) -> None:
    while len(ids) > KEEP_IDS:
        ids.popitem(last=False)
