#!/usr/bin/env python3
"""Rewrite lerobot 0.6.1's Python 3.12-only syntax so the package imports on Python 3.11.

    .venv-lerobot06/bin/python scripts/lerobot_reference/patch_pep695.py [--package-dir DIR]

lerobot 0.6.1 declares Python >= 3.12, but the only 3.12-only constructs in it are PEP 695 type
parameter lists (`class C[T]`, `def f[T: B]`) and `type X = ...` aliases, in the five files below.
Each rewrite here has the same runtime meaning on 3.11: the class becomes `Generic[...]` over a
module-level TypeVar, the alias a plain assignment (evaluated eagerly, which is fine because every
name it uses is defined above it).

The edits are exact text replacements and fail loudly when a pattern is missing, so a different
wheel is noticed instead of half-patched. Idempotent: an already-rewritten file is left alone.
After patching, every .py file of the package must compile with this interpreter; any other
3.12-only syntax would show up there.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

EXPECTED_VERSION = "0.6.1"


@dataclass(frozen=True)
class Rewrite:
    path: str  # relative to the lerobot package directory
    old: str
    new: str


REWRITES = (
    # The processor pipeline: what every policy's pre/post processor is built on.
    Rewrite("processor/pipeline.py",
            "from typing import Any, TypedDict, TypeVar, cast\n",
            "from typing import Any, Generic, TypedDict, TypeVar, cast\n"),
    Rewrite("processor/pipeline.py",
            "class DataProcessorPipeline[TInput, TOutput](HubMixin):\n",
            # TInput / TOutput are already module-level TypeVars in this file.
            "class DataProcessorPipeline(HubMixin, Generic[TInput, TOutput]):\n"),
    Rewrite("utils/io_utils.py",
            "def deserialize_json_into_object[T: JsonLike](fpath: Path, obj: T) -> T:\n",
            "_JsonT = TypeVar(\"_JsonT\", bound=JsonLike)\n\n\n"
            "def deserialize_json_into_object(fpath: Path, obj: _JsonT) -> _JsonT:\n"),
    Rewrite("utils/io_utils.py", "from typing import Any\n", "from typing import Any, TypeVar\n"),
    Rewrite("datasets/streaming_dataset.py", "from typing import Literal\n",
            "from typing import Generic, Literal, TypeVar\n"),
    # T is not otherwise used at module level in this file; the methods' annotations say T.
    Rewrite("datasets/streaming_dataset.py", "class Backtrackable[T]:\n",
            "T = TypeVar(\"T\")\n\n\nclass Backtrackable(Generic[T]):\n"),
    Rewrite("datasets/aggregate.py", "type FeatureDict = dict[str, dict[str, Any]]\n",
            "FeatureDict = dict[str, dict[str, Any]]\n"),
    Rewrite("datasets/aggregate.py", "type ChunkFile = tuple[int, int]\n", "ChunkFile = tuple[int, int]\n"),
    Rewrite("datasets/aggregate.py", "type VideoIndexState = dict[str, VideoIndex]\n",
            "VideoIndexState = dict[str, VideoIndex]\n"),
    Rewrite("motors/motors_bus.py", "type NameOrID = str | int\ntype Value = int | float\n",
            "NameOrID = str | int\nValue = int | float\n"),
)

def find_package_dir() -> Path:
    # find_spec on a top-level package locates it without executing its __init__.
    spec = importlib.util.find_spec("lerobot")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("patch_pep695: lerobot is not installed in this interpreter")
    return Path(list(spec.submodule_search_locations)[0])


def read_version(pkg: Path) -> str:
    """The version in the dist-info beside the package (lerobot's own __version__ asks the same
    metadata through importlib, which a bare --package-dir copy would not have)."""
    for meta in sorted(pkg.parent.glob("lerobot-*.dist-info/METADATA")):
        for line in meta.read_text(encoding="utf-8").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def apply(pkg: Path, rewrites) -> list[str]:
    """All rewrites or none: every pattern is checked before any file is written."""
    texts: dict[Path, str] = {}
    done = []
    for rw in rewrites:
        f = pkg / rw.path
        text = texts.get(f) or f.read_text(encoding="utf-8")
        n = text.count(rw.old)
        if n == 1:
            texts[f] = text.replace(rw.old, rw.new)
            done.append(f"{rw.path}: {rw.old.strip()[:60]!r}")
        elif n == 0 and rw.new in text:
            continue  # applied by an earlier run
        else:
            raise SystemExit(f"patch_pep695: {f}: expected exactly one {rw.old.strip()!r}, found {n}; "
                             "the lerobot wheel is not the one this patcher was written for")
    for f, text in texts.items():
        f.write_text(text, encoding="utf-8")
    return done


def uncompilable(pkg: Path) -> list[str]:
    bad = []
    for f in sorted(pkg.rglob("*.py")):
        try:
            compile(f.read_text(encoding="utf-8"), str(f), "exec")
        except SyntaxError as e:
            bad.append(f"{f.relative_to(pkg)}:{e.lineno}: {e.msg}")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package-dir", type=Path, default=None, help="the installed lerobot/ directory")
    args = ap.parse_args(argv)
    pkg = args.package_dir or find_package_dir()
    version = read_version(pkg)
    if version != EXPECTED_VERSION:
        sys.exit(f"patch_pep695: {pkg} is lerobot {version}, this patcher is for {EXPECTED_VERSION}")
    done = apply(pkg, REWRITES)
    bad = uncompilable(pkg)
    if bad:
        sys.exit("patch_pep695: still not valid Python %s syntax:\n  %s"
                 % (".".join(map(str, sys.version_info[:2])), "\n  ".join(bad)))
    print(f"patch_pep695: lerobot {version} at {pkg}: {len(done)} rewrites applied"
          + ("" if done else " (already patched)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
