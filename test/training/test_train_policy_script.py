"""scripts/train_policy.py end to end at toy scale: expert recording, the expert-only stage, one
recovery round driven by that stage's checkpoint, the final stage, and a manifest that says all
of it (including the recovery seeds, so bench/policy_eval.py keeps its episodes disjoint), with
the text co-training and its accuracy report."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from physai_ros.engine.processor.normalizer import STATS_FILE
from physai_lab.evaluation.sweep import training_seeds

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_policy.py"


def _script():
    spec = importlib.util.spec_from_file_location("train_policy_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_one_command_records_trains_and_runs_a_recovery_round(tmp_path):
    out = tmp_path / "ckpt"
    rc = _script().main(["--out", str(out), "--data", str(tmp_path / "expert"), "--rollout-data",
                         str(tmp_path / "recovery"), "--cells-per-task", "1", "--episodes-per-cell", "1",
                         "--workers", "1", "--steps", "3", "--first-minutes", "5", "--minutes", "5",
                         "--dagger-episodes", "reach=1", "--perturbed-episodes", "pick_and_place=1",
                         "--eval-episodes", "0", "--text-eval-data", str(tmp_path / "expert")])
    assert rc == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["final"] is True and [s["stage"] for s in m["stages"]] == ["expert demonstrations", "recovery round 1"]
    assert m["stages"][0]["frames"].keys() == {"expert"}
    assert m["stages"][1]["frames"].keys() == {"expert", "policy", "perturbed_expert"}
    (rnd,) = m["recovery_rounds"]
    assert rnd["driver_checkpoint"] == str(out) and rnd["recording"]["episodes"] == 2
    assert {310_000, 320_000} <= training_seeds(m)  # the episodes' seeds, so evaluation avoids them
    assert (out / STATS_FILE).is_file() and (out / "model.safetensors").is_file()
    # Text co-training is on by default and the manifest says how and how well.
    text = m["text"]
    assert text["co_trained"] and text["weight"] == 0.1 and text["loss"]["last"] > 0
    acc = text["accuracy_unseen_seeds"]
    assert acc["frames"] == m["data"]["frames"] and set(acc["subtask"]) == {"pick_and_place", "reach"}
    assert 0 <= acc["scene_token_accuracy_overall"] <= 1


def test_bad_episode_counts_are_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        _script().main(["--dagger-episodes", "pick=3"])
    assert "expected task=count" in capsys.readouterr().err


@pytest.mark.parametrize("value, message", [("monitor", "expected name=number"),
                                            ("monitr=1", "unknown components ['monitr']")])
def test_bad_answer_temper_is_refused_before_any_data_is_loaded(capsys, value, message):
    with pytest.raises(SystemExit):
        _script().main(["--component-answer-temper", value])
    assert message in capsys.readouterr().err
