"""What the robots said next to what the simulator knew (the language demo): each robot's texts from
the language stream (/<ns>/text, protocol.text.RobotTextData) paired with the sim robot's ground
truth (TaskStatus.subtask / scene, from sim.narration), the summary lines physai-fleet prints and
the captions under the contact sheet's frames. Plain data, no rclpy: the monitor node
(nodes.fleet_monitor) feeds a RobotTextLog per robot.

Times are system clock seconds throughout: the text's stamps (the server's clock), the rounds'
capture stamps (the robot client's) and TaskStatus.stamp (the sim robot's) all come from the one
machine's clock, as does the monitor's receive time.

Pairing: a text is checked against the status in effect when it was asked (the capture time of the
round whose prefill it was decoded from, the frame the model saw; its first update's stamp when the
round was not seen) and when it finished. "In effect" is the newest status at or before that time,
not the nearest one: the sim publishes a status on every subtask change, so a status a little
after the time may already show a change the robot could not have seen.
"""
from __future__ import annotations

import bisect
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass, replace
from typing import Optional

from physai_ros.protocol.text import REASON_REFUSED, RobotTextData
from physai_ros.sim.narration import SUBTASK_QUESTION
from physai_ros.sim.runtime import TaskStatus

LAST_SHOWN = 3  # answers per robot in the printed summary
SHOWN_CHARS = 48


@dataclass(frozen=True)
class GroundTruth:
    stamp: float
    episode: int
    subtask: str
    scene: str

    @staticmethod
    def from_status(st: TaskStatus) -> Optional["GroundTruth"]:
        """None for a status without narration (a sim robot older than the fields)."""
        if not st.subtask:
            return None
        return GroundTruth(stamp=float(st.stamp), episode=int(st.episode), subtask=st.subtask, scene=st.scene)


@dataclass(frozen=True)
class SaidText:
    """One text of one robot as the monitor last saw it (the whole text so far)."""
    request_id: int
    round_id: int
    question: str
    source: str
    text: str
    tokens: int
    seq: int
    done: bool
    reason: str
    detail: str
    asked_at: float                   # capture time of its round, else its first update's stamp
    finished_at: Optional[float]      # the done update's stamp
    received_at: float                # when the monitor got its newest update
    truth_asked: Optional[GroundTruth] = None
    truth_finished: Optional[GroundTruth] = None

    @property
    def is_subtask_answer(self) -> bool:
        return normalise(self.question) == normalise(SUBTASK_QUESTION)

    @property
    def agrees(self) -> Optional[bool]:
        """Exact match of the normalised answer and the subtask when asked; None where there is
        nothing to compare (another question, unfinished, refused, cancelled, no ground truth)."""
        if (not self.done or not self.is_subtask_answer or self.truth_asked is None
                or self.reason in (REASON_REFUSED, "cancelled")):
            return None
        return normalise(self.text) == normalise(self.truth_asked.subtask)


def normalise(text: str) -> str:
    """As the checkpoint's text is trained (tokenizer.encode_text: strip, lowercase), with
    whitespace collapsed and a closing full stop dropped: "Grasp." and "grasp" are one answer."""
    return " ".join(text.lower().split()).rstrip(".").strip()


def printable(text: str, limit: int = SHOWN_CHARS, ascii_only: bool = False) -> str:
    """One line of at most `limit` characters: an untrained model's noise can carry newlines and
    control characters (and cv2.putText draws ASCII only)."""
    out = "".join(c if c.isprintable() and (c.isascii() or not ascii_only) else "?" for c in " ".join(text.split()))
    return out if len(out) <= limit else out[:max(1, limit - 3)] + "..."


