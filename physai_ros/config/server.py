"""fleet.yaml's `server:` section: the model, engine instances, remote engine workers, the
scheduler and its parameters, the latency profile measurement and streaming."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from physai_ros.config.language import LanguageServerConfig, parse_server_language
from physai_ros.config_fields import (FleetConfigError, boolean, integer, join_key, mapping, no_unknown, number,
                                      required, string)
from physai_ros.protocol.chunk import HOLD_ENGINE_INSTANCE

SCHEDULERS = ("fifo", "autellix", "wait_ratio")
DEVICES = ("cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16")  # auto: bfloat16 on cuda, float32 on cpu
CUDA_GRAPHS = ("auto", "on", "off")  # auto: on for pi0 on cuda (pi0.5's: on request, unverified)
STREAM_FORCE = ("checkpoint", "random", "none")
STREAM_WHEN_FULL = ("chunked", "refuse")


@dataclass(frozen=True)
class ModelConfig:
    preset: str | None
    checkpoint: str | None
    tokenizer: str
    max_token_len: int
    seed: int
    # Head counts a checkpoint's tensors cannot show (None: pi0's, 256-wide Gemma heads and 16
    # SigLIP heads); only for non-standard towers.
    head_dim: int | None = None
    vision_heads: int | None = None

    def load_args(self) -> dict:
        """Keyword arguments for Pi0Engine.from_lerobot_checkpoint / load_lerobot_checkpoint."""
        out = {}
        if self.head_dim is not None:
            out["head_dim"] = self.head_dim
        if self.vision_heads is not None:
            out["vision_heads"] = self.vision_heads
        return out


@dataclass(frozen=True)
class RemoteEngineConfig:
    """An engine instance in an `engine_worker` process, possibly on another host (reached over
    DDS). Its tier, max_batch and latency profile are the worker's own advertisement."""

    instance_id: str
    timeout_s: float | None  # None: from the advertised profile (physai_ros.ros.remote_engine)
    liveness_timeout_s: float | None  # None: 3 heartbeat periods
    # A hot standby on another host (ROSA §3.4.4): warm, advertised, off the routes until an
    # active instance is down; it steps back when that instance returns.
    standby: bool = False


@dataclass(frozen=True)
class ProfileConfig:
    """Start-up measurement of each local engine's latency-vs-batch profile
    (physai_ros.workers.profiling): the scheduler's batching cap and placement use it."""

    reps: int = 1            # timed calls per batch size (after one warm-up call)
    max_batch: int = 4       # measure batch sizes 1..min(this, server.max_batch)
    views: int = 2           # camera views of the synthetic inputs
    tokens: int | None = None  # prompt tokens; None: the model's max_token_len
    cache: bool = True       # reuse this machine's earlier measurement (serving/startup/profile_cache.py)


@dataclass(frozen=True)
class StreamingServerConfig:
    """server.streaming: the shared VLM + action-expert streams (realtime-vla section 6). Every
    streaming robot is a slot in the batch of the same two streams, so the rates are the
    server's, not a task's (physai_ros.serving.streaming.service)."""

    slots: int = 1               # robots served in streaming mode at once
    vlm_hz: float = 30.0         # VLM stream (camera rate)
    ae_hz: float = 480.0         # action-expert stream
    action_hz: float = 50.0      # the checkpoint's action rate (token spacing of the window)
    steps_per_token: float | None = None  # AE ticks from noise to final; None: model's num_steps
    force: str = "checkpoint"    # force token: checkpoint (if it has force_proj.*) | random | none
    when_full: str = "chunked"   # no free slot: serve the robot chunked, or refuse it
    timeout_s: float = 2.0       # a robot silent this long loses its slot
    torch_threads: int = 1       # intra-op threads of the streams (tiny ops: 1 is fastest)
    # What held 480 Hz on a 2-core CPU (docs/streaming.md, "The tick"): the VLM stream in its own
    # process (KV cache through shared memory; CPU only) and the action-expert thread at
    # SCHED_FIFO priority (needs root or CAP_SYS_NICE; 0 = ordinary scheduling).
    vlm: str = "thread"          # thread | process
    ae_priority: int = 0         # 0..99
    # fused | compiled (torch.compile at start-up) | graphs (CUDA graph per snapshot shape; GPU only,
    # the parser's default on device cuda) | plain
    tick: str = "fused"
    # The most a VLM pass / an action-expert tick waits while a chunked batch computes on a local
    # instance: on shared cores chunked rounds (deadlines, SLO escalation) go first, the streams
    # run late (serving.compute_priority). Absent: 1.0 / 0.25 on the CPU, 0 (never) on CUDA.
    vlm_waits_for_chunked_s: float = 1.0
    tick_waits_for_chunked_s: float = 0.25


