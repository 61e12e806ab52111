"""openpi's observation layouts as data: which keys of the dict an openpi client sends hold the
cameras, the state and the prompt, for the robot families openpi's examples serve (the gateway's
conversion is physai_ros.client.openpi.layouts).

  libero  {"observation/image": HxWx3, "observation/wrist_image": HxWx3, "observation/state": [8],
           "prompt": str}
  droid   {"observation/exterior_image_1_left": HxWx3, "observation/wrist_image_left": HxWx3,
           "observation/joint_position": [7], "observation/gripper_position": [1], "prompt": str}
  aloha   {"images": {"cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist": 3xHxW},
           "state": [14], "prompt": str}
"""
from __future__ import annotations

from dataclasses import dataclass

Path = tuple[str, ...]  # keys from the top of the observation dict down ("images", "cam_high")


@dataclass(frozen=True)
class OpenpiLayout:
    name: str
    cameras: tuple[Path, ...]
    state: tuple[Path, ...]
    prompt: Path = ("prompt",)

    def views(self, n: int) -> tuple[Path, ...]:
        if n > len(self.cameras):
            raise ValueError(f"layout {self.name} has {len(self.cameras)} cameras, the robot {n}")
        return self.cameras[:n]


LAYOUTS: dict[str, OpenpiLayout] = {
    "libero": OpenpiLayout("libero", (("observation/image",), ("observation/wrist_image",)),
                           (("observation/state",),)),
    "droid": OpenpiLayout("droid", (("observation/exterior_image_1_left",), ("observation/wrist_image_left",)),
                          (("observation/joint_position",), ("observation/gripper_position",))),
    "aloha": OpenpiLayout("aloha", tuple(("images", c) for c in ("cam_high", "cam_low", "cam_left_wrist",
                                                                 "cam_right_wrist")),
                          (("state",),)),
}
