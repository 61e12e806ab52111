"""The flow sampler's starting noise per task (fleet.yaml `tasks.<task>.noise_scale`).

pi0 samples a chunk by integrating its flow from x ~ N(0, I) (LeRobot's sampler; the engine
draws that noise itself when an input carries none). A task with noise_scale s < 1 starts from
s * N(0, I) instead: a lower sampling temperature, fewer chunks far from the policy's mean, at
the cost of the spread a multimodal task may need (docs/pipelines.md, "Where the policy lets go").
The server draws it, so the scaled noise travels in the engine input to a local engine or a
remote engine worker alike, and real-time chunking starts from it too.
"""
from __future__ import annotations

import threading
from typing import Mapping


class StartingNoise:
    def __init__(self, scales: Mapping[str, float] | None = None, seed: int = 0):
        # Only the tasks that change it: every other task keeps the engine's own N(0, I) draw,
        # bit for bit what it was before this option existed.
        self.scales = {task: float(s) for task, s in (scales or {}).items() if s != 1.0}
        self._seed = seed
        self._gen = None
        self._lock = threading.Lock()  # engine instances prepare their batches on their own threads

    def restart(self) -> None:
        """The next draw starts the seeded stream again (Pi0Engine.restart_noise's reason)."""
        with self._lock:
            self._gen = None

    def draw(self, task_id: str, chunk_size: int, action_dim: int):
        """The starting noise [chunk_size, action_dim] for one observation of `task_id`, or None
        (the engine draws N(0, I))."""
        scale = self.scales.get(task_id)
        if scale is None:
            return None
        import torch

        with self._lock:
            if self._gen is None:
                self._gen = torch.Generator().manual_seed(self._seed)
            return torch.randn(chunk_size, action_dim, generator=self._gen) * scale
