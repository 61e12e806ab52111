"""engine.processor.lerobot_steps: LeRobot 0.6.1's normalisation formulas (every mode, eps, the
zero-range substitution, no clamping) in numpy float32, and its processor files read as plain
data. The formulas are checked on hand-computed numbers, against LeRobot's expressions evaluated
by torch in float32, and live against LeRobot 0.6.1's own NormalizerProcessorStep (which also
writes the directory our reader then reads)."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from lerobot_layout import ACTION, CAMERA, STATE, dataset_stats, f32, write_v04

from physai_ros.engine.checkpoint.format import CheckpointError
from physai_ros.engine.processor import lerobot_steps as lp
from physai_ros.engine.processor.normalizer import Normalizer

REPO = Path(__file__).resolve().parents[3]
VENV06 = Path(os.environ.get("LEROBOT06_VENV", REPO / ".venv-lerobot06"))
EPS = np.float32(1e-8)


# ---- formulas on hand-checked numbers ----------------------------------------------------

def test_mean_std():
    s = {"mean": f32([0, 2, 1]), "std": f32([0.5, 4, 0])}
    # std + 1e-8 rounds to std in float32 (0.5, 4); a zero std divides by float32(1e-8).
    out = lp.normalize(f32([1, 4, 3]), lp.MEAN_STD, s)
    np.testing.assert_array_equal(out[:2], f32([2.0, 0.5]))
    assert out[2] == np.float32(2) / EPS and out.dtype == np.float32
    # LeRobot's inverse omits eps: x * std + mean.
    np.testing.assert_array_equal(lp.unnormalize(f32([2.0, 0.5, 7.0]), lp.MEAN_STD, s), f32([1, 4, 1]))


def test_min_max_substitutes_eps_only_for_a_zero_range():
    s = {"min": f32([0, -1, 2, 0]), "max": f32([1, 1, 2, 1e-7])}
    out = lp.normalize(f32([0.25, 0, 2, 1e-7]), lp.MIN_MAX, s)
    # 0.4+ has no eps in a non-zero range: the 1e-7 range maps its max to exactly 1 (0.3's
    # (x - min) / (max - min + 1e-8) would give 0.818).
    np.testing.assert_array_equal(out, f32([-0.5, 0.0, -1.0, 1.0]))
    assert lp.normalize(f32([3.0]), lp.MIN_MAX, {"min": f32([2]), "max": f32([2])})[0] == np.float32(2) / EPS - 1
    np.testing.assert_array_equal(lp.unnormalize(f32([-0.5, 0.0, -1.0, 1.0]), lp.MIN_MAX, s), f32([0.25, 0, 2, 1e-7]))
    assert lp.unnormalize(f32([1.0]), lp.MIN_MAX, {"min": f32([2]), "max": f32([2])})[0] == np.float32(2) + EPS


@pytest.mark.parametrize("mode, lo, hi", [(lp.QUANTILES, "q01", "q99"), (lp.QUANTILE10, "q10", "q90")])
def test_quantiles_read_their_own_pair_and_do_not_clamp(mode, lo, hi):
    s = {lo: f32([-1, 0, 0]), hi: f32([3, 0, 1]), "mean": f32([100, 100, 100])}
    out = lp.normalize(f32([2, 5, 4]), mode, s)
    assert out[0] == 0.5 and out[1] == np.float32(2.0) * 5 / EPS - 1
    assert out[2] == 7.0  # outside [-1, 1]: LeRobot does not clamp
    np.testing.assert_array_equal(lp.unnormalize(f32([0.5, -1.0, 7.0]), mode, s), f32([2, 0, 4]))


def test_identity_and_custom_eps():
    x = f32([1.5, -2])
    np.testing.assert_array_equal(lp.normalize(x, lp.IDENTITY, {}), x)
    np.testing.assert_array_equal(lp.unnormalize(x, lp.IDENTITY, {}), x)
    np.testing.assert_allclose(lp.normalize(f32([1.0]), lp.MEAN_STD, {"mean": f32([0]), "std": f32([0])}, eps=0.5), [2.0])


def _lerobot_expressions_in_torch(x, mode, s, eps, inverse):
    """normalize_processor.py _apply_transform's expressions, typed in float32 torch."""
    import torch

    t = torch.from_numpy(x)
    st = {k: torch.from_numpy(v) for k, v in s.items()}
    if mode == lp.MEAN_STD:
        return (t * st["std"] + st["mean"]) if inverse else (t - st["mean"]) / (st["std"] + eps)
    a, b = (st[k] for k in lp.STATS_OF_MODE[mode])
    d = torch.where(b - a == 0, torch.tensor(eps, dtype=t.dtype), b - a)
    if mode == lp.MIN_MAX:
        return ((t + 1) / 2 * d + a) if inverse else 2 * (t - a) / d - 1
    return ((t + 1.0) * d / 2.0 + a) if inverse else 2.0 * (t - a) / d - 1.0


