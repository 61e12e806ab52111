#!/usr/bin/env python3
"""Write the LeRobot 0.6.1 fixture: a tiny random-weight PI05 checkpoint and a 0.6.1-format PI0
checkpoint (each with its pre/post processors, as a user downloads them), inputs with fixed noise,
and what LeRobot computes from them, model level and through the full pipeline.

    .venv-lerobot06/bin/python scripts/make_lerobot_pi05_fixture.py [--out DIR] [--seed N]

From any other python it re-executes itself in the 0.6.1 reference environment (LEROBOT06_PYTHON,
else LEROBOT06_VENV/bin/python, else .venv-lerobot06/bin/python; setup_venv06.sh builds it).
Output (default test/fixtures/lerobot_pi05/):
  tokenizer/            our byte-level BPE as a transformers tokenizer dir (BOS, right padding)
  pi05/, pi0_v06/       config.json, model.safetensors, policy_{pre,post}processor.json and the
                        (un)normalizer state .safetensors, written by lerobot's save_pretrained
  cases.safetensors     inputs and expected outputs; manifest.json "layout" names every key
  manifest.json         versions, sizes, formulas, tolerances, how each case was made, checks
Every expected output is computed by the checkpoint as loaded back from disk (from_pretrained +
make_pre_post_processors), after checking that it matches the policy that wrote it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REF_DIR = ROOT / "scripts" / "lerobot_reference"
sys.path.insert(0, str(REF_DIR))
from reference_venvs import venv_python  # noqa: E402  (stdlib only)
DEFAULT_OUT = ROOT / "test" / "fixtures" / "lerobot_pi05"
TOKENIZER_JSON = ROOT / "physai_ros" / "assets" / "tokenizer.json"


def reference_python() -> Path:
    """The LeRobot 0.6.1 reference venv's python (reference_venvs.venv_python)."""
    return venv_python("0.6.1")


def _reexec_in_reference_venv() -> None:
    try:
        from importlib.metadata import version

        if version("lerobot") == "0.6.1":
            return
    except Exception:  # noqa: BLE001 - not installed here
        pass
    py = reference_python()
    if not py.exists():
        sys.exit(f"lerobot 0.6.1 is not importable here and {py} does not exist: "
                 "run scripts/lerobot_reference/setup_venv06.sh first (or set LEROBOT06_PYTHON)")
    os.execv(str(py), [str(py), str(Path(__file__).resolve()), *sys.argv[1:]])


# Model-level cases: views present per slot (False = missing camera: image -1, mask False) and
# the prompt of each robot. Prompts are tokenised with the fixture tokenizer (BOS, no padding);
# a batch is right-padded with <pad> (id 0, mask False).
PI05_PROMPTS = (
    "Task: pick up the red cube, State: 12 200 128 7 255 0;\nAction: ",
    "Task: wipe the table, State: 128 128 64;\nAction: ",
    "Task: open the drawer and take out the cup, State: 0 1 2 3 250 -1;\nAction: ",
)
PI0_PROMPTS = ("pick up the red cube\n", "wipe the table with the sponge\n", "close the drawer\n")
MODEL_CASES = (
    ("one_view", [[True]], [0]),
    ("two_views", [[True, True]], [1]),
    ("missing_view", [[True, False]], [2]),
    # three robots, one prompt each (three lengths), robot 1's second camera missing
    ("batch3", [[True, True], [True, False], [True, True]], [0, 1, 2]),
)

# Full-pipeline cases: raw observations in robot units. Images are float [0, 1], CHW: 0.6.1's
# PI05/PI0 `_preprocess_images` only turns CHW back after resizing, an HWC image reaches SigLIP
# as [B, H, W, 3] and fails, so HWC is not something a 0.6.1 user can feed.
PIPELINE_CASES = {
    "pi05": (
        # cam0 48x64 (resized with padding to 56x56), cam1 already 56x56 (no resize, no clamp);
        # tasks exercise strip, "_" -> " ", "\n" -> " " and capitals.
        ("pipe", {"cam0": (48, 64), "cam1": (56, 56)},
         ["pick_up the red cube\n", "  wipe the table  ", "Open the drawer"]),
        # one robot, cam1 left out: an empty camera (-1, mask False) fills its slot
        ("pipe_one_camera", {"cam0": (48, 64)}, ["stack the green block on the yellow block"]),
    ),
    "pi0": (
        # three configured cameras, cam1 left out: present ones first (cam0, cam2), the empty one
        # last; cam2 40x60 (portrait: padded left and right); the second task already ends in \n
        ("pipe", {"cam0": (56, 56), "cam2": (60, 40)}, ["pick up the blue block", "fold the towel in half\n"]),
    ),
}


