"""Run in the LeRobot 0.6.1 reference venv (.venv-lerobot06) by test_lerobot_processors.py: for
each case on stdin, LeRobot builds its pre/post processor pipelines (rename, batch, normalizer /
unnormalizer, device), saves them with save_pretrained, loads them back with from_pretrained, and
normalises the state / un-normalises the action with the loaded steps. Prints JSON: per case the
directory it wrote and LeRobot's float32 results."""
import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts" / "lerobot_reference"))
importlib.import_module("lerobot06_compat")  # torchvision shim, offline hub: before lerobot

import numpy as np  # noqa: E402
import torch  # noqa: E402
from lerobot.configs import FeatureType, NormalizationMode, PolicyFeature  # noqa: E402
from lerobot.lerobot_types import TransitionKey  # noqa: E402
from lerobot.processor import (AddBatchDimensionProcessorStep, DeviceProcessorStep,  # noqa: E402
                               NormalizerProcessorStep, PolicyProcessorPipeline, RenameObservationsProcessorStep,
                               UnnormalizerProcessorStep)
from lerobot.processor.converters import create_transition  # noqa: E402


def run_case(case: dict, out: Path) -> dict:
    mode = NormalizationMode(case["mode"])
    norm_map = {FeatureType.VISUAL: NormalizationMode.IDENTITY, FeatureType.STATE: mode, FeatureType.ACTION: mode}
    state = PolicyFeature(type=FeatureType.STATE, shape=(case["state_dim"],))
    action = PolicyFeature(type=FeatureType.ACTION, shape=(case["action_dim"],))
    stats = {feat: {k: np.asarray(v, np.float32) for k, v in s.items()} for feat, s in case["stats"].items()}
    pre = PolicyProcessorPipeline(steps=[
        RenameObservationsProcessorStep(rename_map=case["rename_map"]), AddBatchDimensionProcessorStep(),
        NormalizerProcessorStep(features={"observation.state": state, "action": action}, norm_map=norm_map,
                                stats=stats, eps=case["eps"])], name="policy_preprocessor")
    post = PolicyProcessorPipeline(steps=[
        UnnormalizerProcessorStep(features={"action": action}, norm_map=norm_map, stats=stats, eps=case["eps"]),
        DeviceProcessorStep(device="cpu")], name="policy_postprocessor")
    out.mkdir(parents=True, exist_ok=True)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    # What a user's LeRobot runs: the steps as loaded from the files just written.
    pre = PolicyProcessorPipeline.from_pretrained(out, config_filename="policy_preprocessor.json")
    post = PolicyProcessorPipeline.from_pretrained(out, config_filename="policy_postprocessor.json")
    normalizer = next(s for s in pre.steps if isinstance(s, NormalizerProcessorStep))
    unnormalizer = next(s for s in post.steps if isinstance(s, UnnormalizerProcessorStep))
    obs = {"observation.state": torch.tensor(case["state"], dtype=torch.float32)}
    normed = normalizer(create_transition(observation=obs))[TransitionKey.OBSERVATION]["observation.state"]
    act = torch.tensor(case["action"], dtype=torch.float32)
    unnormed = unnormalizer(create_transition(action=act))[TransitionKey.ACTION]
    return {"dir": str(out), "state_norm": normed.numpy().tolist(), "action_unnorm": unnormed.numpy().tolist(),
            "dtypes": [str(normed.dtype), str(unnormed.dtype)]}


def main() -> None:
    doc = json.load(sys.stdin)
    root = Path(doc["out_dir"])
    results = [run_case(c, root / f"case_{i}_{c['mode'].lower()}") for i, c in enumerate(doc["cases"])]
    print(json.dumps({"cases": results}))


if __name__ == "__main__":
    main()
