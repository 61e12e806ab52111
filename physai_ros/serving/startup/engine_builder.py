"""Build the serving core from fleet.yaml: engine instances, scheduler, tokenizer, statistics."""
from __future__ import annotations

from typing import Any, Callable

from physai_ros.config.chunk_merge import check_against_model
from physai_ros.config.fleet import FleetConfig, FleetConfigError, tokenizer_path
from physai_ros.config.language import LanguageServerConfig
from physai_ros.config.server import RemoteEngineConfig
from physai_ros.engine.checkpoint.format import CheckpointFormat, detect_format
from physai_ros.engine.processor.normalizer import Normalizer
from physai_ros.engine.processor.prompt import PromptStyle, prompt_style_for
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.scheduler.base import make_scheduler
from physai_ros.serving.instances import EngineSlot, default_profile
from physai_ros.serving.language.stream import LanguageStream
from physai_ros.serving.rtc_planner import RtcPlanner
from physai_ros.serving.serving_core import ServingCore
from physai_ros.serving.slot_hook import run_slot_hook
from physai_ros.serving.starting_noise import StartingNoise
from physai_ros.serving.startup.preflight import checkpoint_cameras, checkpoint_dir

# Builds the proxy of one server.remote_engines entry for a model: the policy server node passes
# one that makes physai_ros.ros.remote_engine.RemoteEngine objects on its own node.
RemoteEngineFactory = Callable[[RemoteEngineConfig, Any], Any]


def build_engine_slots(cfg: FleetConfig, remote_engine: RemoteEngineFactory | None = None) -> list[EngineSlot]:
    """Local engines (engine_<i>), then one proxy per server.remote_engines entry, made by
    `remote_engine` (the serving layer stays free of ROS: the node supplies the transport)."""
    import torch

    from physai_ros.engine.engine import Pi0Engine
    from physai_ros.engine.types import Pi0Config

    srv = cfg.server
    language = language_enabled(cfg)  # engines keep the VLM's LM head (engine/language/decoder.py)
    arith = dict(dtype=getattr(torch, srv.torch_dtype), cuda_graphs=srv.engine_cuda_graphs)
    slots = []
    # The checkpoint's family (LeRobot <= 0.3, >= 0.4, ours) picks the engine's time schedule
    # and RoPE formula: the numbers its own code produces (engine.checkpoint.format).
    # Standby instances are built (weights loaded) and warmed up like the others, then wait:
    # engine_<engine_instances> ... are the standbys.
    for i in range(srv.engine_instances + srv.standby_instances):
        engine = Pi0Engine.from_preset_or_checkpoint(
            srv.model.preset, None if srv.model.preset is not None else str(checkpoint_dir(cfg)), device=srv.device,
            seed=srv.model.seed, language=language, checkpoint_args=srv.model.load_args(), **arith)
        slots.append(EngineSlot(f"engine_{i}", engine, srv.max_batch, default_profile(srv.max_batch),
                                standby=i >= srv.engine_instances))
    if srv.remote_engines:
        if remote_engine is None:
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
            proxy = remote_engine(r, model)
            # Until the worker advertises, the slot's own cap and default profile stand in.
            slots.append(EngineSlot(r.instance_id, proxy, srv.max_batch, default_profile(srv.max_batch),
                                    standby=r.standby))
    run_slot_hook(slots)  # a process-level hook (the fault tests'); unset: nothing
    return slots


def language_enabled(cfg: FleetConfig) -> bool:
    """The language stream runs when the server's `language:` section or any task's asks, or a
    task's pipeline has a `model: vla` component (its questions decode on the served model's LM
    head, on the prefix the stream offers: pipeline.vla_backend)."""
    return cfg.server.language is not None or any(t.language is not None for t in cfg.tasks.values()) \
        or any(c.model == "vla" for t in cfg.tasks.values() if t.pipeline is not None
               for c in t.pipeline.vlm_components)


def model_format(cfg: FleetConfig) -> CheckpointFormat | None:
    """What server.model.checkpoint is, read from its files (None for a preset model)."""
    return detect_format(checkpoint_dir(cfg)) if cfg.server.model.checkpoint else None