def make_stats(gen, state_dim: int, action_dim: int, cameras, degenerate_state: int, degenerate_action: int):
    """Dataset statistics as LeRobot stores them (mean, std, min, max, count, q01, q10, q50, q90,
    q99 per feature; images [3, 1, 1]), computed from a synthetic dataset so they are consistent.
    One state and one action dimension are constant (a joint that never moved): q01 == q99,
    min == max, std == 0, which LeRobot's eps handling must cover."""
    import torch

    def feature(dim: int, degenerate: int):
        scale = torch.rand(dim, generator=gen) * 2 + 0.2
        offset = torch.randn(dim, generator=gen) * 3
        x = torch.randn(2000, dim, generator=gen) * scale + offset
        x[:, degenerate] = offset[degenerate]
        x = x.double()
        q = torch.quantile(x, torch.tensor([0.01, 0.10, 0.50, 0.90, 0.99], dtype=torch.float64), dim=0)
        st = {"mean": x.mean(0), "std": x.std(0, unbiased=False), "min": x.min(0).values, "max": x.max(0).values,
              "q01": q[0], "q10": q[1], "q50": q[2], "q90": q[3], "q99": q[4]}
        st = {k: v.float() for k, v in st.items()}
        for k in st:  # exactly constant, whatever the float64 sums gave
            st[k][degenerate] = 0.0 if k == "std" else float(offset[degenerate])
        st["count"] = torch.tensor([x.shape[0]])
        return st

    stats = {"observation.state": feature(state_dim, degenerate_state),
             "action": feature(action_dim, degenerate_action)}
    for cam in cameras:  # present in real checkpoints; VISUAL is IDENTITY for pi0/pi05
        stats[f"observation.images.{cam}"] = {
            "mean": torch.rand(3, 1, 1, generator=gen) * 0.5 + 0.25, "std": torch.rand(3, 1, 1, generator=gen) * 0.2 + 0.1,
            "min": torch.zeros(3, 1, 1), "max": torch.ones(3, 1, 1), "count": torch.tensor([2000])}
    return stats


def raw_states(gen, stats, batch: int, mode: str):
    """Robot-unit states spread over and beyond the normalisation range, with exact edge values
    (q01 / q99 for QUANTILES: normalised exactly -1 / 1, bins 0 / 255) and the constant dim at its
    value (QUANTILES) or at the mean (MEAN_STD, so (x - mean) / (0 + eps) = 0)."""
    import torch

    s = stats["observation.state"]
    lo, hi = (s["q01"], s["q99"]) if mode == "QUANTILES" else (s["mean"] - 2 * s["std"], s["mean"] + 2 * s["std"])
    u = torch.rand(batch, lo.shape[0], generator=gen) * 1.4 - 0.2  # 20% beyond each side
    x = lo + u * (hi - lo)
    if mode == "QUANTILES":
        x[0, 0], x[0, 1] = s["q01"][0], s["q99"][1]
    const = int(torch.nonzero(s["std"] == 0)[0])
    x[:, const] = s["q01"][const] if mode == "QUANTILES" else s["mean"][const]
    return x


def tokenize(tokenizer, prompts):
    return [tokenizer(p)["input_ids"] for p in prompts]


def model_case_inputs(gen, spec, ids, views, prompt_idx):
    import torch

    b, v = len(views), len(views[0])
    s = spec.sizes.image_size
    images = torch.rand(b, v, 3, s, s, generator=gen) * 2 - 1
    masks = torch.tensor(views, dtype=torch.bool)
    images[~masks] = -1.0  # what LeRobot puts in a missing camera's slot
    length = max(len(ids[i]) for i in prompt_idx)
    tokens = torch.zeros(b, length, dtype=torch.int64)
    token_mask = torch.zeros(b, length, dtype=torch.bool)
    for r, i in enumerate(prompt_idx):
        tokens[r, : len(ids[i])] = torch.tensor(ids[i])
        token_mask[r, : len(ids[i])] = True
    out = {"images": images, "image_masks": masks, "tokens": tokens, "token_mask": token_mask,
           "noise": torch.randn(b, spec.chunk_size, spec.max_action_dim, generator=gen)}
    if spec.policy == "pi0":
        state = torch.zeros(b, spec.max_state_dim)
        state[:, : spec.state_dim] = torch.randn(b, spec.state_dim, generator=gen)
        out["state"] = state
    return out