@dataclass(frozen=True)
class ServerConfig:
    node_name: str
    model: ModelConfig
    device: str
    engine_instances: int
    max_batch: int
    scheduler: str
    max_observation_age_s: float
    remote_engines: tuple[RemoteEngineConfig, ...] = ()
    # Constructor parameters for make_scheduler(scheduler, **scheduler_params).
    scheduler_params: Mapping[str, Any] = field(default_factory=dict)
    profile: ProfileConfig | None = field(default_factory=ProfileConfig)  # None: flat default
    # The local engines' arithmetic: on a GPU, bf16 and CUDA graphs (an H200 ran a full pi0
    # chunk in 43 ms with graphs against ~200 ms eager: bench/results/gpu).
    dtype: str = "auto"
    cuda_graphs: str = "auto"
    streaming: StreamingServerConfig = field(default_factory=StreamingServerConfig)
    # Admission and hot standby (ROSA section 3.4.4; physai_ros.serving.serving_core.ServingCore).
    max_robots: int | None = None  # robots registered at once; None: no limit
    robot_idle_release_s: float = 10.0  # a robot silent this long (no observation, no
    #   registration) gives its place up when a new robot needs it
    standby_instances: int = 0  # extra local engines, warm, serving only when an active one dies
    # A robot silent this long (link cut, client dead) is freed at once: registration, queued
    # request, scheduler history (it registers again on return). None: only robot_idle_release_s
    # under capacity pressure. Set it above the clients' 2 s keep-alive re-registration.
    robot_timeout_s: float | None = None
    # Intra-op torch threads of each local engine instance (serving.compute_threads). 0 (default):
    # torch's default count, the model built on the main thread: libgomp then manages two thread
    # teams, throttles their spinning, and the engine ran sim_pi0 in ~45 ms here (idle), but
    # shared the cores well with the 12 other processes of `make demo` (13 tasks in 30 s, round
    # trip ~300 ms). N >= 1: the main thread pinned to one thread, the model built on a thread
    # that ends, each engine at N threads in one team: 17 ms at N=1 on an idle machine (2.4-2.7x),
    # but in `make demo` 1-7 tasks and a 0.5-1.8 s round trip at N=1, and N=2 (a spinning team)
    # collapsed there (7-21 s). For a server with cores of its own; docs/serving.md.
    torch_threads: int = 0
    # The language stream's server side (config.language); None: off unless a task asks.
    language: LanguageServerConfig | None = None
    # The pipeline components' queue (serving.pipeline.service): order, batch, bound.
    components: "ComponentServerConfig" = field(default_factory=lambda: ComponentServerConfig())

    @property
    def torch_dtype(self) -> str:
        """'float32' or 'bfloat16' once 'auto' is resolved against the device."""
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if self.device == "cuda" else "float32"

    @property
    def engine_cuda_graphs(self) -> bool | str:
        """Pi0Engine's cuda_graphs argument: True, False, or "auto" (it decides where they are on)."""
        return {"on": True, "off": False}.get(self.cuda_graphs, "auto")


def _parse_model(d: Any, path: str) -> ModelConfig:
    d = mapping(d, path)
    no_unknown(d, {"preset", "checkpoint", "tokenizer", "max_token_len", "seed", "head_dim", "vision_heads"}, path)
    preset = d.get("preset")
    checkpoint = d.get("checkpoint")
    if (preset is None) == (checkpoint is None):
        raise FleetConfigError(f"{path}: expected exactly one of 'preset' or 'checkpoint'")
    if preset is not None:
        string(preset, join_key(path, "preset"))
    if checkpoint is not None:
        string(checkpoint, join_key(path, "checkpoint"))
    return ModelConfig(
        preset=preset,
        checkpoint=checkpoint,
        tokenizer=string(required(d, "tokenizer", path), join_key(path, "tokenizer")),
        max_token_len=integer(d.get("max_token_len", 48), join_key(path, "max_token_len"), 4),
        seed=integer(d.get("seed", 0), join_key(path, "seed"), 0),
        head_dim=None if d.get("head_dim") is None else integer(d["head_dim"], join_key(path, "head_dim"), 1),
        vision_heads=None if d.get("vision_heads") is None else integer(d["vision_heads"],
                                                                        join_key(path, "vision_heads"), 1),
    )


