"""One server per MODEL for the obligation components (ROSA §3.4.1).

ROSA §3.4.1 dedicates each GPU worker to a single model, not to a single component: what it
avoids is interference between different models on one GPU. In physai_ros several obligation
components are often the same model - the safety checker and the progress monitor are both
answered by the served VLA's backbone (fleet.yaml `model: vla`) - so one server hosting that
model can answer all of them. Their streams are pooled per model: a robot's safety stream at
2 Hz and its monitor stream at 0.5 Hz on one model are one 2.5 Hz stream on a server of that
model's profile, and the SLO that must hold is the strictest of the pooled components' (the
smallest deadline at the highest quantile: every request on the server sees the same latency
distribution, so meeting the strictest meets each). A server's `component` is then the pooled
label, components joined with "+" in OBLIGATION order ("safety+monitor"); `hosted_components`
reads it back. Each component keeps its own Route with its own rate (Stream.parts).

Goal-coupled models (system1, system2) are not pooled even when they are one model: System 1 is
served with static batching (a batch size per server, searched by the solver) and System 2 with
continuous batching (ROSA §3.4.1 "Finally, for batching"); they are different serving modes whose
profiles L(b, lambda) are measured separately, and a pooled server would need a profile of the
mixed mode that does not exist. Their loads also scale with the searched action rate f, while
obligation loads are fixed.
"""
from __future__ import annotations

from typing import Iterable

from physai_ros.scheduler.factory.configs import Pair, Part, Stream, quantile_column
from physai_ros.scheduler.factory.types import OBLIGATION, ComponentSpec, ServerAssignment, TaskClass

SEP = "+"
# configs.quantile_column maps every quantile it does not know to p99: order the columns by strictness.
_STRICTNESS = {"p50": 0, "mean": 0, "p99": 1}


def hosted_components(role: ServerAssignment | str) -> tuple[str, ...]:
    """The components a server answers: ("system1",), ("monitor",), ("safety", "monitor"), ...
    Takes a ServerAssignment or its `component` label (e.g. an engine instance's role)."""
    label = role if isinstance(role, str) else role.component
    return tuple(c for c in label.split(SEP) if c)


def pooled_label(components: Iterable[str]) -> str:
    """The label of a server hosting these components: OBLIGATION order, then any others sorted."""
    got = set(components)
    return SEP.join([c for c in OBLIGATION if c in got] + sorted(got - set(OBLIGATION)))


def is_obligation(label: str) -> bool:
    comps = hosted_components(label)
    return bool(comps) and all(c in OBLIGATION for c in comps)


def pool_key(component: str, model: str) -> tuple[str, str]:
    """Servers with equal keys may take each other's streams: obligation servers by model alone,
    goal-coupled servers by (component, model) as before."""
    return ("", model) if is_obligation(component) else (component, model)


def part_of(spec: ComponentSpec, rate_hz: float) -> Part:
    return Part(spec.component, float(rate_hz), spec.slo_s, quantile_column(spec.slo_quantile))


def pooled_stream(class_name: str, robot_id: str, parts: tuple[Part, ...]) -> Stream:
    """One robot's stream of these parts: summed rate, strictest deadline at the strictest column."""
    quantile = max((p.quantile for p in parts), key=lambda q: _STRICTNESS.get(q, 1))
    return Stream(class_name, robot_id, sum(p.rate_hz for p in parts), min(p.slo_s for p in parts), quantile,
                  parts=tuple(sorted(parts, key=_obligation_order)))


def _obligation_order(part: Part) -> int:
    return OBLIGATION.index(part.component) if part.component in OBLIGATION else len(OBLIGATION)


def obligation_freq(spec: ComponentSpec, class_name: str) -> float:
    if spec.freq_hz is None or spec.freq_hz <= 0:
        raise ValueError(f"class {class_name!r}: obligation component {spec.component!r} needs freq_hz > 0")
    return float(spec.freq_hz)


def obligation_groups(cls: TaskClass) -> list[tuple[str, tuple[ComponentSpec, ...]]]:
    """The class's obligation components grouped by model (model, specs in OBLIGATION order),
    in the order the models first appear."""
    groups: dict[str, list[ComponentSpec]] = {}
    for name in OBLIGATION:
        spec = cls.component(name)
        if spec is not None:
            groups.setdefault(spec.model, []).append(spec)
    return [(m, tuple(specs)) for m, specs in groups.items()]


def obligation_pair(cls: TaskClass, model: str, specs: tuple[ComponentSpec, ...]) -> Pair:
    """The isolated-packing pair of one class's obligation components on one model."""
    template = pooled_stream(cls.name, "", tuple(part_of(s, obligation_freq(s, cls.name)) for s in specs))
    return Pair(pooled_label(s.component for s in specs), cls.name, model, cls.robot_ids, template.rate_hz,
                template.slo_s, template.quantile, parts=template.parts)


def stream_components(stream: Stream, label: str) -> tuple[Part, ...]:
    """(component, own rate, own SLO) of each route a stream makes on a server labelled `label`."""
    if stream.parts:
        return stream.parts
    return (Part(label, stream.rate_hz, stream.slo_s, stream.quantile),)


def merged_label(a: str, b: str) -> str:
    return pooled_label(hosted_components(a) + hosted_components(b)) if is_obligation(a) else a
