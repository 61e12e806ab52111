"""The README stays a ten-minute read, the prose names no issue numbers, and every relative link in
the README and docs/ reaches a file (and, within a page, a heading) that exists."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README_MAX_BYTES = 12 * 1024
# Another project's tracker may be cited ("transformers issue #48558"); ours never is.
UPSTREAM = ("transformers", "fast-dds", "fastdds", "rclpy", "lerobot", "openpi", "triton", "torch", "ros2")


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / p for p in out.stdout.split()]


def test_readme_is_short():
    size = len((REPO / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move detail into docs/ (limit {README_MAX_BYTES})"


def test_no_issue_numbers_in_the_prose():
    pattern = re.compile(r"(\S+\s+)?\bissues?\s+#?\d+", re.IGNORECASE)
    found = []
    for path in _tracked("*.md", "*.py", "*.yaml", "*.txt"):
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for m in pattern.finditer(line):
                before = re.sub(r"[^\w-]", "", m.group(1) or "").lower()
                if before not in UPSTREAM and "github.com" not in line:
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()[:120]}")
    assert not found, "\n".join(found)


def _anchors(md: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in md.read_text().splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            out.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text)))
    return out


def test_relative_links_resolve():
    broken = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
