"""The text a policy reads: the task prompt as the checkpoint's own preprocessor writes it (and,
through `PromptStyle.verbatim`, whose frame resizing the server follows).

Three styles, chosen from the checkpoint (never by a flag):
- "ours": physai_ros-trained checkpoints: the task as given (the tokenizer lowercases it, as
  training did);
- "lerobot_pi0": LeRobot >= 0.4 PI0 (its Pi0NewLineProcessor): the task with a trailing newline;
- "lerobot_pi05": LeRobot PI05 (its Pi05PrepareStateTokenizerProcessorStep, after openpi's
  PaligemmaTokenizer): the *normalised* state discretised into 256 bins over [-1, 1] and written
  into the prompt: "Task: <task, '_' and newlines as spaces, stripped>, State: <bins>;\\nAction: ".
  The bins are np.digitize against linspace(-1, 1, 257)[:-1], minus 1, exactly: a value below
  -1 becomes bin -1 and one at or above 1 bin 255 (what the model saw in training).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STYLES = ("ours", "lerobot_pi0", "lerobot_pi05")
STATE_BINS = 256
_BIN_EDGES = np.linspace(-1, 1, STATE_BINS + 1)[:-1]


def discretize_state(normalized_state: np.ndarray) -> np.ndarray:
    """int64 bin per state value, as LeRobot PI05 computes it (float64 edges)."""
    return np.digitize(np.asarray(normalized_state), bins=_BIN_EDGES) - 1


def pi05_prompt(task: str, normalized_state: np.ndarray) -> str:
    cleaned = task.strip().replace("_", " ").replace("\n", " ")
    bins = " ".join(str(int(b)) for b in discretize_state(normalized_state))
    return f"Task: {cleaned}, State: {bins};\nAction: "


@dataclass(frozen=True)
class PromptStyle:
    name: str = "ours"

    def __post_init__(self):
        if self.name not in STYLES:
            raise ValueError(f"prompt style {self.name!r}: expected one of {', '.join(STYLES)}")

    @property
    def reads_state(self) -> bool:
        """The prompt changes with every observation (not cacheable per task)."""
        return self.name == "lerobot_pi05"

    @property
    def verbatim(self) -> bool:
        """A LeRobot checkpoint's preprocessing: its tokenizer step sees the text as built (no
        lowercasing or stripping, special tokens from the tokenizer file's post-processor) and
        its frames are resized as LeRobot's resize_with_pad does (engine.processor.images)."""
        return self.name != "ours"

    def text(self, task: str, normalized_state: np.ndarray | None = None) -> str:
        if self.name == "lerobot_pi05":
            if normalized_state is None:
                raise ValueError("a pi0.5 prompt needs the normalised state")
            return pi05_prompt(task, normalized_state)
        if self.name == "lerobot_pi0":
            return task if task.endswith("\n") else task + "\n"
        return task


def prompt_style_for(policy: str, family: str | None = None) -> PromptStyle:
    """pi0.5 always writes the state into its prompt; a LeRobot checkpoint (its family, as
    engine.checkpoint.format decided it from the files) gets LeRobot's pi0 text; ours
    (physai_ros-trained) and the presets (family None) get ours."""
    if policy == "pi05":
        return PromptStyle("lerobot_pi05")
    if family is not None and family.startswith("lerobot"):
        return PromptStyle("lerobot_pi0")
    return PromptStyle("ours")
