"""Build the serving core from fleet.yaml: engine instances, scheduler, tokenizer, statistics."""
from __future__ import annotations

from typing import Any, Callable

from physai_ros.scheduler.base import make_scheduler

from .config import FleetConfig, FleetConfigError, tokenizer_path
from .core import EngineSlot, ServingCore, default_profile
from .fault_injection import ENV_VAR, faults_from_env
from .preflight import checkpoint_dir
from .preprocess import Normalizer
from .tokenizer import PromptTokenizer

# Normalisation statistics a checkpoint directory may carry (mean/std for state and action).
STATS_FILE = "normalization_stats.json"


def build_engine_slots(cfg: FleetConfig, node: Any = None) -> list[EngineSlot]:
    """Local engines (engine_<i>), then one RemoteEngine proxy per server.remote_engines entry;
    the proxies publish and subscribe through `node` (the policy server's)."""
    from physai_ros.engine.engine import Pi0Engine
    from physai_ros.engine.types import Pi0Config

    srv = cfg.server
    slots = []
    # Standby instances are built (weights loaded) and warmed up like the others, then wait:
    # engine_<engine_instances> ... are the standbys.
    for i in range(srv.engine_instances + srv.standby_instances):
        if srv.model.preset is not None:
            engine = Pi0Engine(Pi0Config.preset(srv.model.preset), device=srv.device,
                               seed=srv.model.seed)
        else:
            engine = Pi0Engine.from_lerobot_checkpoint(checkpoint_dir(cfg), device=srv.device)
        slots.append(EngineSlot(f"engine_{i}", engine, srv.max_batch, default_profile(srv.max_batch),
                                standby=i >= srv.engine_instances))
    if srv.remote_engines:
        from physai_ros.workers.remote import RemoteEngine

        if node is None:
            raise ValueError("server.remote_engines: reaching engine workers needs a ROS node")
        if slots:
            model = slots[0].engine.config
        elif srv.model.preset is not None:
            model = Pi0Config.preset(srv.model.preset)
        else:
            raise FleetConfigError(
                "server.engine_instances: with a checkpoint model keep at least one local engine "
                "instance (the server reads the model's sizes from it)")
        for r in srv.remote_engines:
            proxy = RemoteEngine(node, r.instance_id, model, timeout_s=r.timeout_s,
                                 liveness_timeout_s=r.liveness_timeout_s)
            # Until the worker advertises, the slot's own cap and default profile stand in.
            slots.append(EngineSlot(r.instance_id, proxy, srv.max_batch, default_profile(srv.max_batch)))
    _attach_faults(slots)
    return slots


def _attach_faults(slots: list[EngineSlot]) -> None:
    """Test hook (serving.fault_injection): PHYSAI_FAULT_INJECTION names slots to fail."""
    plans = faults_from_env()
    unknown = sorted(set(plans) - {s.instance_id for s in slots})
    if unknown:
        raise ValueError(f"{ENV_VAR}: no engine instance {unknown[0]!r} "
                         f"(instances: {[s.instance_id for s in slots]})")
    for s in slots:
        s.fault = plans.get(s.instance_id)


def build_core(cfg: FleetConfig, instance_id: str | None = None, node: Any = None) -> ServingCore:
    stats = checkpoint_dir(cfg) / STATS_FILE if cfg.server.model.checkpoint else None
    return ServingCore(
        engines=build_engine_slots(cfg, node),
        scheduler=make_scheduler(cfg.server.scheduler, **cfg.server.scheduler_params),
        tokenizer=PromptTokenizer(tokenizer_path(cfg), cfg.server.model.max_token_len),
        normalizer=Normalizer.from_file(stats),
        max_observation_age_s=cfg.server.max_observation_age_s,
        instance_id=instance_id,
        allowed_horizon_policies=sorted({t.horizon_policy for t in cfg.tasks.values()
                                         if ":" in t.horizon_policy}),
        max_robots=cfg.server.max_robots,
        robot_idle_release_s=cfg.server.robot_idle_release_s,
    )


def profile_local_engines(core: ServingCore, cfg: FleetConfig,
                          progress: Callable[[str], None] | None = None) -> dict[str, float]:
    """Measure each local instance's latency-vs-batch profile (server.profile) and give it to
    the scheduler through the slot, replacing the flat default: the batching cap (saturation
    point) and wait-ratio placement then use this machine's real numbers. Doubles as the
    warm-up. Remote instances measure their own (engine_worker). Returns seconds per instance.
    """
    import time

    import torch

    from physai_ros.workers.profiling import measure_profile

    p = cfg.server.profile
    if p is None:
        return {}
    took = {}
    for slot in core.engines.values():
        if hasattr(slot.engine, "alive"):
            continue  # remote: advertised by its worker
        t0 = time.perf_counter()

        def on_batch(b: int, n: int, left_s: float, iid: str = slot.instance_id) -> None:
            if progress is not None:
                progress(f"profiling {iid}: batch size {b} of {n} done after "
                         f"{time.perf_counter() - t0:.1f} s, about {left_s:.0f} s left")

        with torch.inference_mode():
            slot.profile = measure_profile(
                slot.engine.infer, slot.engine.config, min(p.max_batch, slot.max_batch), reps=p.reps,
                views=p.views, tokens=p.tokens or core.tokenizer.max_len, on_batch=on_batch)
        took[slot.instance_id] = time.perf_counter() - t0
    return took
