"""docs/fleet_yaml_reference.md is what scripts/fleet_yaml_reference.py makes from the parsers
(so a key cannot be added, renamed or removed without the reference following), and every
example fleet file in docs/examples loads."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from physai_ros.config.fleet import load_fleet

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("fleet_yaml_reference", REPO / "scripts" / "fleet_yaml_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_committed_reference_is_the_generated_one():
    assert _script().main(["--check"]) == 0, "run .venv/bin/python scripts/fleet_yaml_reference.py"


def test_the_reference_lists_keys_the_parsers_accept_and_no_others():
    text = (REPO / "docs" / "fleet_yaml_reference.md").read_text()
    for key in ("`max_observation_age_s`", "`remote_engines`", "`chunk_merge`", "`max_burst`", "`feature`",
                "`slo_startup_grace_s`", "`sros2_enclaves`"):
        assert key in text, key
    assert "`hieght`" not in text


@pytest.mark.parametrize("path", sorted((REPO / "docs" / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_fleet_file_loads(path):
    assert load_fleet(path).robots


def test_general_paths_fold_user_chosen_names():
    mod = _script()
    assert mod.general_path("robots[2].cameras[0]") == "robots[].cameras[]"
    assert mod.general_path("tasks.pick_place.chunk_merge") == "tasks.<task>.chunk_merge"
    assert mod.general_path("gateway.openpi.robots.arm_1") == "gateway.openpi.robots.<robot id>"
