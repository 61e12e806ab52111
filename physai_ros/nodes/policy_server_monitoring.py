"""policy_server's monitoring on ROS 2, mounted by policy_server: what monitoring.server_metrics
computes, published.

  pub  /diagnostics (diagnostic_msgs/DiagnosticArray, monitoring Updater):
       "policy_server: <robot_id>" per robot (added when the robot first appears), ": engine <id>"
       per instance, ": fleet", ": model", ": registrations", ": inputs" (refusals not attributable
       to a served round), ": security" and, running a factory plan, ": factory plan" (roles, rates,
       admissions, service times measured while serving, the latest change and its reason); the
       extensions add theirs (language, pipeline, streaming)
  pub  /<robot_id>/metrics/<name>, /fleet/metrics/<name> (std_msgs/Float64, for rqt_plot)
Graded with fleet.yaml's monitoring thresholds.
"""
from __future__ import annotations

from physai_ros.monitoring.config import load_monitoring
from physai_ros.monitoring.metrics import MetricsPublisher
from physai_ros.monitoring.refusals import RefusalHealth
from physai_ros.monitoring.server_metrics import ServerMetrics, factory_status, model_status
from physai_ros.monitoring.server_view import ServerView
from physai_ros.monitoring.thresholds import MetricsTask
from physai_ros.ros.diagnostics_updater import Updater
from physai_ros.ros.node_security import security_diagnostics


class ServerMonitoringIO:
    def __init__(self, node, fleet_file: str | None, fleet, core, model_format, security):
        self.config = cfg = load_monitoring(fleet_file)
        slo = {r.id: float(r.task.slo_ms) for r in fleet.robots}
        tasks = {name: float(t.slo_ms) for name, t in fleet.tasks.items()}

        def slo_ms(rid: str):  # a robot's SLO is its registered task's, else its fleet.yaml entry's
            reg = core.registration(rid)
            return tasks.get(reg.task_id) if reg is not None and reg.task_id in tasks else slo.get(rid)
        self.view = ServerView(cfg.window_s, slo_ms)
        self.metrics = MetricsPublisher(node, period_s=cfg.metrics_period_s)
        self.report = report = ServerMetrics(core, self.view, self.metrics, cfg.diagnostics_period_s)
        self.updater = up = Updater(node, period=cfg.diagnostics_period_s)
        up.setHardwareID(str(core.instance_id))
        up.add(MetricsTask("fleet", report.fleet_metrics, cfg.thresholds, ok_message=report.fleet_ok_message))
        for iid in core.engines:
            up.add(f"engine {iid}", lambda stat, iid=iid: report.engine_status(stat, iid))
        if core.factory is not None:
            up.add("factory plan", lambda stat: factory_status(stat, core.factory))
        up.add("model", lambda stat: model_status(stat, fleet.server.model, model_format,
                                                  core.action_runner.normalizer.describe()))
        up.add("registrations", RefusalHealth(report.registration_refusals, "registration(s)").run)
        up.add("inputs", RefusalHealth(
            report.input_refusals, "observation(s) with a wrong robot_id, unreadable or unauthenticated").run)
        up.add("security", security_diagnostics(security, report.auth_refusals))

    def track(self, robot_id: str) -> None:
        """A robot new to the server gets its diagnostics task."""
        if self.view.track(robot_id):
            self.updater.add(MetricsTask(robot_id, lambda: self.report.robot_metrics(robot_id), self.config.thresholds,
                                         ok_message=lambda: self.report.robot_ok_message(robot_id)))