def _parse_remote_engines(v: Any, path: str) -> tuple[RemoteEngineConfig, ...]:
    if not isinstance(v, list):
        raise FleetConfigError(f"{path}: expected a list, got {v!r}")
    out: list[RemoteEngineConfig] = []
    for i, d in enumerate(v):
        p = f"{path}[{i}]"
        d = mapping(d, p)
        no_unknown(d, {"instance_id", "timeout_s", "liveness_timeout_s", "standby"}, p)
        iid = string(required(d, "instance_id", p), join_key(p, "instance_id"))
        if not iid.replace("_", "a").isalnum() or not iid[0].isalpha():
            raise FleetConfigError(f"{p}.instance_id: expected letters, digits and '_' starting with "
                                   f"a letter (it becomes a ROS topic name), got {iid!r}")
        if iid.startswith("engine_") or iid == HOLD_ENGINE_INSTANCE or iid in (r.instance_id for r in out):
            raise FleetConfigError(f"{p}.instance_id: expected a unique id not starting with "
                                   f"'engine_' (local instances use those) and not {HOLD_ENGINE_INSTANCE!r} "
                                   f"(the robot client's hold marker), got {iid!r}")
        opt = {k: number(d[k], join_key(p, k)) if d.get(k) is not None else None
               for k in ("timeout_s", "liveness_timeout_s")}
        standby = d.get("standby", False)
        if not isinstance(standby, bool):
            raise FleetConfigError(f"{p}.standby: expected true or false, got {standby!r}")
        out.append(RemoteEngineConfig(iid, **opt, standby=standby))
    return tuple(out)


# Scheduler parameters fleet.yaml may set, with their checks; names are the constructors'
# keyword arguments (physai_ros.scheduler.policy_machinery.QueueScheduler, wait_ratio.WaitRatioScheduler).
_QUEUE_PARAMS = {
    "stale_after_s": "pos_or_null", "refresh_timeout_s": "nonneg", "saturation_tolerance": "fraction",
    "default_exec_s": "nonneg", "count_first_wait": "bool", "task_ttl_s": "pos",
    # The paper's readings by default; the others are the ablation's (docs/scheduler.md).
    "provisional_wait": "str", "hold_ratio_floor": "bool", "placement_rule": "str",
}
SCHEDULER_PARAMS = {
    "fifo": _QUEUE_PARAMS, "autellix": _QUEUE_PARAMS,
    "wait_ratio": {**_QUEUE_PARAMS, "buckets": "int0", "aging_interval": "int1", "intra_bucket": "str"},
}


def _parse_scheduler(v: Any, path: str) -> tuple[str, dict[str, Any]]:
    """`fifo` or `{name: wait_ratio, buckets: 10, aging_interval: 4, stale_after_s: 0.2, ...}`."""
    if isinstance(v, str):
        return string(v, path, SCHEDULERS), {}
    d = mapping(v, path)
    name = string(required(d, "name", path), join_key(path, "name"), SCHEDULERS)
    allowed = SCHEDULER_PARAMS[name]
    no_unknown(d, {"name", *allowed}, path)
    params: dict[str, Any] = {}
    for key, kind in allowed.items():
        if key not in d:
            continue
        p, x = join_key(path, key), d[key]
        if kind == "pos_or_null":
            params[key] = None if x is None else number(x, p)
        elif kind == "pos":
            params[key] = number(x, p)
        elif kind == "nonneg":
            params[key] = number(x, p, allow_zero=True)
        elif kind == "fraction":
            if not (isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1):
                raise FleetConfigError(f"{p}: expected a number in [0, 1), got {x!r}")
            params[key] = float(x)
        elif kind == "bool":
            if not isinstance(x, bool):
                raise FleetConfigError(f"{p}: expected true or false, got {x!r}")
            params[key] = x
        elif kind == "str":  # the allowed values: the constructor's check below
            params[key] = string(x, p)
        else:
            params[key] = integer(x, p, 0 if kind == "int0" else 1)
    from physai_ros.scheduler.base import make_scheduler

    try:  # the constructor's own checks, so nothing surfaces later in the server
        make_scheduler(name, **params)
    except ValueError as e:
        raise FleetConfigError(f"{path}: {e}") from None
    return name, params


