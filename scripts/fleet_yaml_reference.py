#!/usr/bin/env python3
"""Write docs/fleet_yaml_reference.md: every fleet.yaml key, read from the parsers themselves.

The shipped fleet files (config/*.yaml with a `server:` section, docs/examples/*.yaml) are loaded
while physai_ros.config_fields records, at each `no_unknown` call, the section's path and the keys
its parser accepts. Each key gets the example value and the comments the shipped files give it.
A parser whose section no shipped file uses is an error (add it to docs/examples/more_sections.yaml),
so a key cannot be added without reaching the reference. test/docs keeps the file equal to this
output.

    .venv/bin/python scripts/fleet_yaml_reference.py [--check]
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "fleet_yaml_reference.md"
# Map keys chosen by the user (task names, gateway robot ids): one row for all of them.
_DYNAMIC = {"tasks": "<task>", "robots": "<robot id>"}


def fleet_files() -> list[Path]:
    shipped = [p for p in sorted((REPO / "config").glob("*.yaml")) if "server" in (yaml.safe_load(p.read_text()) or {})]
    return shipped + sorted((REPO / "docs" / "examples").glob("*.yaml"))


def general_path(path: str) -> str:
    """robots[2].cameras[0] -> robots[].cameras[]; tasks.pick_place -> tasks.<task>."""
    parts = re.sub(r"\[\d+\]", "[]", path).split(".") if path else []
    out = []
    for i, part in enumerate(parts):
        prev = parts[i - 1] if i else ""
        out.append(_DYNAMIC.get(prev, part))
    return ".".join(out)


def parser_sites() -> set[str]:
    """Every `no_unknown(...)` call in the package, as 'relative/file.py:line'."""
    sites = set()
    for f in (REPO / "physai_ros").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "no_unknown":
                sites.add(f"{f.relative_to(REPO)}:{node.lineno}")
    return sites


def yaml_comments(path: Path) -> dict[str, list[str]]:
    """General key path -> comment text on the key's line, its aligned continuation lines, and
    the comment block right above it (commented-out keys left out)."""
    out: dict[str, list[str]] = {}
    stack: list[tuple[int, str]] = []  # (indent, key)
    above: list[str] = []
    last: tuple[str, int] | None = None  # (path, comment column) for continuation lines
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            col = line.index("#")
            text = stripped.lstrip("#").strip()
            indented = stripped[1:].startswith("  ")  # "#   ...": continues the line above
            if last is not None and (col == last[1] or indented):
                if last[0] is not None:
                    out[last[0]].append(text)
            elif indented:
                pass  # continues a comment that was dropped
            elif re.match(r"^[A-Za-z_][\w]*:\s", text + " "):
                # A commented-out key: it, the block above it and its continuation lines describe
                # that key, not the next one.
                above = []
                inner = line.find(" #", col + 1)
                last = (None, inner + 1) if inner >= 0 else None
            else:
                above.append(text)
            continue
        m = re.match(r"^(\s*)(- )?([A-Za-z_][\w]*):(.*)$", line)
        if not m:
            above, last = [], None
            continue
        dash = len(m.group(1))
        col = dash + (2 if m.group(2) else 0)
        while stack and stack[-1][0] >= col:
            stack.pop()
        if m.group(2):  # a new list item: one list level at the dash's column
            while stack and stack[-1][0] >= dash:
                stack.pop()
            stack.append((dash, "[]"))
        names: list[str] = []
        for _, name in stack:
            if name == "[]" and names:
                names[-1] += "[]"
            elif name != "[]":
                names.append(name)
        key_path = general_path(".".join(names + [m.group(3)]))
        stack.append((col, m.group(3)))
        rest = m.group(4)
        comment = rest.split(" #", 1)[1].strip() if " #" in rest else ""
        texts = out.setdefault(key_path, [])
        for t in above + ([comment] if comment else []):
            if t and t not in texts:
                texts.append(t)
        above = []
        last = (key_path, line.index(" #") + 1) if comment else None
    return out


def field_comments(module_file: Path) -> list[dict[str, str]]:
    """Each dataclass of a module: field name -> its comment (the lines right above the field and
    the one on its line). The parsers' modules describe their keys there."""
    src = module_file.read_text().splitlines()
    classes = []
    for node in ast.walk(ast.parse("\n".join(src))):
        if not (isinstance(node, ast.ClassDef) and any("dataclass" in ast.unparse(d) for d in node.decorator_list)):
            continue
        fields = {}
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                texts = []
                k = stmt.lineno - 2
                while k >= 0 and src[k].strip().startswith("#") and not src[k].strip()[1:].startswith("  "):
                    texts.insert(0, src[k].strip().lstrip("#").strip())
                    k -= 1
                own = src[stmt.lineno - 1]
                if "  #" in own:
                    texts.append(own.split("  #", 1)[1].strip())
                k = stmt.end_lineno
                while k < len(src) and src[k].strip().startswith("#") and "  #" in own \
                        and (src[k].index("#") == own.index("  #") + 2 or src[k].strip()[1:].startswith("  ")):
                    texts.append(src[k].strip().lstrip("#").strip())
                    k += 1
                fields[stmt.target.id] = " ".join(t for t in texts if t)
        classes.append(fields)
    return classes


