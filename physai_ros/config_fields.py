"""fleet.yaml validation helpers: each names the key path and what it expects, so a typo fails
at start-up in one line (physai_ros.config.fleet, .server_config and physai_ros.pipeline.config use
them; physai_ros.config_fields re-exports them)."""
from __future__ import annotations

import math
import sys
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from physai_ros.errors import UserInputError


class FleetConfigError(ValueError, UserInputError):
    """A fleet.yaml problem; the message starts with the offending key path."""


def required(d: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in d:
        raise FleetConfigError(f"{path}.{key}: missing (required)" if path else f"{key}: missing (required)")
    return d[key]


def join_key(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def mapping(v: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise FleetConfigError(f"{path}: expected a mapping, got {type(v).__name__}")
    return v


def string(v: Any, path: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(v, str) or not v:
        raise FleetConfigError(f"{path}: expected a non-empty string, got {v!r}")
    if choices is not None and v not in choices:
        raise FleetConfigError(f"{path}: expected one of {list(choices)}, got {v!r}")
    return v


def integer(v: Any, path: str, lo: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise FleetConfigError(f"{path}: expected an integer >= {lo}, got {v!r}")
    return v


def boolean(v: Any, path: str) -> bool:
    if not isinstance(v, bool):
        raise FleetConfigError(f"{path}: expected true or false, got {v!r}")
    return v


def number(v: Any, path: str, allow_zero: bool = False) -> float:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or v < 0 or (v == 0 and not allow_zero):
        what = "a finite number >= 0" if allow_zero else "a finite number > 0"
        raise FleetConfigError(f"{path}: expected {what}, got {v!r}")
    return float(v)


def strings(v: Any, path: str, lo: int, hi: int | None = None) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise FleetConfigError(f"{path}: expected a list of non-empty strings, got {v!r}")
    if len(v) < lo or (hi is not None and len(v) > hi):
        rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise FleetConfigError(f"{path}: expected {rng} entries, got {len(v)}")
    if len(set(v)) != len(v):
        raise FleetConfigError(f"{path}: entries must be unique, got {v!r}")
    return tuple(v)


# Lists that no_unknown appends (path, allowed keys, "file:line" of its caller) to while
# recording_allowed_keys() is active: how scripts/fleet_yaml_reference.py reads the keys each
# parser accepts from the parsers themselves.
_key_recorders: list[list[tuple[str, frozenset[str], str]]] = []


@contextmanager
def recording_allowed_keys() -> Iterator[list[tuple[str, frozenset[str], str]]]:
    got: list[tuple[str, frozenset[str], str]] = []
    _key_recorders.append(got)
    try:
        yield got
    finally:
        _key_recorders.remove(got)


def no_unknown(d: Mapping[str, Any], allowed: set[str], path: str) -> None:
    if _key_recorders:
        caller = sys._getframe(1)
        for got in _key_recorders:
            got.append((path, frozenset(allowed), f"{caller.f_code.co_filename}:{caller.f_lineno}"))
    extra = sorted(set(d) - allowed)
    if extra:
        raise FleetConfigError(
            f"{join_key(path, extra[0])}: unknown key (expected one of {sorted(allowed)})")
