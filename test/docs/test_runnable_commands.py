"""Every command block the guides mark `<!-- runnable -->` runs as written from the repository root
(the reader's fresh clone after `make setup`), and exits 0. The guides keep such blocks at tiny
size (the example fleet's tiny checkpoint, short durations)."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARK = "<!-- runnable -->"
BLOCK = re.compile(re.escape(MARK) + r"\s*\n```(?:bash|sh)?\n(.*?)```", re.S)


def runnable_blocks() -> list[tuple[str, str]]:
    out = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = page.read_text()
        blocks = BLOCK.findall(text)
        assert len(blocks) == text.count(MARK), f"{page.name}: a {MARK} mark not followed by a fenced block"
        out += [(f"{page.relative_to(REPO)}#{i}", b) for i, b in enumerate(blocks)]
    return out


def test_the_guides_mark_commands_to_run():
    pages = {name.split("#")[0] for name, _ in BLOCKS}
    assert {"docs/integrator.md", "docs/operator.md", "docs/developer.md"} <= pages, pages


BLOCKS = runnable_blocks()


@pytest.mark.parametrize("name,block", BLOCKS, ids=[n for n, _ in BLOCKS])
def test_runnable_block_runs_as_written(name, block):
    (REPO / "out").mkdir(exist_ok=True)
    done = subprocess.run(["bash", "-e", "-c", block], cwd=REPO, capture_output=True, text=True,
                          timeout=900, env=dict(os.environ), start_new_session=True)
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{block}\n--- output\n" \
                                 f"{(done.stdout + done.stderr)[-4000:]}"