def example_values(doc, prefix: str = "", out: dict | None = None) -> dict[str, str]:
    """General key path -> the first scalar (or short flow) value seen for it."""
    out = {} if out is None else out
    if isinstance(doc, dict):
        for k, v in doc.items():
            p = general_path(f"{prefix}.{k}" if prefix else str(k))
            if not isinstance(v, (dict, list)) or (isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v)):
                out.setdefault(p, yaml.safe_dump(v, default_flow_style=True, width=1000).strip().removesuffix("\n..."))
            example_values(v, p, out)
    elif isinstance(doc, list):
        for x in doc:
            example_values(x, f"{prefix}[]", out)
    return out


def collect():
    from physai_ros.config.fleet import load_fleet
    from physai_ros.config_fields import recording_allowed_keys

    sections: dict[str, set[str]] = {}
    where: dict[str, set[str]] = {}
    hit: set[str] = set()
    comments: dict[str, list[str]] = {}
    examples: dict[str, str] = {}
    code_notes: dict[str, str] = {}
    files = fleet_files()
    for f in files:
        with recording_allowed_keys() as got:
            load_fleet(f)
        for path, allowed, site in got:
            file, line = site.rsplit(":", 1)
            rel = f"{Path(file).resolve().relative_to(REPO)}:{line}"
            hit.add(rel)
            g = general_path(path)
            sections.setdefault(g, set()).update(allowed)
            where.setdefault(g, set()).add(rel)
        for k, v in yaml_comments(f).items():
            texts = comments.setdefault(k, [])
            texts.extend(t for t in v if t not in texts)
        example_values(yaml.safe_load(f.read_text()), "", examples)
    for g, sites in where.items():  # the dataclass each section's parser fills: its field comments
        for site in sites:
            candidates = field_comments(REPO / site.split(":")[0])
            best = max(candidates, key=lambda c: len(set(c) & sections[g]), default={})
            for key, text in best.items():
                if key in sections[g] and text:
                    code_notes.setdefault(f"{g}.{key}" if g else key, text)
    missing = sorted(parser_sites() - hit)
    if missing:
        raise SystemExit("fleet_yaml_reference: no shipped fleet file reaches these parsers; add their "
                         "section to docs/examples/more_sections.yaml: " + ", ".join(missing))
    for k, text in code_notes.items():
        comments.setdefault(k, []).insert(0, text)
    return files, sections, where, comments, examples


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    from physai_ros.monitoring.config import _KEYS as MONITORING_KEYS

    files, sections, where, comments, examples = collect()
    sections.setdefault("monitoring", set()).update(MONITORING_KEYS)
    where.setdefault("monitoring", set()).add("physai_ros/monitoring/config.py")
    lines = [
        "# fleet.yaml reference",
        "",
        "<!-- Generated by scripts/fleet_yaml_reference.py from the parsers; do not edit. -->",
        "Every key fleet.yaml accepts, section by section, as the parsers in physai_ros/config (and",
        "physai_ros/pipeline/config.py, physai_ros/monitoring/config.py) check them: a key not listed",
        "here is refused at load with its path. Examples and notes come from the shipped fleet files: "
        + ", ".join(f"`{f.relative_to(REPO)}`" for f in files) + ".",
        "`<task>` and `<robot id>` stand for names you choose. A key without an example is used by no",
        "shipped file: its parser (linked) says what it takes.",
        "",
    ]
    for path in sorted(sections, key=lambda p: (p != "", p.split(".")[0] != "server", p)):
        title = path or "(top level)"
        sites = ", ".join(f"[{s}](../{s.split(':')[0]})" for s in sorted(where[path]))
        lines += [f"## `{title}`", "", f"Checked in {sites}.", "", "| key | example | notes |", "|---|---|---|"]
        for key in sorted(sections[path]):
            full = f"{path}.{key}" if path else key
            sub = " (section below)" if any(p == full or p.startswith(full + "[]") for p in sections) else ""
            note = " ".join(comments.get(full, []))
            lines.append(f"| `{key}`{sub} | {_cell('`' + examples[full] + '`') if full in examples else ''} "
                         f"| {_cell(note)} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed file differs")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if OUT.read_text() != text:
            print(f"{OUT.relative_to(REPO)} is out of date: run scripts/fleet_yaml_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