class RobotTextLog:
    """One robot's texts and the sim's ground truth over time, bounded (the oldest go first)."""

    def __init__(self, max_texts: int = 200, max_statuses: int = 5000, max_rounds: int = 2000,
                 max_active: int = 8):
        self.max_statuses, self.max_rounds, self.max_active = max_statuses, max_rounds, max_active
        self._finished: deque[SaidText] = deque(maxlen=max_texts)
        self._active: OrderedDict[int, SaidText] = OrderedDict()
        self._truth_t: list[float] = []
        self._truth: list[GroundTruth] = []
        self._rounds: OrderedDict[int, float] = OrderedDict()
        self.updates = 0

    # --- inputs ---
    def on_status(self, truth: GroundTruth | None) -> None:
        if truth is None:
            return
        i = bisect.bisect_right(self._truth_t, truth.stamp)  # statuses arrive in order; tolerate one that does not
        self._truth_t.insert(i, truth.stamp)
        self._truth.insert(i, truth)
        if len(self._truth) > self.max_statuses:
            drop = len(self._truth) - self.max_statuses
            del self._truth_t[:drop], self._truth[:drop]

    def on_round(self, round_id: int, capture_stamp: float) -> None:
        """A served round's capture time (its ActionChunk's header stamp)."""
        self._rounds[int(round_id)] = float(capture_stamp)
        while len(self._rounds) > self.max_rounds:
            self._rounds.popitem(last=False)

    def on_text(self, t: RobotTextData, received_at: float) -> Optional[SaidText]:
        """An update of a text; None when it is older than one already seen (each update repeats
        the whole text, so an old one adds nothing)."""
        prev = self._active.get(t.request_id)
        if prev is not None and t.seq <= prev.seq:
            return None
        if prev is None and not t.done and any(f.request_id == t.request_id for f in self._finished):
            return None  # a partial update arriving after its done
        stamp = t.stamp or received_at
        # The round's capture time when its chunk has been seen (a chunk is published before
        # the texts its frame starts, but the two topics are not ordered with each other).
        asked = self._rounds.get(int(t.round_id), prev.asked_at if prev is not None else stamp)
        said = SaidText(request_id=t.request_id, round_id=t.round_id, question=t.question, source=t.source,
                        text=t.text, tokens=len(t.tokens), seq=t.seq, done=t.done, reason=t.reason, detail=t.detail,
                        asked_at=asked, finished_at=stamp if t.done else None, received_at=received_at)
        self.updates += 1
        if t.done:
            self._active.pop(t.request_id, None)
            self._finished.append(said)
        else:
            self._active[t.request_id] = said
            while len(self._active) > self.max_active:  # a done update never came
                self._active.popitem(last=False)
        return said

    # --- outputs ---
    def truth_at(self, t: float) -> Optional[GroundTruth]:
        """The status in effect at t (the newest at or before it; the first one for a t before
        any)."""
        if not self._truth:
            return None
        i = bisect.bisect_right(self._truth_t, t)
        return self._truth[max(0, i - 1)]

    def paired(self, s: SaidText) -> SaidText:
        return replace(s, truth_asked=self.truth_at(s.asked_at),
                       truth_finished=None if s.finished_at is None else self.truth_at(s.finished_at))

    def texts(self) -> list[SaidText]:
        """The finished texts, oldest first, then the newest unfinished one, paired."""
        out = [self.paired(s) for s in self._finished]
        if self._active:
            out.append(self.paired(next(reversed(self._active.values()))))
        return out

    def said_by(self, t: float) -> Optional[SaidText]:
        """The newest finished text the monitor had received by t (monitor receive time), paired."""
        for s in reversed(self._finished):
            if s.received_at <= t:
                return self.paired(s)
        return None


def questions(robots) -> dict[str, Optional[str]]:
    """namespace -> the question its task asks every few rounds, None where it asks nothing on
    its own; robots: config.fleet's RobotConfig list."""
    return {r.namespace: r.task.language.question if r.task.language is not None and r.task.language.every_rounds > 0
            else None for r in robots}


# --- the printed summary ---
def _said_line(s: SaidText) -> str:
    said = f"said: '{printable(s.text)}'" if s.text.strip() else f"said: '' ({s.tokens} tokens that decode to nothing)"
    if not s.done:
        said += " (still speaking)"
    elif s.reason == REASON_REFUSED:
        said = f"refused: {printable(s.detail)}"
    elif s.reason not in ("eos", "stop"):
        said += f" ({s.reason})"
    q = "" if s.is_subtask_answer else f" [asked '{printable(s.question, 32)}']"
    if s.truth_asked is None:
        return f"      round {s.round_id}{q} {said} | simulator: (no ground truth)"
    # The subtask question is checked against the subtask; any other question gets the scene too.
    truth = s.truth_asked.subtask if s.is_subtask_answer else f"{s.truth_asked.subtask}; {s.truth_asked.scene}"
    line = f"      round {s.round_id}{q} {said} | simulator: '{printable(truth, 64)}'"
    if s.agrees is not None:
        line += " (agrees)" if s.agrees else " (differs)"
    if s.truth_finished is not None and s.truth_finished.subtask != s.truth_asked.subtask:
        line += f", '{s.truth_finished.subtask}' when it finished"
    return line


