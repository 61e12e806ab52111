"""Our pi0 engine against LeRobot's PI0 (lerobot 0.3.2, fp32) on identical random weights.

The fixture (test/fixtures/lerobot_pi0/, written by scripts/make_lerobot_fixture.py with live
lerobot) holds a tiny LeRobot checkpoint, three robots' inputs and noise, and LeRobot's chunks.
The last test reruns that script in the reference venv (.venv-lerobot) so the fixture is checked
against live lerobot on every CI run. See docs/lerobot_reference.md.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from physai_ros.engine import EngineInput, Pi0Engine
from physai_ros.engine.checkpoint.loader import normalization_stats

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "lerobot_reference"))
from reference_venvs import venv_python  # noqa: E402  (stdlib only)
FIXTURE = ROOT / "test" / "fixtures" / "lerobot_pi0"
TOL = 1e-4  # fp32
MANIFEST = json.loads((FIXTURE / "manifest.json").read_text())
NUM_ROBOTS = MANIFEST["num_robots"]


def load_cases(fixture: Path) -> dict:
    return load_file(str(fixture / "cases.safetensors"))


def robot_input(cases: dict, i: int) -> EngineInput:
    p = f"robot{i}."
    return EngineInput(images=cases[p + "images"], image_masks=cases[p + "image_masks"], tokens=cases[p + "tokens"],
                       token_mask=cases[p + "token_mask"], state=cases[p + "state"], noise=cases[p + "noise"])


def padded_robot_input(cases: dict, i: int) -> EngineInput:
    """Robot i exactly as it sits in the padded batch (extra masked views, padded prompt)."""
    b = "batch."
    return EngineInput(images=cases[b + "images"][i], image_masks=cases[b + "image_masks"][i],
                       tokens=cases[b + "tokens"][i], token_mask=cases[b + "token_mask"][i],
                       state=cases[b + "state"][i], noise=cases[b + "noise"][i])


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a.float() - b.float()).abs().max())


@pytest.fixture(scope="module")
def cases():
    return load_cases(FIXTURE)


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "fast"])
def engine(request):
    torch.manual_seed(0)
    return Pi0Engine.from_lerobot_checkpoint(FIXTURE / "checkpoint", fast=request.param)


def test_sizes_come_from_the_checkpoint_tensors(engine):
    s, c = MANIFEST["sizes"], engine.config
    got = {
        "vlm": (c.vlm.width, c.vlm.mlp_dim, c.vlm.depth, c.vlm.num_heads, c.vlm.num_kv_heads, c.vlm.head_dim),
        "expert": (c.expert.width, c.expert.mlp_dim, c.expert.depth, c.expert.num_heads, c.expert.num_kv_heads,
                   c.expert.head_dim),
        "vision": (c.vision.width, c.vision.mlp_dim, c.vision.depth, c.vision.num_heads, c.vision.patch_size,
                   c.vision.image_size),
        "dims": (c.vocab_size, c.chunk_size, c.max_state_dim, c.max_action_dim, c.num_steps),
    }
    want = {
        "vlm": (s["vlm_width"], s["vlm_mlp"], s["depth"], s["num_heads"], s["num_kv_heads"], s["head_dim"]),
        "expert": (s["expert_width"], s["expert_mlp"], s["depth"], s["num_heads"], s["num_kv_heads"], s["head_dim"]),
        "vision": (s["vision_width"], s["vision_mlp"], s["vision_depth"], s["vision_heads"], s["patch_size"],
                   s["image_size"]),
        "dims": (s["vocab_size"], MANIFEST["chunk_size"], MANIFEST["max_state_dim"], MANIFEST["max_action_dim"],
                 MANIFEST["num_steps"]),
    }
    assert got == want


@pytest.mark.parametrize("i", range(NUM_ROBOTS))
def test_each_robot_alone_matches_lerobot(engine, cases, i):
    out = engine.infer([robot_input(cases, i)])[0]
    assert max_err(out.actions, cases[f"robot{i}.expected_actions"]) <= TOL
    # Per-step updates (dt * v_t) are what the horizon policies read; LeRobot's are recorded too.
    assert max_err(out.updates, cases[f"robot{i}.expected_updates"]) <= TOL


def test_batch_with_different_prompts_and_views_matches_lerobot(engine, cases):
    outs = engine.infer([robot_input(cases, i) for i in range(NUM_ROBOTS)])
    got = torch.stack([o.actions for o in outs])
    assert max_err(got, cases["batch.expected_actions"]) <= TOL


def test_caller_side_padding_does_not_change_a_robots_chunk(engine, cases):
    # Masked camera slots and padded prompt tokens arrive from the caller, not from our collate.
    for i in range(NUM_ROBOTS):
        out = engine.infer([padded_robot_input(cases, i)])[0]
        assert max_err(out.actions, cases[f"robot{i}.expected_actions"]) <= TOL


def test_the_comparison_can_fail(engine, cases):
    """Control: a different prompt gives a chunk far outside the tolerance, so the checks above
    would notice a mistake in how prompt tokens reach the model."""
    wrong = robot_input(cases, 1)
    other = cases["robot2.tokens"]
    wrong.tokens, wrong.token_mask = other, torch.ones_like(other, dtype=torch.bool)
    out = engine.infer([wrong])[0]
    assert max_err(out.actions, cases["robot1.expected_actions"]) > 100 * TOL


def test_normalisation_stats_reproduce_lerobot_pre_and_post_processing(cases):
    lr_config = json.loads((FIXTURE / "checkpoint" / "config.json").read_text())
    features = [*lr_config["input_features"], *lr_config["output_features"]]
    stats = normalization_stats(FIXTURE / "checkpoint", feature_names=features)
    sdim, adim = MANIFEST["state_dim"], MANIFEST["action_dim"]
    s, a = stats["observation.state"], stats["action"]
    for i in range(NUM_ROBOTS):
        normed = (cases[f"robot{i}.state_raw"] - s["mean"]) / (s["std"] + 1e-8)  # LeRobot's Normalize eps
        assert max_err(normed, cases[f"robot{i}.state"][:sdim]) <= 1e-6
        assert max_err(cases[f"robot{i}.state"][sdim:], torch.zeros(MANIFEST["max_state_dim"] - sdim)) == 0
        unnormed = cases[f"robot{i}.expected_actions"][:, :adim] * a["std"] + a["mean"]
        assert max_err(unnormed, cases[f"robot{i}.expected_actions_unnormalized"]) <= 1e-6


def reference_python() -> Path:
    """The LeRobot 0.3.2 reference venv's python (reference_venvs.venv_python)."""
    return venv_python("0.3.2")


