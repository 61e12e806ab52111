"""The operator's view of the task pipelines (docs/pipelines.md) in physai-fleet's summary:
per robot and per component, what the robot clients published. Two sources, both already on ROS:
  - /<ns>/client_status (JSON, 1 Hz): the controller's counters under "pipeline"
    (client.pipeline.ClientPipeline.status): per component asked, answered, on time, late,
    SLO misses, stale, skipped, errors by reason, SLO attainment; per robot safety stops, replans,
    retries, task failures, grasps lost, tasks done, episodes, escalations and the latched reason;
  - /<ns>/pipeline_event (PipelineEvent, one per decision): counted here by kind and by
    kind/source (`EventTally`), so the summary says what the robots were seen to do on the topic.
Plain data, no rclpy: physai_ros.fleet.cli subscribes and feeds these."""
from __future__ import annotations

from collections import Counter
from typing import Any

COMPONENT_KEYS = ("asked", "answered", "on_time", "late", "slo_misses", "stale", "skipped")
ROBOT_KEYS = ("safety_stops", "replans", "total_retries", "task_failures", "tasks_done", "episodes",
              "escalations", "system1_predictions", "queries_sent", "grasp_losses")


class EventTally:
    """PipelineEvents received per robot: by kind, by kind/source, the newest escalation flag."""

    def __init__(self) -> None:
        self.by_kind: dict[str, Counter] = {}
        self.by_source: dict[str, Counter] = {}
        self.escalated: dict[str, bool] = {}

    def add(self, ns: str, kind: str, source: str, escalated: bool = False) -> None:
        self.by_kind.setdefault(ns, Counter())[kind] += 1
        self.by_source.setdefault(ns, Counter())[f"{kind}/{source or '-'}"] += 1
        self.escalated[ns] = bool(escalated)

    def add_msg(self, ns: str, msg) -> None:
        self.add(ns, str(msg.kind), str(msg.source), bool(msg.escalated))

    def doc(self, ns: str) -> dict[str, Any]:
        kinds = self.by_kind.get(ns, Counter())
        return {"total": sum(kinds.values()), "by_kind": dict(sorted(kinds.items())),
                "by_source": dict(sorted(self.by_source.get(ns, Counter()).items()))}


def component_fields(c: dict, duration_s: float) -> dict[str, Any]:
    """One component's counters from client_status, with rates over the run and error totals."""
    errors = dict(c.get("errors") or {})
    out = {k: int(c.get(k, 0)) for k in COMPONENT_KEYS}
    per_s = (lambda n: round(n / duration_s, 3)) if duration_s > 0 else (lambda n: None)
    out.update(asked_per_s=per_s(out["asked"]), answered_per_s=per_s(out["answered"]),
               slo_attainment=c.get("slo_attainment"), errors=errors, errors_total=sum(errors.values()),
               consecutive_violations=int(c.get("consecutive_violations", 0)))
    return out


def pipeline_fields(client_status: dict | None, events: dict | None, duration_s: float,
                    task: str = "") -> dict[str, Any]:
    """A robot's `pipeline` block of the summary (`task`: its fleet.yaml task): {} for a robot
    whose task has no pipeline and that published no PipelineEvent."""
    p = (client_status or {}).get("pipeline")
    if p is None and not (events or {}).get("total"):
        return {}
    p = p or {}
    comps = {name: component_fields(c, duration_s) for name, c in (p.get("components") or {}).items()}
    doc = {"task": task, "started": bool(p.get("started", False)),
           "escalated": p.get("escalated", ""),
           "events_published": dict(p.get("events") or {}),  # the client's own count by kind
           "components": comps, **{k: int(p.get(k, 0)) for k in ROBOT_KEYS},
           "events": events or {"total": 0, "by_kind": {}, "by_source": {}}}
    for k in ("foreign_answers", "answers_refused", "queries_unsent", "reset_failures"):
        if k in p:
            doc[k] = int(p[k])
    return {"pipeline": doc}