@pytest.mark.parametrize("mode", [lp.MEAN_STD, lp.MIN_MAX, lp.QUANTILES, lp.QUANTILE10])
def test_bitwise_equal_to_lerobots_expressions_in_float32_torch(mode):
    stats = dataset_stats(7, 7, seed=3)[STATE]
    stats["max"][2] = stats["min"][2]  # one zero range
    x = np.random.default_rng(1).normal(0, 2, (64, 7)).astype(np.float32)
    for inverse, ours in ((False, lp.normalize), (True, lp.unnormalize)):
        ref = _lerobot_expressions_in_torch(x, mode, stats, 1e-8, inverse).numpy()
        np.testing.assert_array_equal(ours(x, mode, stats), ref)


# ---- reading processor files -------------------------------------------------------------

@pytest.mark.parametrize("policy, pre_index", [("pi0", 6), ("pi05", 3)])
def test_processor_files_read_as_plain_data(tmp_path, policy, pre_index):
    stats = dataset_stats(3, 2)
    d = write_v04(tmp_path / policy, policy=policy, stats=stats, eps=1e-6, rename_map={"observation.images.base": CAMERA})
    pre, post = lp.read_processors(d)
    step = pre.normalization
    assert step.index == pre_index and step.kind == lp.NORMALIZER and step.eps == 1e-6
    assert step.state_file.name == f"policy_preprocessor_step_{pre_index}_normalizer_processor.safetensors"
    assert step.features[STATE] == ("STATE", (3,)) and step.features[CAMERA] == ("VISUAL", (3, 224, 224))
    expected_mode = "QUANTILES" if policy == "pi05" else "MEAN_STD"
    assert step.mode_for(STATE) == expected_mode and step.mode_for(CAMERA) == lp.IDENTITY
    np.testing.assert_array_equal(step.stats[STATE]["q99"], stats[STATE]["q99"])
    assert step.stats[ACTION]["count"].dtype == np.float32  # every stat read as float32, as LeRobot loads them
    assert pre.rename_map == {"observation.images.base": CAMERA} and not pre.relative_actions
    assert post.normalization.kind == lp.UNNORMALIZER and post.normalization.index == 0
    assert list(post.normalization.features) == [ACTION]
    feats = lp.step_features(step)
    assert feats[STATE].mode == expected_mode and feats[STATE].dim == 3 and feats[CAMERA].dim is None
    assert set(feats[STATE].stats) == set(lp.STATS_OF_MODE[expected_mode])


def test_a_missing_state_file_is_named(tmp_path):
    d = write_v04(tmp_path / "ckpt")
    (d / "policy_postprocessor_step_0_unnormalizer_processor.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"policy_postprocessor\.json step 0 \(unnormalizer_processor\): its "
                                              r"state file policy_postprocessor_step_0_unnormalizer_processor"
                                              r"\.safetensors .* is missing"):
        lp.read_processors(d)