def run_model_cases(policy, spec, ids, gen, prefix, tensors, checks, describe):
    import reference_pi05 as rp

    times = None
    for name, views, prompt_idx in MODEL_CASES:
        inp = model_case_inputs(gen, spec, ids, views, prompt_idx)
        out = rp.sample_model(policy, inp["images"], inp["image_masks"], inp["tokens"], inp["token_mask"],
                              inp["noise"], inp.get("state"))
        times = out.times
        for k, v in inp.items():
            tensors[f"{prefix}.{name}.{k}"] = v.contiguous()
        tensors[f"{prefix}.{name}.expected_actions"] = out.actions.contiguous()
        tensors[f"{prefix}.{name}.expected_updates"] = out.updates.contiguous()
        describe[f"{prefix}.{name}"] = {
            "views": views, "prompt_index": list(prompt_idx), "batch": len(views),
            "how": "PolicyModel.sample_actions(images per view, image masks per view, tokens, token_mask"
                   + (", state" if spec.policy == "pi0" else "") + ", noise=noise) on the loaded checkpoint",
        }
        if name == "batch3":
            alone = []
            for r in range(3):
                n = int(inp["token_mask"][r].sum())
                nv = int(inp["image_masks"][r].sum())  # missing cameras are the trailing slots here
                one = rp.sample_model(policy, inp["images"][r:r + 1, :nv], inp["image_masks"][r:r + 1, :nv],
                                      inp["tokens"][r:r + 1, :n], inp["token_mask"][r:r + 1, :n],
                                      inp["noise"][r:r + 1], inp["state"][r:r + 1] if "state" in inp else None)
                alone.append(float((one.actions[0] - out.actions[r]).abs().max()))
            checks[f"{prefix}.batch3_vs_alone_max_abs"] = max(alone)
            checks[f"{prefix}.batch3_robots_differ_min_max_abs"] = min(
                float((out.actions[i] - out.actions[j]).abs().max()) for i in range(3) for j in range(i + 1, 3))
            # 0.3.2's float32-accumulated schedule (t += dt) instead of 0.6.1's 1 + step*dt
            checks[f"{prefix}.batch3_accumulated_time_schedule_max_abs_diff"] = accumulate_schedule_diff(
                policy, inp, out.actions)
    return times


def accumulate_schedule_diff(policy, inp, actions):
    """Diagnostic: rerun the Euler loop with LeRobot 0.3.2's times (fp32 t += dt), everything else
    LeRobot 0.6.1's own denoise_step, to show how much the schedule alone moves the result."""
    import torch

    steps = policy.config.num_inference_steps
    dt = torch.tensor(-1.0 / steps, dtype=torch.float32)
    t = torch.tensor(1.0, dtype=torch.float32)
    times = []
    for _ in range(steps):
        times.append(t.clone())
        t = t + dt
    it = iter(times)
    model = policy.model
    original = type(model).denoise_step.__get__(model)

    def with_accumulated_time(*args, **kwargs):
        kwargs["timestep"] = next(it).expand(kwargs["timestep"].shape[0])
        return original(*args, **kwargs)

    model.denoise_step = with_accumulated_time
    try:
        views = inp["images"].shape[1]
        args = ([inp["images"][:, v] for v in range(views)], [inp["image_masks"][:, v] for v in range(views)],
                inp["tokens"], inp["token_mask"]) + ((inp["state"],) if "state" in inp else ())
        with torch.no_grad():
            alt = model.sample_actions(*args, noise=inp["noise"].clone())
    finally:
        del model.denoise_step
    return float((alt - actions).abs().max())


