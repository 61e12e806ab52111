"""The component backends fleet.yaml's pipelines name (serving.pipeline.service serves them):
which backend answers each (task, component), the start-up check of Hugging Face directories,
and loading them (`model: vla` on the engine instance a factory plan gives the components)."""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from physai_ros.config.fleet import FleetConfig, fleet_dir, resolve_package_path
from physai_ros.config_fields import FleetConfigError
from physai_ros.pipeline.backend import ComponentAnswer
from physai_ros.protocol.component import QUESTION_COMPONENTS
from physai_ros.pipeline.config import VLA_MODEL, HfModel
from physai_ros.protocol.component import BACKEND_ERROR, ComponentAnswerData, ComponentRequest

VLA_KEY = VLA_MODEL  # the backend key of `model: vla`


def hf_key(path: str, device: str) -> str:
    return f"hf:{path}@{device}"


def plan_routes(fleet: FleetConfig) -> dict[tuple[str, str], str]:
    """(task, component) -> backend key, for every VLM component of every task's pipeline. An hf
    directory is resolved like other fleet.yaml paths (package://, relative to the file)."""
    routes = {}
    base = fleet_dir(fleet)
    for name, task in fleet.tasks.items():
        if task.pipeline is None:
            continue
        for comp in task.pipeline.vlm_components:
            m = comp.model
            if isinstance(m, HfModel):
                routes[(name, comp.name)] = hf_key(str(resolve_package_path(m.path, base)), m.device)
            else:
                routes[(name, comp.name)] = VLA_KEY
    return routes


def _key_paths(fleet: FleetConfig, routes: Mapping[tuple[str, str], str], key: str) -> str:
    return ", ".join(f"tasks.{t}.components.{c}.model" + (".hf" if k != VLA_KEY else "")
                     for (t, c), k in sorted(routes.items()) if k == key)


def check_component_models(fleet: FleetConfig) -> None:
    """Start-up check without loading anything: every hf directory exists (FleetConfigError
    naming the key path and the resolved directory otherwise)."""
    base = fleet_dir(fleet)
    for name, task in fleet.tasks.items():
        for comp in (task.pipeline.vlm_components if task.pipeline is not None else ()):
            if isinstance(comp.model, HfModel):
                path = resolve_package_path(comp.model.path, base)
                if not path.is_dir():
                    raise FleetConfigError(f"tasks.{name}.components.{comp.name}.model.hf: {comp.model.path!r} -> "
                                           f"{path}: no such directory (a Hugging Face vision-language model "
                                           "directory, docs/pipelines.md)")