def _errs(errors: dict) -> str:
    return "/".join(f"{k} {v}" for k, v in sorted(errors.items())) or "0"


def _att(v) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def format_pipeline(serving: list[dict]) -> list[str]:
    """Per robot with a pipeline: one line of robot counters, one line per component."""
    lines = []
    for r in serving:
        p = r.get("pipeline")
        if not p:
            continue
        ev = p["events"]
        lines.append(f"  {r['id']} pipeline: safety stops {p['safety_stops']}, replans {p['replans']}, "
                     f"retries {p['total_retries']}, grasps lost {p['grasp_losses']}, tasks done {p['tasks_done']}, "
                     f"episodes {p['episodes']}, "
                     f"escalations {p['escalations']}{' (latched: ' + p['escalated'] + ')' if p['escalated'] else ''}"
                     f", events {ev['total']} ({', '.join(f'{k} {v}' for k, v in ev['by_kind'].items()) or 'none'})")
        for name, c in sorted(p["components"].items()):
            lines.append(f"      {name}: asked {c['asked']} ({c['asked_per_s'] or 0:.2f}/s), answered "
                         f"{c['answered']} ({c['answered_per_s'] or 0:.2f}/s), on time {c['on_time']}, late "
                         f"{c['late']}, SLO misses {c['slo_misses']}, SLO attainment {_att(c['slo_attainment'])}, "
                         f"errors {_errs(c['errors'])}")
    return lines


def fleet_totals(serving: list[dict]) -> dict[str, Any]:
    """Fleet-wide sums per (task, component) and of the robot counters."""
    per: dict[str, dict[str, int]] = {}
    robot = Counter()
    for r in serving:
        p = r.get("pipeline")
        if not p:
            continue
        robot.update({k: p[k] for k in ROBOT_KEYS})
        robot["events"] += p["events"]["total"]
        for name, c in p["components"].items():
            t = per.setdefault(f"{p.get('task') or r.get('task', '')}.{name}", Counter())
            t.update({k: c[k] for k in ("asked", "answered", "on_time", "slo_misses", "errors_total")})
    return {"robots": dict(robot), "components": {k: dict(v) for k, v in sorted(per.items())}}


def format_totals(totals: dict) -> list[str]:
    if not totals["components"]:
        return []
    r = totals["robots"]
    comps = "; ".join(f"{k} asked {v['asked']} answered {v['answered']} errors {v['errors_total']}"
                      for k, v in totals["components"].items())
    return [f"physai-fleet: pipelines: safety stops {r.get('safety_stops', 0)}, retries "
            f"{r.get('total_retries', 0)}, escalations {r.get('escalations', 0)}, tasks done "
            f"{r.get('tasks_done', 0)}, events {r.get('events', 0)}; {comps}"]


def dashboard_lines(robot: dict) -> list[str]:
    """Short lines for a robot's row of the contact sheet / dashboard ([] without a pipeline):
    one per component (answered/asked, errors, SLO attainment), then the robot's counters."""
    p = robot.get("pipeline")
    if not p:
        return []
    lines = [f"{n}: {c['answered']}/{c['asked']} ok, err {c['errors_total']}, slo {_att(c['slo_attainment'])}"
             for n, c in sorted(p["components"].items()) if n != "system1"]
    lines.append(f"stops {p['safety_stops']} retries {p['total_retries']} esc {p['escalations']}"
                 + (" LATCHED" if p["escalated"] else ""))
    return lines


def with_pipeline_lines(captions, rows, serving: list[dict]):
    """The contact sheet's captions (report.contact_sheet: captions[row][cell] lines, or None)
    with each pipeline robot's `dashboard_lines` under its last frame; unchanged without pipelines."""
    lines = {r["id"]: dashboard_lines(r) for r in serving}
    if not any(lines.values()):
        return captions
    out = [list(map(list, row)) for row in captions] if captions else [[[] for _ in cells] for _, cells in rows]
    for row, (ns, cells) in zip(out, rows):
        if lines.get(ns) and cells:
            row[len(cells) - 1].extend(lines[ns])
    return out