def run_pipeline_cases(policy, pre, post, spec, stats, gen, prefix, tensors, describe, norm_state_mode):
    import reference_pi05 as rp
    import torch

    for name, cams, tasks in PIPELINE_CASES[spec.policy]:
        b = len(tasks)
        obs = {"observation.state": raw_states(gen, stats, b, norm_state_mode)}
        for cam, (h, w) in cams.items():
            obs[f"observation.images.{cam}"] = torch.rand(b, 3, h, w, generator=gen)
        noise = torch.randn(b, spec.chunk_size, spec.max_action_dim, generator=gen)
        r = rp.run_pipeline(policy, pre, post, obs, tasks, noise)
        # What the model got as images: LeRobot's own _preprocess_images on the processed batch.
        batch = pre(dict(obs, task=list(tasks)))
        images, masks = policy._preprocess_images(batch)  # noqa: SLF001
        p = f"{prefix}.{name}."
        for k, v in obs.items():
            tensors[p + k] = v.contiguous()
        tensors[p + "noise"] = noise
        tensors[p + "expected_normalized_state"] = r.normalized_state.contiguous()
        tensors[p + "expected_tokens"] = r.tokens.contiguous()
        tensors[p + "expected_token_mask"] = r.token_mask.contiguous()
        tensors[p + "expected_model_images"] = torch.stack(images, 1).contiguous()
        tensors[p + "expected_model_image_masks"] = torch.stack(masks, 1).contiguous()
        tensors[p + "expected_model_actions"] = r.model_actions.contiguous()
        tensors[p + "expected_actions"] = r.actions.contiguous()
        entry = {
            "tasks": tasks, "prompts": r.prompts, "token_ids": r.token_ids,
            "cameras_given": {c: [3, h, w] for c, (h, w) in cams.items()},
            "camera_order_in_model": [k for k in policy.config.image_features if k in obs]
            + [k + " (missing: -1, mask False)" for k in policy.config.image_features if k not in obs],
            "how": "preprocessor(obs | {'task': tasks}) -> policy.predict_action_chunk(batch, noise=noise) "
                   "-> postprocessor; checkpoint loaded with from_pretrained + make_pre_post_processors",
        }
        if spec.policy == "pi05":
            entry["state_bins"] = [[int(x) for x in pr.split("State: ")[1].split(";")[0].split()] for pr in r.prompts]
        describe[f"{prefix}.{name}"] = entry


def compact_json(obj) -> str:
    """Indented JSON with every flat list of numbers / booleans on one line (token ids, bins)."""
    def one_line(m):
        return "[" + ", ".join(x.strip() for x in m.group(0)[1:-1].split(",") if x.strip()) + "]"
    return re.sub(r"\[[^\[\]{}\"]*\]", one_line, json.dumps(obj, indent=2)) + "\n"


def build_and_save(spec, seed, stats, tokenizer_dir, out_dir):
    import reference_pi05 as rp

    policy = rp.build_policy(spec, seed)
    pre, post = rp.make_processors(policy.config, stats, tokenizer_dir)
    rp.save_checkpoint(policy, pre, post, out_dir)
    return policy