def model_io(cfg: FleetConfig, engine) -> tuple[PromptTokenizer, Normalizer | None, PromptStyle]:
    """The served model's tokenizer, normaliser and prompt style, as fleet.yaml and the
    checkpoint name them (the server's core and an engine worker's components share this)."""
    # The prompt as the checkpoint's own preprocessor writes it (pi0.5: with the state as text).
    fmt = getattr(engine, "checkpoint_format", None)  # decided once, when it loaded
    style = prompt_style_for(engine.config.policy, fmt.family if fmt is not None else None)
    tokenizer = PromptTokenizer(tokenizer_path(cfg), cfg.server.model.max_token_len, verbatim=style.verbatim)
    vocab = engine.config.vocab_size
    if style.verbatim and cfg.server.model.checkpoint and tokenizer.vocab_size < 0.9 * vocab:
        # A LeRobot model embeds its tokenizer's vocabulary (tables are padded by a few percent
        # at most); a much smaller tokenizer is another one, whose ids would all be valid
        # indices: the policy would read nonsense and move anyway.
        raise FleetConfigError(
            f"server.model.tokenizer: {tokenizer.path} has {tokenizer.vocab_size} tokens but the checkpoint's "
            f"model embeds {vocab}: give the tokenizer.json its policy_preprocessor.json names "
            "(PaliGemma's for pi0 / pi0.5)")
    # The checkpoint's statistics (ours or a LeRobot checkpoint's); identity for a preset.
    normalizer = Normalizer.from_checkpoint(checkpoint_dir(cfg)) if cfg.server.model.checkpoint else None
    return tokenizer, normalizer, style


def build_core(cfg: FleetConfig, instance_id: str | None = None,
               remote_engine: RemoteEngineFactory | None = None) -> ServingCore:
    slots = build_engine_slots(cfg, remote_engine)
    tokenizer, normalizer, style = model_io(cfg, slots[0].engine)
    core = ServingCore(
        engines=slots,
        prompt_style=style,
        cameras=checkpoint_cameras(checkpoint_dir(cfg)),
        scheduler=make_scheduler(cfg.server.scheduler, **cfg.server.scheduler_params),
        tokenizer=tokenizer,
        normalizer=normalizer,
        max_observation_age_s=cfg.server.max_observation_age_s,
        instance_id=instance_id,
        allowed_horizon_policies=sorted({t.horizon_policy for t in cfg.tasks.values()
                                         if ":" in t.horizon_policy}),
        max_robots=cfg.server.max_robots,
        robot_idle_release_s=cfg.server.robot_idle_release_s,
    )
    core.rtc = rtc_planner(cfg, slots)
    core.action_runner.starting_noise = StartingNoise({n: t.noise_scale for n, t in cfg.tasks.items()},
                                                      seed=cfg.server.model.seed)
    if language_enabled(cfg):
        core.enable_language(language_stream(cfg, tokenizer))
    return core


def language_stream(cfg: FleetConfig, tokenizer: PromptTokenizer) -> LanguageStream:
    """The language stream of fleet.yaml (docs/language.md). Its questions are checked against
    the tokenizer here, so a question the model cannot read fails at start-up, by key."""
    for name, t in cfg.tasks.items():
        if t.language is None:
            continue
        key = f"tasks.{name}.language"
        n = len(tokenizer.encode_text(t.language.question)) if t.language.question else 0
        limit = (cfg.server.language or LanguageServerConfig()).max_question_tokens
        if n > limit:
            raise FleetConfigError(f"{key}.question: {n} tokens, more than server.language.max_question_tokens ({limit})")
        if t.mode == "streaming":
            raise FleetConfigError(f"{key}: the streaming action expert keeps no prefix cache for text; "
                                   "use a chunked task (docs/language.md)")
    return LanguageStream(cfg.server.language or LanguageServerConfig(),
                          {n: t.language for n, t in cfg.tasks.items()}, tokenizer)


def rtc_planner(cfg: FleetConfig, slots: list[EngineSlot]) -> RtcPlanner:
    """Real-time chunking for the tasks with `chunk_merge: rtc` (docs/rtc.md), checked against
    the engines that would run it: errors name the task's key."""
    from physai_ros.engine.engine import accepts_rtc

    rtc_tasks = sorted(n for n, t in cfg.tasks.items() if t.chunk_merge.rtc)
    if rtc_tasks:
        key = f"tasks.{rtc_tasks[0]}.chunk_merge"
        check_against_model(cfg.tasks, slots[0].engine.config.chunk_size)
        if any(s.remote for s in slots):
            raise FleetConfigError(f"{key}: rtc guides are not carried to remote engine workers "
                                   "(server.remote_engines); use local engine instances")
        for s in slots:
            if not accepts_rtc(s.engine.model):
                raise FleetConfigError(f"{key}: the model ({type(s.engine.model).__name__}) has no real-time chunking")
    return RtcPlanner({n: t.chunk_merge for n, t in cfg.tasks.items()})


