"""The package stays readable in pieces: no module over 400 lines, no node module over ~250 (a
node adapts logic that lives below it; the extension modules it mounts count on their own), no
package folder over ~20 modules. A module that grows past these is split where its jobs part,
not trimmed to pass."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TREES = [REPO / "physai_ros", REPO / "kernels", REPO / "lab" / "physai_lab"]
MAX_MODULE_LINES = 400
MAX_NODE_LINES = 250
MAX_MODULES_PER_FOLDER = 20


def _modules():
    for tree in TREES:
        yield from (p for p in sorted(tree.rglob("*.py")) if "__pycache__" not in p.parts)


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_module_over_400_lines():
    big = [f"{p.relative_to(REPO)}: {_lines(p)}" for p in _modules() if _lines(p) > MAX_MODULE_LINES]
    assert not big, "modules over 400 lines:\n" + "\n".join(big)


def test_node_modules_stay_adapters():
    big = [f"{p.relative_to(REPO)}: {_lines(p)}" for p in sorted((REPO / "physai_ros" / "nodes").glob("*.py"))
           if _lines(p) > MAX_NODE_LINES]
    assert not big, "node modules over 250 lines:\n" + "\n".join(big)


def test_no_folder_over_20_modules():
    folders = {p.parent for p in _modules()}
    crowded = [f"{f.relative_to(REPO)}: {n}" for f in sorted(folders)
               if (n := sum(1 for m in f.glob("*.py") if m.name != "__init__.py")) > MAX_MODULES_PER_FOLDER]
    assert not crowded, "folders over 20 modules:\n" + "\n".join(crowded)


def test_the_sizes_are_read():
    assert sum(1 for _ in _modules()) > 150
    assert _lines(REPO / "physai_ros" / "serving" / "serving_core.py") > 100