def _parse_profile(v: Any, path: str) -> ProfileConfig | None:
    """`false` keeps the flat default profile; a mapping sets the measurement."""
    if v is False or v is None:
        return None
    if v is True:
        return ProfileConfig()
    d = mapping(v, path)
    no_unknown(d, {"reps", "max_batch", "views", "tokens", "cache"}, path)
    dflt = ProfileConfig()
    tokens = d.get("tokens")
    return ProfileConfig(
        reps=integer(d.get("reps", dflt.reps), join_key(path, "reps"), 1),
        max_batch=integer(d.get("max_batch", dflt.max_batch), join_key(path, "max_batch"), 1),
        views=integer(d.get("views", dflt.views), join_key(path, "views"), 1),
        tokens=None if tokens is None else integer(tokens, join_key(path, "tokens"), 1),
        cache=boolean(d.get("cache", dflt.cache), join_key(path, "cache")),
    )


@dataclass(frozen=True)
class ComponentServerConfig:
    """fleet.yaml server.components: how waiting component questions are served
    (serving.pipeline.service, serving.pipeline.order; docs/factory.md)."""

    # kairos: Kairos multi-agent priority and application start | shortest: agents by mean answer
    # time (shortest predicted first) | fifo: arrival
    order: str = "kairos"
    max_batch: int = 8  # questions per backend call
    max_queue: int = 32  # questions waiting per backend; more are refused `busy`
    max_question_chars: int = 1000  # longer questions are refused `bad_question`
    max_answer_tokens: int = 256  # a query asking for more is refused `max_tokens`
    # K/V memory (MiB) each instance may give `model: vla` questions at once: Kairos's time-slot
    # dispatcher admits a question only where it fits (serving.pipeline.memory_dispatch). None: unbounded
    kv_budget_mb: float | None = None
    # route: a `model: vla` question runs on the instance its factory route names | memory: on any
    # free instance, the one with the lowest expected K/V peak (its route's on a tie)
    placement: str = "route"


def _parse_components(v: Any, path: str) -> ComponentServerConfig:
    d = mapping(v, path)
    dflt = ComponentServerConfig()
    no_unknown(d, set(vars(dflt)), path)
    ints = {k: integer(d.get(k, getattr(dflt, k)), join_key(path, k), 1)
            for k in ("max_batch", "max_queue", "max_question_chars", "max_answer_tokens")}
    budget = d.get("kv_budget_mb")
    return ComponentServerConfig(order=string(d.get("order", dflt.order), join_key(path, "order"),
                                               ("kairos", "shortest", "fifo")),
                                 kv_budget_mb=None if budget is None else number(budget, join_key(path, "kv_budget_mb")),
                                 placement=string(d.get("placement", dflt.placement), join_key(path, "placement"),
                                                  ("route", "memory")),
                                 **ints)


