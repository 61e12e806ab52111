"""The transformers vision-language backend on tiny random models written locally (hf_tiny), loaded
from their directories exactly as a user's downloaded checkpoint is: answers per query, greedy and
deterministic, batched answers token-for-token equal to one-by-one answers, max_tokens respected,
a bad query answered with an error while the others in its batch succeed, clear load errors."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("transformers")

from physai_ros.errors import UserInputError  # noqa: E402
from physai_ros.pipeline.backend import ComponentQuery  # noqa: E402
from physai_ros.pipeline.hf_tiny import write_tiny_vlm  # noqa: E402
from physai_ros.pipeline.hf_vlm import HFModelError, HFVisionLanguageBackend  # noqa: E402

# Qwen2.5-VL loads here through hf_processor's image-only path (no torchvision on this machine).
FAMILIES = ("smolvlm", "paligemma", "qwen2_5_vl")


@pytest.fixture(scope="module", params=FAMILIES)
def backend(request, tmp_path_factory):
    directory = write_tiny_vlm(request.param, tmp_path_factory.mktemp(request.param), seed=0)
    b = HFVisionLanguageBackend(directory, device="cpu")
    yield b
    b.close()


def _query(rng, views=1, h=48, w=40, max_tokens=8, question="Is the workcell safe? Answer safe or unsafe."):
    images = tuple(rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(views))
    return ComponentQuery(robot_id="r0", component="safety", question=question, task_prompt="pick the cube",
                          images=images, max_tokens=max_tokens)


def _batch(seed=0):
    """Three queries that differ in every way a batch must cope with: view count, image size,
    question length, max_tokens (so the rows are padded differently)."""
    rng = np.random.default_rng(seed)
    return [_query(rng),
            _query(rng, views=2, h=64, w=64, max_tokens=5, question="Is the task ongoing, done or failed?"),
            _query(rng, h=28, w=28, max_tokens=3, question="Next subgoal?")]


def _ids(answers):
    return [a.meta["token_ids"] for a in answers]


def test_answers_a_batch_deterministically(backend):
    queries = _batch()
    first = backend.answer(queries)
    assert [a.error for a in first] == ["", "", ""]
    assert all(a.ok and isinstance(a.text, str) and a.tokens > 0 and a.latency_ms > 0 for a in first)
    assert _ids(backend.answer(queries)) == _ids(first)
    # The answer depends on what the model sees (the wide tiny init): other images, other tokens.
    assert _ids(backend.answer(_batch(seed=1))) != _ids(first)


def test_batched_answers_equal_one_by_one(backend):
    queries = _batch()
    batched = backend.answer(queries)
    assert {a.meta["batch"] for a in batched} == {3}
    single = [backend.answer([q])[0] for q in queries]
    assert {a.meta["batch"] for a in single} == {1}
    assert _ids(batched) == _ids(single)  # exact token equality: greedy, float32
    assert [a.text for a in batched] == [a.text for a in single]


def test_max_tokens_respected(backend):
    rng = np.random.default_rng(3)
    for n in (1, 2, 6):
        (a,) = backend.answer([_query(rng, max_tokens=n)])
        assert a.ok and 1 <= a.tokens <= n and len(a.meta["token_ids"]) == a.tokens
    # A short limit is a prefix of a longer one (greedy), also inside one batch.
    q = _query(np.random.default_rng(4), max_tokens=6)
    short, long_ = backend.answer([replace(q, max_tokens=2), q])
    assert long_.meta["token_ids"][:short.tokens] == short.meta["token_ids"]


def test_bad_queries_get_error_answers_the_others_succeed(backend):
    good = _batch()
    alone = _ids(backend.answer([good[0], good[2]]))
    no_images = ComponentQuery("r1", "monitor", "done?", "t", images=())
    wrong_shape = ComponentQuery("r2", "safety", "safe?", "t", images=(np.zeros((16, 16), np.uint8),))
    wrong_dtype = ComponentQuery("r3", "safety", "safe?", "t", images=(np.zeros((16, 16, 3), np.float32),))
    answers = backend.answer([good[0], no_images, wrong_shape, wrong_dtype, good[2]])
    assert [a.ok for a in answers] == [True, False, False, False, True]
    assert "no images" in answers[1].error and "(16, 16)" in answers[2].error and "float32" in answers[3].error
    assert _ids([answers[0], answers[4]]) == alone


def test_a_failing_batch_falls_back_to_one_by_one(backend, monkeypatch):
    """A query that passes the checks but breaks inside the processor or model costs only itself."""
    queries = _batch()
    expected = _ids(backend.answer(queries))
    poisoned = "poison"
    real = backend._generate

    def generate(qs, images):
        if any(q.question == poisoned for q in qs):
            raise RuntimeError("boom inside generate")
        return real(qs, images)

    monkeypatch.setattr(backend, "_generate", generate)
    bad = replace(queries[1], question=poisoned)
    answers = backend.answer([queries[0], bad, queries[2]])
    assert [a.ok for a in answers] == [True, False, True]
    assert "boom inside generate" in answers[1].error
    assert [answers[0].meta["token_ids"], answers[2].meta["token_ids"]] == [expected[0], expected[2]]


def test_empty_batch(backend):
    assert backend.answer([]) == []


def test_missing_directory_is_a_clear_error(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(HFModelError, match="no-such-model") as e:
        HFVisionLanguageBackend(missing, device="cpu")
    assert isinstance(e.value, UserInputError) and str(missing) in str(e.value)


def test_not_a_vision_language_model_is_a_clear_error(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(HFModelError, match="no config.json"):
        HFVisionLanguageBackend(empty, device="cpu")
    text_only = tmp_path / "gpt2"
    text_only.mkdir()
    (text_only / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 1}))
    with pytest.raises(HFModelError, match=r"gpt2.*not a vision-language"):
        HFVisionLanguageBackend(text_only, device="cpu")


def test_bad_device_and_dtype(tmp_path):
    with pytest.raises(HFModelError, match="device 'tpu'"):
        HFVisionLanguageBackend(tmp_path, device="tpu")
    with pytest.raises(HFModelError, match="bfloat16.*CPU"):
        HFVisionLanguageBackend(write_tiny_vlm("paligemma", tmp_path / "p"), device="cpu", dtype="bfloat16")


def test_unknown_family():
    with pytest.raises(ValueError, match="unknown tiny VLM family 'llava'"):
        write_tiny_vlm("llava", "/nonexistent")


def test_qwen_processor_without_torchvision_is_image_only(tmp_path):
    """transformers cannot build a Qwen2.5-VL processor without torchvision (its video processor);
    the backend then loads it without one, under the real class name, images working."""
    from transformers.utils import is_torchvision_available

    b = HFVisionLanguageBackend(write_tiny_vlm("qwen2_5_vl", tmp_path / "q"), device="cpu")
    assert type(b.processor).__name__ == "Qwen2_5_VLProcessor"
    if not is_torchvision_available():
        assert b.processor.video_processor is None
    assert b.answer([_query(np.random.default_rng(0))])[0].ok


def test_importing_the_backend_modules_stays_cheap():
    """transformers and torch load when a backend is built, not when the modules are imported."""
    import subprocess
    import sys

    code = ("import sys, physai_ros.pipeline.hf_vlm, physai_ros.pipeline.hf_tiny; "
            "print(sorted(m for m in ('transformers', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