def test_unknown_steps_bad_modes_and_normalize_observation_keys(tmp_path):
    d = write_v04(tmp_path / "a")
    doc = json.loads((d / "policy_postprocessor.json").read_text())
    doc["steps"].insert(1, {"registry_name": "vla_jepa_clip_actions", "config": {}})
    (d / "policy_postprocessor.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="step 1 'vla_jepa_clip_actions' is not one this server reproduces"):
        lp.read_processors(d)
    d = write_v04(tmp_path / "b", norm_map={"STATE": "ZSCORE", "ACTION": "MEAN_STD"})
    with pytest.raises(CheckpointError, match=r"policy_preprocessor\.json step 6 \(normalizer_processor\): "
                                              r"norm_map\.STATE is 'ZSCORE'"):
        lp.read_processors(d)
    d = write_v04(tmp_path / "c", observation_keys=[CAMERA])  # LeRobot then leaves the state alone
    assert lp.read_processors(d)[0].normalization.mode_for(STATE) == lp.IDENTITY


def test_feature_checks_name_the_file_and_feature():
    src = "x/policy_preprocessor_step_6_normalizer_processor.safetensors"
    with pytest.raises(CheckpointError, match=rf"{src}: feature 'observation.state' \(STATE, QUANTILES\): "
                                              r"statistics q01 missing \(it has mean, q99\)"):
        lp.feature_normalization(STATE, "STATE", (3,), lp.QUANTILES, {"mean": f32([0] * 3), "q99": f32([1] * 3)},
                                 1e-8, src)
    with pytest.raises(CheckpointError, match="statistics cover 2 values but the feature declares 3"):
        lp.feature_normalization(STATE, "STATE", (3,), lp.MEAN_STD, {"mean": f32([0, 0]), "std": f32([1, 1])}, 1e-8, src)
    with pytest.raises(CheckpointError, match="statistic std is not set"):
        lp.feature_normalization(ACTION, "ACTION", (2,), lp.MEAN_STD, {"mean": f32([0, 0]), "std": f32([1, np.inf])},
                                 1e-8, src)
    ok = lp.feature_normalization(CAMERA, "VISUAL", (3, 8, 8), lp.IDENTITY, None, 1e-8, src)
    assert ok.stats == {} and ok.dim is None


# ---- live: LeRobot 0.6.1 itself ----------------------------------------------------------

def _case(mode: str, eps: float, seed: int) -> dict:
    stats = dataset_stats(6, 5, seed=seed)
    for feat in (STATE, ACTION):  # a zero range in every pair a mode may read
        for lo, hi in (("min", "max"), ("q01", "q99"), ("q10", "q90")):
            stats[feat][hi][1] = stats[feat][lo][1]
    rng = np.random.default_rng(seed)
    return {"mode": mode, "eps": eps, "state_dim": 6, "action_dim": 5, "rename_map": {"observation.joints": STATE},
            "stats": {f: {k: v.tolist() for k, v in s.items() if k != "count"} for f, s in stats.items() if f != CAMERA},
            "state": rng.normal(0, 2, (3, 6)).astype(np.float32).tolist(),
            "action": rng.normal(0, 1.5, (2, 4, 5)).astype(np.float32).tolist()}


def test_live_against_lerobot_061_normalizer_steps(tmp_path):
    """LeRobot 0.6.1 writes each mode's pipelines and runs its own (un)normaliser; our reader and
    formulas must give its float32 numbers (to one ulp; in practice bit for bit)."""
    py = VENV06 / "bin" / "python"
    if not (VENV06 / ".ready").is_file():
        pytest.skip(f"LeRobot 0.6.1 reference venv missing ({VENV06}): build it with "
                    "scripts/lerobot_reference/setup_venv06.sh (CI builds it; a skip here is a defect)")
    cases = [_case(m, eps, i) for i, (m, eps) in enumerate(
        [(lp.MEAN_STD, 1e-8), (lp.MIN_MAX, 1e-8), (lp.QUANTILES, 1e-8), (lp.QUANTILE10, 1e-8),
         (lp.IDENTITY, 1e-8), (lp.MIN_MAX, 1e-3), (lp.QUANTILES, 0.25)])]
    run = subprocess.run([str(py), str(Path(__file__).with_name("lerobot06_normalizer_run.py"))],
                         input=json.dumps({"out_dir": str(tmp_path), "cases": cases}), capture_output=True,
                         text=True, timeout=600, cwd=str(REPO))
    assert run.returncode == 0, run.stderr[-4000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])["cases"]
    for case, res in zip(cases, results):
        assert res["dtypes"] == ["torch.float32", "torch.float32"]
        pre, post = lp.read_processors(res["dir"])
        assert pre.rename_map == case["rename_map"] and pre.normalization.eps == case["eps"]
        n = Normalizer.from_lerobot_processors(res["dir"])
        state = f32(case["state"])
        ours = np.stack([n.normalized_state(s) for s in state])
        np.testing.assert_array_max_ulp(ours, f32(res["state_norm"]), maxulp=1)
        act = f32(case["action"])
        ours = np.stack([n.unnormalize_actions(a, 5) for a in act])
        np.testing.assert_array_max_ulp(ours, f32(res["action_unnorm"]), maxulp=1)