def main(argv=None) -> int:
    _reexec_in_reference_venv()
    sys.path.insert(0, str(REF_DIR))
    import numpy
    import tokenizers
    import torch
    import transformers
    from safetensors.torch import save_file

    import lerobot06_compat as lc
    import reference_pi05 as rp

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)

    sizes = lc.Sizes()
    specs = {
        "pi05": rp.PolicySpec(policy="pi05", sizes=sizes, cameras=("cam0", "cam1")),
        "pi0_v06": rp.PolicySpec(policy="pi0", sizes=sizes, cameras=("cam0", "cam1", "cam2"),
                                 normalization={"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MIN_MAX"}),
    }
    tokenizer_dir = rp.write_tokenizer_dir(TOKENIZER_JSON, out / "tokenizer")
    lc.use_local_tokenizer(tokenizer_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    gen = torch.Generator().manual_seed(args.seed + 1)

    tensors, checks, describe, sub = {}, {}, {}, {}
    times = None
    for i, (name, spec) in enumerate(specs.items()):
        stats = make_stats(gen, spec.state_dim, spec.action_dim, spec.cameras, degenerate_state=spec.state_dim - 1,
                           degenerate_action=spec.action_dim - 1)
        built = build_and_save(spec, args.seed + i, stats, tokenizer_dir, out / name)
        policy, pre, post = rp.load_checkpoint(out / name, sizes, tokenizer_dir)
        # from_pretrained must give back the policy that was saved, tensor for tensor
        built_state = built.state_dict()
        checks[f"{name}.reloaded_equals_built"] = all(
            torch.equal(v, built_state[k]) for k, v in policy.state_dict().items())
        prompts = PI05_PROMPTS if spec.policy == "pi05" else PI0_PROMPTS
        ids = tokenize(tokenizer, prompts)
        times = run_model_cases(policy, spec, ids, gen, name, tensors, checks, describe)
        norm = {k.value if hasattr(k, "value") else str(k): v.value for k, v in policy.config.normalization_mapping.items()}
        run_pipeline_cases(policy, pre, post, spec, stats, gen, name, tensors, describe, norm["STATE"])
        sub[name] = {
            "policy_type": spec.policy, "dir": name, "seed": args.seed + i,
            "chunk_size": spec.chunk_size, "num_inference_steps": spec.num_steps,
            "state_dim": spec.state_dim, "action_dim": spec.action_dim,
            "max_state_dim": spec.max_state_dim, "max_action_dim": spec.max_action_dim,
            "cameras": [f"observation.images.{c}" for c in spec.cameras],
            "image_resolution": list(policy.config.image_resolution),
            "tokenizer_max_length": policy.config.tokenizer_max_length,
            "normalization_mapping": norm,
            "model_prompts": [{"prompt": p, "token_ids": t} for p, t in zip(prompts, ids)],
            "constant_dims": {"observation.state": spec.state_dim - 1, "action": spec.action_dim - 1},
        }
        if spec.policy == "pi05":
            checks["pi05.attention_implementations"] = {
                "vision_tower": policy.model.paligemma_with_expert.paligemma.model.vision_tower.config._attn_implementation,  # noqa: SLF001
                "language_model": policy.model.paligemma_with_expert.paligemma.model.language_model.config._attn_implementation,  # noqa: SLF001
                "expert": policy.model.paligemma_with_expert.gemma_expert.model.config._attn_implementation,  # noqa: SLF001
            }

    save_file(tensors, str(out / "cases.safetensors"))
    files = sorted(p for p in out.rglob("*") if p.is_file())
    size = {str(p.relative_to(out)): p.stat().st_size for p in files if p.name != "manifest.json"}
    manifest = {
        "what": "LeRobot 0.6.1 PI05 and PI0 (tiny, random weights, fp32) reference fixture for physai_ros.engine",
        "command": "scripts/lerobot_reference/setup_venv06.sh && .venv-lerobot06/bin/python "
                   f"scripts/make_lerobot_pi05_fixture.py --seed {args.seed}",
        "live_reference": "scripts/lerobot_reference/reference_pi05.py {sample|pipeline} (see its docstring)",
        "versions": {"lerobot": lc.lerobot_version(), "transformers": transformers.__version__,
                     "torch": torch.__version__, "tokenizers": tokenizers.__version__, "numpy": numpy.__version__,
                     "python": platform.python_version()},
        "patches": ["installed lerobot: PEP 695 syntax rewritten for Python 3.11 (patch_pep695.py)",
                    "run time (lerobot06_compat.py): torchvision op schemas declared; the PaliGemma tokenizer "
                    "name resolves to tokenizer/; tower sizes and vocabulary replaced (Sizes below)"],
        "seed": args.seed,
        "sizes": sizes.as_dict(),
        "sizes_note": "config.json still says paligemma_variant gemma_2b / action_expert_variant gemma_300m: "
                      "the sizes are only in the tensor shapes and here. Not readable from shapes: num_kv_heads "
                      "(1: head_dim = k_proj rows, num_heads = q_proj rows / head_dim) and SigLIP heads (16).",
        "checkpoints": sub,
        "tokenizer": {
            "dir": "tokenizer", "source": "physai_ros/assets/tokenizer.json (byte-level BPE, add_prefix_space)",
            "bos_id": tokenizer.bos_token_id, "pad_id": tokenizer.pad_token_id, "eos_id": tokenizer.eos_token_id,
            "bos": "prepended to every prompt (TemplateProcessing post-processor); no EOS",
            "padding": "right, to tokenizer_max_length (padding='max_length', truncation=True), pad id 0, mask False",
            "lowercasing": "none (LeRobot does not lowercase)",
        },
        "formulas": {
            "euler": "dt = -1/num_steps (python float); for step in range(num_steps): t = 1.0 + step*dt (python "
                     "double), timestep = float32(t); x = x + dt * v(x, timestep)",
            "euler_times_float32": times,
            "rope": "transformers GemmaRotaryEmbedding: inv_freq = 1 / (10000 ** (arange(0, head_dim, 2).float() / "
                    "head_dim)) (fp32); angle = inv_freq * position (fp32); emb = cat(angle, angle); "
                    "x*cos + rotate_half(x)*sin, rotate_half(x) = cat(-x2, x1)",
            "positions": "prefix: cumsum(pad_mask) - 1; suffix: sum(prefix_pad_mask) + cumsum(suffix_pad) - 1",
            "time_embedding": "fraction = linspace(0, 1, width/2) float64; period = 4e-3 * (4.0/4e-3)**fraction; "
                              "arg = (2*pi/period) * t (float64); emb = cat(sin, cos) -> float32",
            "pi05_adarms_cond": "c = silu(time_mlp_out(silu(time_mlp_in(time_emb)))), one c for every expert layer "
                                "and the expert's final norm",
            "pi05_adarms": "scale, shift, gate = chunk(dense(c), 3); y = x*rsqrt(mean(x^2)+1e-6) * (1+scale) + shift; "
                           "residual x + gate*sublayer(y); final norm: same y, gate unused",
            "attention_mask": "additive: 0 where allowed, -2.3819763e38 elsewhere (OPENPI_ATTENTION_MASK_VALUE), "
                              "scores*head_dim**-0.5 + mask, softmax fp32",
            "normalization": {
                "MEAN_STD": "(x - mean) / (std + 1e-8); inverse x * std + mean (no eps)",
                "MIN_MAX": "2 * (x - min) / d - 1, d = max - min, d := 1e-8 where d == 0; inverse (x + 1) / 2 * d + min",
                "QUANTILES": "2 * (x - q01) / d - 1, d = q99 - q01, d := 1e-8 where d == 0; inverse (x + 1) * d / 2 + q01",
                "IDENTITY": "images (VISUAL)",
            },
            "pi05_state_bins": "np.digitize(normalised_state, np.linspace(-1, 1, 257)[:-1]) - 1 (float32 state vs "
                               "float64 edges): -1 below -1, 255 from 0.9921875 up; only state_dim values (no padding)",
            "pi05_prompt": "f'Task: {task.strip().replace(\"_\", \" \").replace(\"\\n\", \" \")}, State: {bins};\\nAction: '",
            "pi0_prompt": "task + '\\n' unless it already ends with '\\n' (no other cleaning)",
            "image_preprocessing": "float [0,1] CHW; if H,W != resolution: bilinear resize (align_corners=False, no "
                                   "antialias) by ratio max(W/w, H/h) to int(H/ratio), int(W/ratio), clamp [0,1], pad "
                                   "with 0 centred (extra pixel bottom/right); then x*2-1. Missing cameras after present "
                                   "ones: -1 image, mask False",
        },
        "tolerances": {
            "model_actions_atol": 1e-4, "pipeline_model_actions_atol": 1e-4,
            "pipeline_robot_actions_atol": "1e-4 * the action range (q99-q01 or max-min) of the dimension",
            "normalized_state_rtol": 1e-6, "tokens": "exact", "state_bins": "exact",
            "model_images_atol": 1e-6,
        },
        "layout": {
            "<ckpt>.<case>.images": "float32 [B, V, 3, S, S] in [-1, 1]; missing camera -1 with mask False",
            "<ckpt>.<case>.image_masks": "bool [B, V]",
            "<ckpt>.<case>.tokens / token_mask": "int64 / bool [B, L]: right-padded with 0 / False",
            "<ckpt>.<case>.state": "pi0 only: float32 [B, max_state_dim], normalised, zero padded",
            "<ckpt>.<case>.noise": "float32 [B, chunk, max_action_dim]",
            "<ckpt>.<case>.expected_actions": "model cases: float32 [B, chunk, max_action_dim] (normalised space); "
                                              "pipeline cases: float32 [B, chunk, action_dim] in robot units",
            "<ckpt>.<case>.expected_updates": "float32 [steps, B, chunk, max_action_dim]: dt * v_t per Euler step",
            "<ckpt>.pipe*.observation.state": "float32 [B, state_dim], robot units (raw)",
            "<ckpt>.pipe*.observation.images.<cam>": "float32 [B, 3, H, W] in [0, 1] (raw)",
            "<ckpt>.pipe*.expected_normalized_state": "float32 [B, state_dim] after the normalizer",
            "<ckpt>.pipe*.expected_tokens / expected_token_mask": "int64 / bool [B, tokenizer_max_length]",
            "<ckpt>.pipe*.expected_model_images / _image_masks": "float32 [B, V, 3, S, S] / bool [B, V]: "
                                                                 "what _preprocess_images gave the model",
            "<ckpt>.pipe*.expected_model_actions": "float32 [B, chunk, action_dim]: predict_action_chunk (normalised)",
        },
        "cases": describe,
        "checks": checks,
        "bytes": size,
    }
    (out / "manifest.json").write_text(compact_json(manifest))
    print(json.dumps({"out": str(out), "bytes_total": sum(size.values()), **{k: v for k, v in checks.items()
                                                                            if not isinstance(v, dict)}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