def profile_local_engines(core: ServingCore, cfg: FleetConfig,
                          progress: Callable[[str], None] | None = None) -> dict[str, float]:
    """Measure each local instance's latency-vs-batch profile (server.profile) and give it to
    the scheduler through the slot, replacing the flat default: the batching cap (saturation
    point) and wait-ratio placement then use this machine's real numbers. Doubles as the
    warm-up. Remote instances measure their own (engine_worker). A measurement this machine made
    before for the same model and settings is reused (serving/startup/profile_cache.py) after one warm-up
    call. Returns seconds per instance.
    """
    import time

    import torch

    from physai_ros.serving.startup import profile_cache
    from physai_ros.workers.profiling import measure_profile, synthetic_inputs

    p = cfg.server.profile
    if p is None:
        return {}
    took = {}
    tokens = p.tokens or core.action_runner.tokenizer.max_len
    # A LeRobot checkpoint's frames arrive at the cameras' own size and are resized in the engine
    # call: profile with the fleet's largest camera, so the resize is in the measured latency.
    frame_size = max((r.camera_size(i) for r in cfg.robots for i in range(r.num_views)),
                     key=lambda hw: hw[0] * hw[1]) if core.action_runner.prompt_style.verbatim else None
    for slot in core.engines.values():
        if slot.remote:
            continue  # remote: advertised by its worker
        t0 = time.perf_counter()
        key = profile_cache.profile_key(
            model=cfg.server.model, checkpoint=cfg.server.model.checkpoint, engine_config=slot.engine.config,
            device=cfg.server.device, dtype=cfg.server.torch_dtype, threads=torch.get_num_threads(),
            measurement=(slot.instance_id, p, min(p.max_batch, slot.max_batch), tokens, frame_size)) if p.cache else None
        cached = profile_cache.load(key) if key else None
        if cached is not None:
            t_call = time.perf_counter()
            with torch.inference_mode():  # the warm-up the measurement would have been
                slot.engine.infer(synthetic_inputs(slot.engine.config, 1, p.views, tokens, frame_size=frame_size))
            t_call = time.perf_counter() - t_call
            took[slot.instance_id] = time.perf_counter() - t0
            profile, path = cached
            if profile_cache.agrees_with_warm_up(profile, t_call):
                slot.profile = profile
                if progress is not None:
                    progress(f"{slot.instance_id}: latency profile from {path} (measured on this machine "
                             f"before; delete it to measure again), warm-up call {took[slot.instance_id]:.1f} s")
                continue
            if progress is not None:
                progress(f"{slot.instance_id}: the cached latency profile ({profile.latency(1) * 1e3:.0f} ms at "
                         f"batch 1, {path}) is over {profile_cache.WARM_UP_FACTOR:g}x this start's warm-up call "
                         f"({t_call * 1e3:.0f} ms): measured on a busier machine; measuring again")

        def on_batch(b: int, n: int, left_s: float, iid: str = slot.instance_id) -> None:
            if progress is not None:
                progress(f"profiling {iid}: batch size {b} of {n} done after "
                         f"{time.perf_counter() - t0:.1f} s, about {left_s:.0f} s left")

        with torch.inference_mode():
            slot.profile = measure_profile(
                slot.engine.infer, slot.engine.config, min(p.max_batch, slot.max_batch), reps=p.reps,
                views=p.views, tokens=tokens, on_batch=on_batch, frame_size=frame_size)
        took[slot.instance_id] = time.perf_counter() - t0
        if key:
            profile_cache.store(key, slot.profile, took[slot.instance_id])
    return took


def build_and_warm(cfg: FleetConfig, remote_engine: RemoteEngineFactory | None = None,
                   progress: Callable[[str], None] | None = None) -> tuple[ServingCore, dict[str, float], float]:
    """The server's start-up: build the core, then measure each local instance's profile, which
    runs every batch size once unmeasured first, so it is the warm-up (a plain warm-up call when
    server.profile is off). Returns (core, seconds profiling per instance, warm-up seconds)."""
    import time

    started = time.monotonic()
    core = build_core(cfg, remote_engine=remote_engine)
    if progress is not None:
        progress(f"model loaded after {time.monotonic() - started:.1f} s; measuring the "
                 "latency-vs-batch profile (this is the warm-up)")
    profiled = profile_local_engines(core, cfg, progress=progress)
    return core, profiled, max(profiled.values()) if profiled else core.warm_up()


def serving_summary(cfg: FleetConfig, core: ServingCore, profiled: dict[str, float], warm_s: float) -> str:
    """The server's "serving" line after SERVING_LOG_MARK: model, instances, scheduler, profiles."""
    profiles = "; ".join(f"{iid}: " + " ".join(f"{b}:{t * 1e3:.0f}ms" for b, t in core.engines[iid].profile.to_pairs())
                         for iid in profiled)
    return (f"{cfg.server.model.preset or cfg.server.model.checkpoint} with {len(core.engines)} engine instance(s), "
            f"scheduler {cfg.server.scheduler}, instance {core.instance_id} (warm-up {warm_s * 1e3:.0f} ms"
            + (f", profiles {profiles}" if profiled else "") + ")")