def run_fixture_script(out: Path, *args: str) -> None:
    """scripts/make_lerobot_fixture.py in the reference venv (live lerobot)."""
    py = reference_python()
    assert py.exists(), (
        f"LeRobot reference environment missing ({py}): create it with "
        "scripts/lerobot_reference/setup_venv.sh (see docs/lerobot_reference.md)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run([str(py), str(ROOT / "scripts" / "make_lerobot_fixture.py"), "--out", str(out), *args],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_live_lerobot_regenerates_the_committed_fixture(tmp_path):
    run_fixture_script(tmp_path, "--seed", str(MANIFEST["seed"]), "--preset", MANIFEST["preset"])
    fresh, committed = load_cases(tmp_path), load_cases(FIXTURE)
    assert sorted(fresh) == sorted(committed)
    # Same script, seed and library versions: the committed fixture is what lerobot computes now.
    for k in committed:
        assert max_err(fresh[k], committed[k]) <= 1e-5, k
    fresh_weights = load_file(str(tmp_path / "checkpoint" / "model.safetensors"))
    committed_weights = load_file(str(FIXTURE / "checkpoint" / "model.safetensors"))
    assert sorted(fresh_weights) == sorted(committed_weights)
    assert all(torch.equal(fresh_weights[k], committed_weights[k]) for k in committed_weights)


def test_live_lerobot_runs_weights_our_engine_wrote_with_grouped_kv_heads(tmp_path):
    """The other direction, and a head layout the committed fixture does not cover: our `tiny`
    preset (4 query heads over 2 KV heads) with our random weights, written in LeRobot's layout,
    loaded and sampled by live LeRobot, then LeRobot's save loaded back into our engine."""
    from physai_ros.engine import Pi0Config, load_lerobot_checkpoint, random_weights
    from physai_ros.engine.checkpoint.writer import save_lerobot_checkpoint

    config = Pi0Config.preset("tiny")
    weights = random_weights(config, seed=7)
    save_lerobot_checkpoint(tmp_path / "ours", config, lambda name, shape: weights[name])
    run_fixture_script(tmp_path / "lerobot", "--preset", "tiny", "--checkpoint", str(tmp_path / "ours"))
    cases = load_cases(tmp_path / "lerobot")
    # Head counts are not visible in fused projection shapes; the tiny preset's are given.
    loaded_config, loaded = load_lerobot_checkpoint(tmp_path / "lerobot" / "checkpoint",
                                                    head_dim=config.vlm.head_dim,
                                                    vision_heads=config.vision.num_heads)
    assert all(torch.equal(loaded[k], weights[k]) for k in weights)
    engine = Pi0Engine(loaded_config, loaded, fast=True)
    outs = engine.infer([robot_input(cases, i) for i in range(NUM_ROBOTS)])
    assert max_err(torch.stack([o.actions for o in outs]), cases["batch.expected_actions"]) <= TOL