NO_LANGUAGE = "its task asks nothing (no tasks.<task>.language with every_rounds in the fleet file)"


def format_language(logs: dict[str, RobotTextLog], asked: dict[str, Optional[str]], duration_s: float,
                    last: int = LAST_SHOWN, off_reason: str = NO_LANGUAGE) -> list[str]:
    """The summary's language section. asked: robot -> its task's periodic question (None: its
    task asks nothing on its own; "" continues the prompt); off_reason: why such a robot is silent."""
    lines = ["physai-fleet: language (what each robot said | what the simulator knew when it was asked)"]
    for ns in sorted(set(logs) | set(asked)):
        log = logs.get(ns)
        texts = log.texts() if log is not None else []
        q = asked.get(ns)
        if not texts:
            why = (off_reason if q is None
                   else f"in {duration_s:.0f} s (its task asks '{printable(q or '(continue the prompt)')}')")
            lines.append(f"  {ns}: said nothing: {why}")
            continue
        finished = [s for s in texts if s.done and s.reason != REASON_REFUSED]
        refused = sum(s.reason == REASON_REFUSED for s in texts)
        judged = [s.agrees for s in texts if s.agrees is not None]
        head = f"  {ns}: {len(finished)} text(s) finished"
        if judged:
            head += f"; subtask answers agreeing with the simulator: {sum(judged)} of {len(judged)}"
        elif any(s.is_subtask_answer and s.done for s in texts):
            head += "; no ground truth to check the subtask answers against"
        if refused:
            head += f"; {refused} question(s) refused"
        lines.append(head)
        lines.extend(_said_line(s) for s in texts[-last:])
    return lines


def language_doc(logs: dict[str, RobotTextLog], asked: dict[str, Optional[str]]) -> dict:
    """The --summary-json `language` block: per robot its question and every kept text, paired."""
    out = {}
    for ns in sorted(set(logs) | set(asked)):
        texts = logs[ns].texts() if ns in logs else []
        judged = [s.agrees for s in texts if s.agrees is not None]
        out[ns] = {"question": asked.get(ns), "texts": [asdict(s) for s in texts],
                   "subtask_answers_judged": len(judged), "subtask_answers_agreeing": sum(judged)}
    return out


# --- the contact sheet ---
def frame_caption(log: Optional[RobotTextLog], t: float, language_on: bool) -> list[str]:
    """What goes under a frame taken at t (system time): the newest text the robot had said by
    then, and what the simulator knew when it was asked."""
    if not language_on:
        return ["said: - (no language stream)"]
    s = log.said_by(t) if log is not None else None
    if s is None:
        truth = log.truth_at(t) if log is not None else None
        return ["said: nothing yet"] + ([f"sim now: {truth.subtask}"] if truth is not None else [])
    said = f"refused: {s.detail}" if s.reason == REASON_REFUSED else f"said: {s.text or '(empty)'}"
    lines = [printable(f"{said}  ({t - s.received_at:.0f}s ago)", 200, ascii_only=True)]
    if s.truth_asked is not None:
        mark = {True: " = agrees", False: " = differs", None: ""}[s.agrees]
        lines.append(printable(f"sim: {s.truth_asked.subtask}{mark}", 200, ascii_only=True))
    return lines


def sheet_captions(logs: dict[str, RobotTextLog], asked: dict[str, Optional[str]],
                   rows: list[tuple[str, list[tuple[float, object]]]], t0: float) -> Optional[list[list[list[str]]]]:
    """report.contact_sheet's captions for its rows of (monitor time since t0, frame) cells; None
    when no robot has a language stream and none said anything (the sheet stays as it was)."""
    if not any(q is not None for q in asked.values()) and not any(log.texts() for log in logs.values()):
        return None
    return [[frame_caption(logs.get(ns), t0 + t, asked.get(ns) is not None or bool(logs.get(ns) and logs[ns].texts()))
             for t, _ in cells] for ns, cells in rows]
