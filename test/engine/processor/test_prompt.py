"""The prompt text as each checkpoint's preprocessor writes it, and pi0.5's state in the prompt."""
import numpy as np
import pytest
import torch

from physai_ros.engine import Pi0Config
from physai_ros.engine.processor.normalizer import Normalizer
from physai_ros.engine.processor.prompt import PromptStyle, discretize_state, pi05_prompt, prompt_style_for
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.serving.action_runner import ActionModelRunner

TOKENIZER = "physai_ros/assets/tokenizer.json"


def test_state_bins_hand_checked_including_out_of_range():
    # 256 bins of width 2/256 over [-1, 1): -1 -> 0, -1 + 1/256 (mid first bin) -> 0, 0 -> 128,
    # 0.999 -> 255, 1.0 -> 255; below -1 -> -1 (np.digitize's 0, minus 1), as LeRobot PI05 does.
    got = discretize_state(np.array([-1.0, -1 + 1 / 256, 0.0, 0.999, 1.0, 3.0, -1.5]))
    assert got.tolist() == [0, 0, 128, 255, 255, 255, -1]


def test_pi05_prompt_format():
    text = pi05_prompt("  pick_up the\ncube ", np.array([-1.0, 0.0, 0.5]))
    assert text == "Task: pick up the cube, State: 0 128 192;\nAction: "


def test_styles():
    assert PromptStyle("lerobot_pi0").text("wipe") == "wipe\n"
    assert PromptStyle("lerobot_pi0").text("wipe\n") == "wipe\n"
    assert PromptStyle("ours").text("Wipe") == "Wipe"
    with pytest.raises(ValueError, match="normalised state"):
        PromptStyle("lerobot_pi05").text("wipe")
    with pytest.raises(ValueError, match="prompt style"):
        PromptStyle("pi7")


def test_style_follows_the_checkpoint():
    from physai_ros.engine.checkpoint.format import LEROBOT_03, LEROBOT_04, PHYSAI

    assert prompt_style_for("pi05").name == "lerobot_pi05"
    assert prompt_style_for("pi05", LEROBOT_04).name == "lerobot_pi05"
    assert prompt_style_for("pi0").name == "ours"
    assert prompt_style_for("pi0", LEROBOT_03).name == "lerobot_pi0"
    assert prompt_style_for("pi0", LEROBOT_04).name == "lerobot_pi0"
    assert prompt_style_for("pi0", PHYSAI).name == "ours"


def test_verbatim_tokenizer_keeps_case_and_newline():
    ours = PromptTokenizer(TOKENIZER, 64)
    verbatim = PromptTokenizer(TOKENIZER, 64, verbatim=True)
    assert np.array_equal(ours.encode("Pick Up").tokens, ours.encode("pick up").tokens)
    assert not np.array_equal(verbatim.encode("Pick Up").tokens, verbatim.encode("pick up").tokens)
    a, b = verbatim.encode("go\n"), verbatim.encode("go")
    assert a.mask.sum() == b.mask.sum() + 1
    assert verbatim.encode("go").tokens[0] == verbatim.bos_id  # no post-processor here: BOS added


def test_pi05_runner_writes_the_normalised_state_into_the_prompt_per_observation():
    from physai_ros.engine.processor.normalizer import FeatureStats

    cfg = Pi0Config.preset("tiny", policy="pi05", max_tokens=64)
    tok = PromptTokenizer(TOKENIZER, 64, verbatim=True)
    norm = Normalizer(state=FeatureStats("MIN_MAX", min=np.zeros(2, np.float32), max=np.full(2, 2.0, np.float32)))
    runner = ActionModelRunner(cfg, tok, norm)
    assert runner.prompt_style.name == "lerobot_pi05"
    # robot state [0, 2] in robot units -> normalised [-1, 1] -> bins [0, 255]
    enc = runner.tokens("reach", np.array([0.0, 2.0], np.float32))
    expect = tok.encode("Task: reach, State: 0 255;\nAction: ", cache=False)
    assert np.array_equal(enc.tokens, expect.tokens)
    other = runner.tokens("reach", np.array([1.0, 1.0], np.float32))
    assert not np.array_equal(other.tokens, enc.tokens)
    assert len(tok._cache) == 0  # per-observation prompts never fill the cache
    short = ActionModelRunner(cfg, PromptTokenizer(TOKENIZER, 12, verbatim=True), norm)
    with pytest.raises(ValueError, match="max_token_len"):
        short.tokens("reach", np.array([0.0, 2.0], np.float32))
    with pytest.raises(ValueError, match="state in its prompt"):
        ActionModelRunner(cfg, tok, norm, PromptStyle("ours"))
    assert torch.is_tensor(runner.blank_input().tokens)
