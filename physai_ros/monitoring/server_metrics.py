"""What the policy server reports on /diagnostics and its metric topics, as plain data: per robot,
for the fleet, per engine instance and for the model. It joins the serving core's counters, the
server view's windows (latency, SLO) and the refusals the node made before the core saw a message
(wrong robot id on a topic, unreadable, unauthenticated). No rclpy: the node hands the results to
its diagnostics updater and metric publisher.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

from physai_ros.monitoring.diagnostics import ERROR, OK, level_byte
from physai_ros.monitoring.refusals import RefusalLog
from physai_ros.monitoring.server_view import ServerView
from physai_ros.security.handshake import AUTH_REFUSAL_PREFIX

# The per-robot values also published as /<robot_id>/metrics/<name> (rqt_plot).
PLOTTED_ROBOT_KEYS = ("latency_ms_p50", "latency_ms_p99", "slo_meet_rate", "wait_ratio", "rounds", "refused_total",
                      "errors", "queue_ms_p50", "inference_ms_p50")


class ServerMetrics:
    def __init__(self, core, view: ServerView, metrics, diagnostics_period_s: float,
                 robot_extras: Optional[Callable[[str], dict]] = None):
        """core: the serving core (diagnostics(), engine_diagnostics(), pending(), ...); metrics:
        a MetricBoard the values are also set on; robot_extras(robot_id): more per-robot values
        (the language stream's), or None."""
        self.core, self.view, self.metrics = core, view, metrics
        self.registration_refusals = RefusalLog(max_ids=32)
        self.input_refusals = RefusalLog(max_ids=32)
        self.robot_extras = robot_extras
        self._period_s = float(diagnostics_period_s)
        self._cache: tuple[float, dict] = (-1.0, {})

    def core_diagnostics(self) -> dict:
        """One core snapshot per diagnostics update, shared by every robot's task."""
        now = time.monotonic()
        at, diag = self._cache
        if now - at > 0.5 * self._period_s:
            diag = self.core.diagnostics()
            self._cache = (now, diag)
        return diag

    def robot_metrics(self, robot_id: str) -> dict:
        core = dict(self.core_diagnostics().get(robot_id) or {"registered": False})
        snap = self.input_refusals.snapshot().get(robot_id)
        if snap is not None:  # refusals the node made before the core saw the message
            refused = dict(core.get("refused") or {})
            for reason, n in snap.by_reason.items():
                refused[reason] = refused.get(reason, 0) + n
            core["refused"] = refused
            core["refused_total"] = sum(refused.values())
        m = self.view.robot_metrics(robot_id, core)
        if self.robot_extras is not None:
            m.update(self.robot_extras(robot_id))
        for key in PLOTTED_ROBOT_KEYS:
            if isinstance(m.get(key), (int, float)):
                self.metrics.set(robot_id, key, m[key])
        return m

    def robot_ok_message(self, robot_id: str) -> str:
        d = self.core_diagnostics().get(robot_id) or {}
        if not d.get("registered"):
            return "not registered"
        return f"{d.get('rounds', 0)} rounds, {d.get('refused_total', 0)} refused"

    def fleet_metrics(self) -> dict:
        diag = self.core_diagnostics()
        m = {
            "queue_depth": self.core.pending(),
            "robots_registered": self.core.registered_robots(),
            "rounds_total": sum(d.get("rounds", 0) for d in diag.values()),
            "refused_total": sum(d.get("refused_total", 0) for d in diag.values()) + self.input_refusals.total,
            "registration_refusals": self.registration_refusals.total,
            "engines_alive": sum(1 for d in self.core.engine_diagnostics().values() if d.get("alive")),
        }
        for key, value in m.items():
            self.metrics.set(None, key, value)
        return m

    def fleet_ok_message(self) -> str:
        return f"{self.core.registered_robots()} robot(s) registered"

    def auth_refusals(self) -> dict[str, int]:
        """Refusals for failed authentication, by reason, over registrations and inputs."""
        out: dict[str, int] = {}
        for log in (self.registration_refusals, self.input_refusals):
            for snap in log.snapshot().values():
                for reason, n in snap.by_reason.items():
                    if reason.startswith(AUTH_REFUSAL_PREFIX):
                        out[reason] = out.get(reason, 0) + n
        return out

    def engine_status(self, stat, instance_id: str):
        d = self.core.engine_diagnostics().get(instance_id, {})
        alive = bool(d.get("alive"))
        stat.summary(level_byte(OK if alive else ERROR),
                     "alive" if alive else f"not alive: {d.get('why_not_alive', '')}")
        for k, v in d.items():
            stat.add(k, str(v))
        return stat


def factory_status(stat, runtime):
    """The running factory plan: its roles, rates, admissions, online service times and the
    latest applied change with its reason."""
    d = runtime.diagnostics()
    stat.summary(level_byte(OK), d["last_plan_change"] or f"start-up plan: {runtime.summary()}")
    for k, v in d.items():
        stat.add(f"factory.{k}", str(v))
    return stat


def model_status(stat, model_config, checkpoint_format: Any, normalizer_description: dict):
    """The checkpoint's format decision and where its normalisation statistics came from."""
    fmt = checkpoint_format
    stat.summary(level_byte(OK), f"{fmt.policy_type} checkpoint, {fmt.family}" if fmt is not None
                 else f"preset {model_config.preset} (random weights, seed {model_config.seed})")
    for k, v in {**(fmt.as_status() if fmt is not None else {}), **normalizer_description}.items():
        stat.add(k, v)
    return stat