def parse_server(d: Any) -> ServerConfig:
    path = "server"
    d = mapping(d, path)
    no_unknown(d, {"node_name", "model", "device", "engine_instances", "max_batch", "scheduler",
                    "max_observation_age_s", "remote_engines", "profile", "streaming",
                    "max_robots", "robot_idle_release_s", "standby_instances", "robot_timeout_s", "language",
                    "components", "torch_threads", "dtype", "cuda_graphs"}, path)
    remote = _parse_remote_engines(d.get("remote_engines", []), join_key(path, "remote_engines"))
    # Local instances may be 0 when engine workers serve (a server host without a GPU).
    engine_instances = integer(d.get("engine_instances", 1), join_key(path, "engine_instances"),
                            0 if remote else 1)
    scheduler, scheduler_params = _parse_scheduler(d.get("scheduler", "fifo"), join_key(path, "scheduler"))
    device = string(d.get("device", "cpu"), join_key(path, "device"), DEVICES)
    graphs = d.get("cuda_graphs", "auto")
    graphs = {True: "on", False: "off"}.get(graphs, graphs) if isinstance(graphs, bool) else graphs
    graphs = string(graphs, join_key(path, "cuda_graphs"), CUDA_GRAPHS)
    if graphs == "on" and device != "cuda":
        raise FleetConfigError(f"{join_key(path, 'cuda_graphs')}: on needs server.device cuda (device is {device!r})")
    return ServerConfig(
        node_name=string(d.get("node_name", "policy_server"), join_key(path, "node_name")),
        model=_parse_model(required(d, "model", path), join_key(path, "model")),
        device=device,
        dtype=string(d.get("dtype", "auto"), join_key(path, "dtype"), DTYPES),
        cuda_graphs=graphs,
        engine_instances=engine_instances,
        max_batch=integer(d.get("max_batch", 8), join_key(path, "max_batch"), 1),
        scheduler=scheduler,
        scheduler_params=scheduler_params,
        profile=_parse_profile(d.get("profile", True), join_key(path, "profile")),
        max_observation_age_s=number(d.get("max_observation_age_s", 2.0),
                                   join_key(path, "max_observation_age_s")),
        remote_engines=remote,
        max_robots=None if d.get("max_robots") is None else integer(d["max_robots"], join_key(path, "max_robots"), 1),
        robot_idle_release_s=number(d.get("robot_idle_release_s", 10.0), join_key(path, "robot_idle_release_s")),
        standby_instances=integer(d.get("standby_instances", 0), join_key(path, "standby_instances"), 0),
        torch_threads=integer(d.get("torch_threads", 0), join_key(path, "torch_threads"), 0),
        robot_timeout_s=None if d.get("robot_timeout_s") is None else number(d["robot_timeout_s"],
                                                                           join_key(path, "robot_timeout_s")),
        streaming=_parse_streaming(d.get("streaming", {}), join_key(path, "streaming"), device),
        language=parse_server_language(d.get("language"), join_key(path, "language")),
        components=_parse_components(d.get("components", {}), join_key(path, "components")),
    )


def _parse_streaming(v: Any, path: str, device: str = "cpu") -> StreamingServerConfig:
    d = mapping(v, path)
    dflt = StreamingServerConfig()
    no_unknown(d, set(vars(dflt)), path)
    out = {}
    for key in ("vlm_hz", "ae_hz", "action_hz", "timeout_s"):
        out[key] = number(d.get(key, getattr(dflt, key)), join_key(path, key))
    out["slots"] = integer(d.get("slots", dflt.slots), join_key(path, "slots"), 1)
    out["torch_threads"] = integer(d.get("torch_threads", dflt.torch_threads), join_key(path, "torch_threads"), 1)
    spt = d.get("steps_per_token")
    out["steps_per_token"] = None if spt is None else number(spt, join_key(path, "steps_per_token"))
    out["force"] = string(d.get("force", dflt.force), join_key(path, "force"), STREAM_FORCE)
    out["when_full"] = string(d.get("when_full", dflt.when_full), join_key(path, "when_full"), STREAM_WHEN_FULL)
    out["vlm"] = string(d.get("vlm", dflt.vlm), join_key(path, "vlm"), ("thread", "process"))
    out["ae_priority"] = integer(d.get("ae_priority", dflt.ae_priority), join_key(path, "ae_priority"), 0)
    if out["ae_priority"] > 99:
        raise FleetConfigError(f"{join_key(path, 'ae_priority')}: SCHED_FIFO priorities are 1..99 (0: ordinary), "
                               f"got {out['ae_priority']}")
    # On CUDA the graphed tick is the default: on an H200 it equals the eager fused tick exactly
    # and runs it in half the time (bench/results/gpu, runs 5 and 6).
    tick = d.get("tick", "graphs" if device == "cuda" else dflt.tick)
    out["tick"] = string(tick, join_key(path, "tick"), ("fused", "compiled", "graphs", "plain"))
    for key in ("vlm_waits_for_chunked_s", "tick_waits_for_chunked_s"):
        out[key] = number(d.get(key, 0.0 if device == "cuda" else getattr(dflt, key)), join_key(path, key), allow_zero=True)
    if out["tick"] == "graphs" and device != "cuda":
        raise FleetConfigError(f"{join_key(path, 'tick')}: graphs needs server.device cuda (device is {device!r})")
    return StreamingServerConfig(**out)
