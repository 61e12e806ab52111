"""`physai-fleet plan` (fleet/plan_cli): the schedule for config/fleet_factory.yaml's cluster with
the shipped GPU-scale profiles, its overrides, and each way it says no (exit 1: no feasible
schedule, with the reason; exit 2: a bad command line or file, named)."""
import json
import subprocess
import sys

import pytest

from physai_ros.fleet.cli import main

FACTORY = "package://physai_ros/config/fleet_factory.yaml"


def _fleet():
    from physai_ros.install_paths import resolve_package_url

    return str(resolve_package_url(FACTORY))


def test_plan_prints_placement_routing_rates_and_throughput(capsys, tmp_path):
    out_json = tmp_path / "s.json"
    assert main(["plan", "--fleet", _fleet(), "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "factory plan: 8 x H100 serving + 1 standby" in out and "(roofline)" in out
    for part in ("task classes:", "servers:", "hot standbys", "routing (robots per server):",
                 "predicted SLO attainment:", "factory throughput:"):
        assert part in out, part
    doc = json.loads(out_json.read_text())
    assert doc["feasible"] and set(doc["action_rate_hz"]) == {"pick_place_simple", "assemble_kit"}
    # Every planned robot has a System 1 route; assemble_kit robots also System 2, safety and monitor.
    routes = {(r["robot_id"], r["component"]) for r in doc["routes"]}
    assert ("assemble_kit_15", "safety") in routes and ("pick_place_simple_15", "system1") in routes
    assert ("pick_place_simple_15", "safety") not in routes
    serving = [a for a in doc["assignments"] if a["standby_for"] is None]
    assert len(serving) <= 8 and sum(a["standby_for"] is not None for a in doc["assignments"]) == 1
    # The throughput printed is the schedule's: sum over classes of K_c f_c.
    assert doc["factory_throughput"] == pytest.approx(16 * sum(doc["action_rate_hz"].values()), rel=1e-6)


def test_overrides_change_the_plan_and_too_few_servers_is_a_reason_not_a_crash(capsys):
    assert main(["plan", "--fleet", _fleet(), "--json", "-", "--robots", "assemble_kit=4"]) == 0
    small = json.loads(capsys.readouterr().out)
    assert sum(r["component"] == "system1" and r["robot_id"].startswith(("assemble_kit", "robot_1"))
               for r in small["routes"]) == 4
    assert main(["plan", "--fleet", _fleet(), "--servers", "2", "--standby", "0"]) == 1
    out = capsys.readouterr().out
    assert "NO FEASIBLE SCHEDULE:" in out


@pytest.mark.parametrize("argv, match", [
    (["--robots", "assemble=4"], "--robots assemble: no such task"),
    (["--profiles", "/nonexistent/p.json"], "no such file"),
])
def test_bad_input_is_named_with_exit_2(capsys, argv, match):
    assert main(["plan", "--fleet", _fleet(), *argv]) == 2
    assert match in capsys.readouterr().err


def test_a_fleet_without_a_factory_block_says_so(capsys):
    from physai_ros.install_paths import default_fleet_file

    assert main(["plan", "--fleet", str(default_fleet_file())]) == 2
    assert "no factory: block to plan" in capsys.readouterr().err


def test_plan_from_another_directory_through_the_module_entry_point(tmp_path):
    """As a user runs it: the embedded factory file by default, from any working directory."""
    r = subprocess.run([sys.executable, "-m", "physai_ros.fleet", "plan"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "factory throughput:" in r.stdout
