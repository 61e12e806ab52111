"""training.compare_policies: two checkpoints on the same evaluation episodes, paired by seed."""
from __future__ import annotations

import json
import shutil

import pytest

from physai_ros.config.fleet import default_fleet_path
from physai_lab.evaluation.sweep import eval_seeds
from physai_lab.training.compare_policies import compare

SHIPPED = default_fleet_path().parents[1] / "physai_ros" / "assets" / "policy" / "sim_pi0"


def test_a_checkpoint_against_itself_agrees_episode_by_episode():
    doc = compare(SHIPPED, SHIPPED, [("reach", "")], episodes=2, slots=2, jobs=1, log=lambda m: None)
    (row,) = doc["rows"]
    assert row["old"]["successes"] == row["new"]["successes"]
    p = row["paired"]
    assert p["only_old"] == p["only_new"] == 0 and p["both"] + p["neither"] == 2


def test_evaluation_seeds_used_in_training_are_refused(tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(SHIPPED, ckpt)
    m = json.loads((ckpt / "manifest.json").read_text())
    m["interface"]["extra_seed_range"] = [eval_seeds("reach", 1)[0], eval_seeds("reach", 1)[0] + 1]
    (ckpt / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ValueError, match="overlap"):
        compare(SHIPPED, ckpt, [("reach", "")], episodes=2, slots=2, jobs=1)
