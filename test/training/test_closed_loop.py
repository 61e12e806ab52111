"""The trainer's in-process closed-loop check runs with its defaults: the package's tokenizer is
found from wherever the lab is installed (train_policy.py's end-of-run check relies on it), and
an episode is driven through the serving logic and reported."""
from pathlib import Path

from physai_lab.training.closed_loop import evaluate_checkpoint

SIM_PI0 = Path(__file__).resolve().parents[2] / "physai_ros" / "assets" / "policy" / "sim_pi0"


def test_evaluate_checkpoint_runs_with_the_default_tokenizer():
    report = evaluate_checkpoint(SIM_PI0, episodes=1, tasks=("reach",))
    reach = report["tasks"]["reach"]
    assert reach["prompt"] == "move the gripper to the red marker" and reach["episodes"] == 1
    (run,) = reach["runs"]
    assert run["rounds"] >= 1 and run["errors"] == 0 and run["seconds"] > 0
