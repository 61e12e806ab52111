"""fleet.yaml's `factory:` block (config.factory): config/fleet_factory.yaml turns into
ROSA's problem (Table 1's P2 and P4), and each kind of mistake is named by its key path."""
import copy
import json

import pytest
import yaml

from physai_ros.config.factory import check_profiles, factory_problem, load_profiles
from physai_ros.config.fleet import FleetConfigError, load_fleet, parse_fleet
from physai_ros.install_paths import resolve_package_url
from physai_ros.scheduler.factory.types import ModelProfile, ProfilePoint

FACTORY_FILE = "package://physai_ros/config/fleet_factory.yaml"


@pytest.fixture(scope="module")
def doc():
    return yaml.safe_load(resolve_package_url(FACTORY_FILE).read_text())


def _mut(doc, fn):
    d = copy.deepcopy(doc)
    fn(d)
    return d


def test_factory_file_is_rosa_mix2_of_p2_and_p4():
    cfg = load_fleet(resolve_package_url(FACTORY_FILE))
    problem = factory_problem(cfg)
    assert (problem.servers.num_servers, problem.servers.hardware, problem.servers.standby) == (8, "H100", 1)
    by = {c.name: c for c in problem.classes}
    p2, p4 = by["pick_place_simple"], by["assemble_kit"]
    assert p2.num_robots == p4.num_robots == 16
    # The listed robot of each task keeps its id; the planned ones beyond it are <task>_<k>.
    assert p2.robot_ids[:2] == ("robot_0", "pick_place_simple_1") and p4.robot_ids[-1] == "assemble_kit_15"
    assert len(set(p2.robot_ids + p4.robot_ids)) == 32
    # ROSA Table 1: S1 200 ms; S2 1 per 10 S1 / 2000 ms; safety 2 Hz / 500 ms; monitor 0.5 Hz / 2000 ms; t_act 200 ms.
    assert [c.component for c in p2.components] == ["system1", "monitor"]
    assert [c.component for c in p4.components] == ["system1", "system2", "safety", "monitor"]
    s1, s2, safe, mon = p4.components
    assert (s1.slo_s, s2.slo_s, safe.slo_s, safe.freq_hz, mon.slo_s, mon.freq_hz) == (0.2, 2.0, 0.5, 2.0, 2.0, 0.5)
    assert (p4.action_period_s, p4.system2_ratio, p2.system2_ratio) == (0.2, 10, 1)
    assert (s1.model, s2.model, safe.model) == ("gr00t-n1.6-3b~pi0", "qwen2.5-vl-7b:plan", "qwen2.5-vl-3b:safety")


def test_a_file_without_the_block_has_none_and_cannot_be_planned():
    cfg = load_fleet()
    assert cfg.factory is None
    with pytest.raises(FleetConfigError, match="no factory: block"):
        factory_problem(cfg)


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["factory"].update(gpus=8), r"factory\.gpus: unknown key"),
    (lambda d: d["factory"].pop("servers"), r"factory\.servers"),
    (lambda d: d["factory"].update(servers=0), r"factory\.servers"),
    (lambda d: d["factory"]["robots"].update(pick_place=4), r"factory\.robots\.pick_place: no such task"),
    (lambda d: d["factory"]["models"].update(system3="x"), r"factory\.models\.system3"),
    (lambda d: d["factory"].update(slo_quantile=1.0), r"factory\.slo_quantile"),
    (lambda d: d["factory"].update(reschedule="always"), r"factory\.reschedule: expected one of \['apply', 'propose'\]"),
    (lambda d: d["factory"].update(profile_drift=0), r"factory\.profile_drift"),
    (lambda d: d["factory"].update(queues="mine"), r"factory\.queues: expected one of \['per_instance', 'shared'\]"),
    (lambda d: d["factory"]["value_weights"].update(assemble_kit=-1), r"factory\.value_weights\.assemble_kit"),
])
def test_mistakes_in_the_block_name_their_key(doc, edit, match):
    with pytest.raises(FleetConfigError, match=match):
        parse_fleet(_mut(doc, edit))


def test_planning_needs_t_act_and_a_profile_model_for_the_vla(doc):
    cfg = parse_fleet(_mut(doc, lambda d: d["tasks"]["assemble_kit"]["pipeline"].pop("action_period_ms")))
    with pytest.raises(FleetConfigError, match=r"tasks\.assemble_kit\.pipeline\.action_period_ms"):
        factory_problem(cfg)
    cfg = parse_fleet(_mut(doc, lambda d: d["factory"]["models"].pop("safety")))
    with pytest.raises(FleetConfigError, match=r"factory\.models\.safety: required to plan tasks\.assemble_kit"):
        factory_problem(cfg)
    # A task planned with 0 robots drops out of the problem.
    cfg = parse_fleet(_mut(doc, lambda d: d["factory"]["robots"].update(assemble_kit=0)))
    assert [c.name for c in factory_problem(cfg).classes] == ["pick_place_simple"]


def test_profiles_file_round_trip_and_its_mistakes(tmp_path, doc):
    prof = ModelProfile("pi0", "H100", "static", (ProfilePoint(1, 10.0, 0.05, 0.06), ProfilePoint(1, 20.0, 0.07, 0.1)),
                        source="roofline")
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"profiles": [prof.to_dict()]}))
    loaded = load_profiles(path)
    assert loaded == {("pi0", "H100"): prof}
    problem = factory_problem(parse_fleet(doc))
    with pytest.raises(FleetConfigError, match=r"no profile for gr00t-n1\.6-3b~pi0@H100, qwen2\.5-vl-3b:safety@H100, "
                                               r"qwen2\.5-vl-7b:monitor@H100, qwen2\.5-vl-7b:plan@H100 "
                                               r"\(the file has pi0@H100\)"):
        check_profiles(problem, loaded)
    with pytest.raises(FleetConfigError, match="no such file"):
        load_profiles(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text(json.dumps({"profiles": [{"model": "x"}]}))
    with pytest.raises(FleetConfigError, match=r"profiles\[0\]: not a ModelProfile"):
        load_profiles(tmp_path / "bad.json")
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(FleetConfigError, match="not a readable JSON file"):
        load_profiles(tmp_path / "junk.json")


def test_profile_latency_interpolates_between_rates_and_saturates_past_the_curve():
    prof = ModelProfile("pi0", "H100", "static", (ProfilePoint(2, 10.0, 0.05, 0.06), ProfilePoint(2, 30.0, 0.07, 0.1)))
    assert prof.latency(2, 5.0) == 0.06  # below the lowest measured rate: that point
    assert prof.latency(2, 20.0) == pytest.approx(0.08)
    assert prof.latency(2, 20.0, "mean") == pytest.approx(0.06)
    assert prof.latency(2, 31.0) == float("inf")  # past the measured maximum: saturated, never extrapolated
    assert prof.latency(4, 1.0) == float("inf")  # an unprofiled batch size