def load_backends(fleet: FleetConfig, core: Any, keys: Sequence[str] | None = None,
                  remote: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """One backend per key of plan_routes(fleet) (or of `keys`): errors name the key paths.
    remote(instance_id): the backend for a factory plan's components on an engine worker (the
    node supplies it: the serving layer stays free of ROS)."""
    routes = plan_routes(fleet)
    check_component_models(fleet)
    out: dict[str, Any] = {}
    for key in sorted(set(routes.values()) if keys is None else set(keys)):
        where = _key_paths(fleet, routes, key)
        try:
            if key == VLA_KEY:
                from physai_ros.pipeline.vla_backend import VLABackboneBackend

                # A factory plan (serving.factory_runtime) names the instances hosting the
                # components: one backend on each (key vla@<instance>, the robots' routes pick
                # it), the first also under `vla`. System 1's prefix is shared only on a System 1
                # instance; an engine worker is asked over DDS (`remote`).
                planned = planned_component_instances(core)
                for iid in planned or [None]:
                    if iid is not None and core.engines[iid].remote:
                        if remote is None:
                            raise FleetConfigError(f"the factory plan puts the components on engine worker {iid}, "
                                                   "which needs a ROS node to reach")
                        backend = remote(iid)
                    else:
                        shared = iid is None or iid in core.factory.action_instances(lambda i: True)
                        backend = VLABackboneBackend.from_core(core, instance_id=iid, attach=shared)
                    if iid is not None:
                        out[instance_key(iid)] = backend
                    out.setdefault(key, backend)
            else:
                from physai_ros.pipeline.hf_vlm import HFVisionLanguageBackend

                path, _, device = key[len("hf:"):].rpartition("@")
                out[key] = HFVisionLanguageBackend(path, device, name=f"hf:{path}")
        except Exception as e:
            for b in distinct(out):
                b.close()
            raise FleetConfigError(f"{where}: cannot serve this component: {e}") from e
    if VLA_KEY in out:
        try:
            check_vla_questions(fleet, routes, out[VLA_KEY])
        except FleetConfigError:
            for b in distinct(out):
                b.close()
            raise
    return out


def check_vla_questions(fleet: FleetConfig, routes: Mapping[tuple[str, str], str], backend: Any) -> None:
    """Every `model: vla` component's question, {task} filled with its task's prompt, encoded as
    the backbone will encode it: one it cannot read (too many tokens, ids outside the model's
    vocabulary) fails at start-up by key, not as an error on every query. A remote backend (an
    engine worker) is checked with the same tokenizer where it has one."""
    from physai_ros.pipeline.vla_inputs import QueryError, question_ids

    tokenizer, settings, cfg = (getattr(backend, a, None) for a in ("tokenizer", "settings", "config"))
    if tokenizer is None or settings is None or cfg is None:
        return
    for (name, comp_name), key in sorted(routes.items()):
        if key != VLA_KEY:
            continue
        pipeline = fleet.tasks[name].pipeline
        question = pipeline.component(comp_name).question(pipeline.system1.prompt)
        try:
            question_ids(tokenizer, question, cfg.vocab_size, settings.max_question_tokens)
        except QueryError as e:
            raise FleetConfigError(f"tasks.{name}.components.{comp_name}.prompt: asked as {question[:120]!r}: {e}")


def instance_key(instance_id: str) -> str:
    """The backend key of the served backbone on one planned instance."""
    return f"{VLA_KEY}@{instance_id}"


def planned_component_instances(core: Any) -> list[str]:
    """The instances a factory plan gives VLM components (none without a plan), in plan order."""
    factory = getattr(core, "factory", None)
    if factory is None:
        return []
    return factory.instances_hosting(QUESTION_COMPONENTS)




def distinct(backends: Mapping[str, Any]) -> list[Any]:
    """Each backend once: a factory plan's first instance is served under two keys (`vla` and
    `vla@<instance>`)."""
    return list({id(b): b for b in backends.values()}.values())


def ask(backend: Any, queries: Sequence[Any]) -> list[Any]:
    """One backend call; a backend that fails as a whole (raises, or miscounts its answers) gives
    every query the reason (meta["call_failed"]), so one bad call never leaves a question
    unanswered."""
    try:
        raw = backend.answer(list(queries))
        if len(raw) != len(queries):
            raise RuntimeError(f"{len(raw)} answers for {len(queries)} queries")
        return raw
    except Exception as e:
        return [ComponentAnswer(error=f"{type(e).__name__}: {e}", meta={"call_failed": True}) for _ in queries]


def answer_data(req: ComponentRequest, a: Any, backend: Any, queue_ms: float) -> ComponentAnswerData:
    """A backend's raw answer as the ComponentAnswer message's data (errors under BACKEND_ERROR,
    the backend named with the path it took)."""
    error = getattr(a, "error", "") or ""
    if error:
        error = f"{BACKEND_ERROR}: {error}"
    meta = getattr(a, "meta", None) or {}
    name = backend.name + (f"/{meta['path']}" if isinstance(meta.get("path"), str) else "")
    return ComponentAnswerData(robot_id=req.robot_id, query_id=req.query_id, component=req.component,
                               text="" if error else str(getattr(a, "text", "")), error=error,
                               tokens=int(getattr(a, "tokens", 0) or 0),
                               latency_ms=float(getattr(a, "latency_ms", 0.0) or 0.0),
                               queue_ms=queue_ms, backend=name, stamp=time.time())
