"""Expert episodes on disk in the LeRobot dataset layout (codebase v2.1), written with pyarrow.

    ROOT/meta/info.json          fps, features (dtype, shape, names), paths, totals
    ROOT/meta/tasks.jsonl        {"task_index", "task"}: the prompts
    ROOT/meta/episodes.jsonl     {"episode_index", "tasks", "length", "success", "sim_task", "seed"}
    ROOT/meta/stats.json         per feature mean / std / min / max (numeric features)
    ROOT/data/chunk-000/episode_000000.parquet   one row per frame

Columns: observation.images.camera_<i> (struct {bytes: PNG, path}: the `datasets` Image feature
LeRobot stores images with when it does not encode videos), observation.state (joints then
gripper), observation.wrench (fx fy fz tx ty tz), action (the command at that frame),
timestamp, frame_index, episode_index, index, task_index, next.done, next.success.

A training sample's action chunk is the `action` of later frames at the action rate, LeRobot's
delta_timestamps ({"action": [0, 1/rate, ...]}); past the episode's end the last action is held
(the robot holds its last command), which LeRobot marks as action_is_pad instead.

Recovery episodes (training.rollouts: driven by the policy or a perturbed expert) are different:
what was executed is not what should have been, so each frame carries its own label, the chunk
the scripted expert would command from the state reached, in an extra `action_chunk` column
([chunk, dim]); `action` is that chunk's first action. episodes.jsonl names the `driver`.

Text targets (sim.narration): `subtask` and `scene` string columns, the ground-truth
answers to narration's two questions at that frame; absent in datasets recorded before them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import cv2
import numpy as np

from physai_ros.engine.processor.images import letterbox

from physai_lab.training.expert_data import Episode

CODEBASE_VERSION = "v2.1"
CHUNKS_SIZE = 1000
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
NUMERIC = ("observation.state", "observation.wrench", "action")


class DatasetError(ValueError):
    """A dataset directory that is not what the reader expects; the message names the file."""


def image_key(view: int) -> str:
    return f"observation.images.camera_{view}"


@dataclass
class EncodedEpisode:
    """An Episode with its images PNG-encoded (what worker processes hand back)."""

    task: str
    prompt: str
    seed: int
    success: bool
    png: List[List[bytes]]  # per frame, per view
    state: np.ndarray
    wrench: np.ndarray
    action: np.ndarray
    success_flags: np.ndarray
    labels: Optional[np.ndarray] = None  # [n, chunk, dim]: per-frame expert chunks (recovery data)
    driver: str = "expert"  # who moved the robot: expert | policy | perturbed_expert
    subtask: Optional[List[str]] = None  # per frame: sim.narration's answers (text targets)
    scene: Optional[List[str]] = None

    @staticmethod
    def encode(ep: Episode) -> "EncodedEpisode":
        png = [[encode_png(im) for im in views] for views in ep.images]
        return EncodedEpisode(ep.task, ep.prompt, ep.seed, ep.success, png, np.stack(ep.state),
                              np.stack(ep.wrench), np.stack(ep.action), np.asarray(ep.success_flags, dtype=bool),
                              subtask=list(ep.subtask) or None, scene=list(ep.scene) or None)

    def __len__(self) -> int:
        return len(self.png)


def encode_png(rgb: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(rgb[..., ::-1]))
    if not ok:
        raise RuntimeError("PNG encoding failed")
    return buf.tobytes()


def decode_png(data: bytes) -> np.ndarray:
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise DatasetError("undecodable PNG image in dataset")
    return bgr[..., ::-1]


def write_dataset(root, episodes: Sequence[EncodedEpisode], fps: int, joint_names: Sequence[str],
                  robot_type: str = "physai_sim_arm") -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(root)
    (root / "meta").mkdir(parents=True, exist_ok=True)
    if not episodes:
        raise DatasetError("no episodes to write")
    views = len(episodes[0].png[0])
    h, w = decode_png(episodes[0].png[0][0]).shape[:2]
    labelled = episodes[0].labels is not None
    if any((ep.labels is not None) != labelled for ep in episodes):
        raise DatasetError("episodes with and without per-frame label chunks cannot share a dataset")
    narrated = episodes[0].subtask is not None
    if any((ep.subtask is not None) != narrated or (ep.scene is not None) != narrated for ep in episodes):
        raise DatasetError("episodes with and without text targets cannot share a dataset")
    tasks: Dict[str, int] = {}
    index = 0
    img_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    with open(root / "meta" / "episodes.jsonl", "w") as ep_log:
        for e, ep in enumerate(episodes):
            n = len(ep)
            t_idx = tasks.setdefault(ep.prompt, len(tasks))
            cols = {}
            for v in range(views):
                cols[image_key(v)] = pa.array([{"bytes": f[v], "path": None} for f in ep.png], type=img_type)
            for name, arr in (("observation.state", ep.state), ("observation.wrench", ep.wrench), ("action", ep.action)):
                cols[name] = pa.array(list(arr.astype(np.float32)), type=pa.list_(pa.float32()))
            cols["timestamp"] = pa.array(np.arange(n, dtype=np.float32) / np.float32(fps))
            cols["frame_index"] = pa.array(np.arange(n, dtype=np.int64))
            cols["episode_index"] = pa.array(np.full(n, e, dtype=np.int64))
            cols["index"] = pa.array(np.arange(index, index + n, dtype=np.int64))
            cols["task_index"] = pa.array(np.full(n, t_idx, dtype=np.int64))
            cols["next.done"] = pa.array(np.arange(n) == n - 1)
            cols["next.success"] = pa.array(ep.success_flags)
            if labelled:
                cols["action_chunk"] = pa.array(list(ep.labels.reshape(n, -1).astype(np.float32)),
                                                type=pa.list_(pa.float32()))
            if narrated:
                cols["subtask"] = pa.array(list(ep.subtask), type=pa.string())
                cols["scene"] = pa.array(list(ep.scene), type=pa.string())
            path = root / DATA_PATH.format(episode_chunk=e // CHUNKS_SIZE, episode_index=e)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table(cols), path)
            index += n
            ep_log.write(json.dumps({"episode_index": e, "tasks": [ep.prompt], "length": n, "success": ep.success,
                                     "sim_task": ep.task, "seed": ep.seed, "driver": ep.driver}) + "\n")
    with open(root / "meta" / "tasks.jsonl", "w") as f:
        for task, i in tasks.items():
            f.write(json.dumps({"task_index": i, "task": task}) + "\n")
    dim = episodes[0].state.shape[1]
    features = {image_key(v): {"dtype": "image", "shape": [h, w, 3], "names": ["height", "width", "channel"]}
                for v in range(views)}
    features.update({
        "observation.state": {"dtype": "float32", "shape": [dim], "names": list(joint_names)},
        "observation.wrench": {"dtype": "float32", "shape": [6], "names": ["fx", "fy", "fz", "tx", "ty", "tz"]},
        "action": {"dtype": "float32", "shape": [dim], "names": list(joint_names)},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
        "next.success": {"dtype": "bool", "shape": [1], "names": None},
    })
    if labelled:
        features["action_chunk"] = {"dtype": "float32", "shape": list(episodes[0].labels.shape[1:]),
                                    "names": ["step", "joint"]}
    if narrated:
        for name in ("subtask", "scene"):
            features[name] = {"dtype": "string", "shape": [1], "names": None}
    info = {
        "codebase_version": CODEBASE_VERSION, "robot_type": robot_type, "total_episodes": len(episodes),
        "total_frames": index, "total_tasks": len(tasks), "total_videos": 0,
        "total_chunks": (len(episodes) - 1) // CHUNKS_SIZE + 1, "chunks_size": CHUNKS_SIZE, "fps": fps,
        "splits": {"train": f"0:{len(episodes)}"}, "data_path": DATA_PATH, "video_path": None, "features": features,
    }
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    stats = {}
    for name, attr in zip(NUMERIC, ("state", "wrench", "action")):
        x = np.concatenate([getattr(ep, attr) for ep in episodes]).astype(np.float64)
        stats[name] = {"mean": x.mean(0).tolist(), "std": x.std(0).tolist(), "min": x.min(0).tolist(),
                       "max": x.max(0).tolist(), "count": [int(x.shape[0])]}
    (root / "meta" / "stats.json").write_text(json.dumps(stats, indent=2))
    return root


@dataclass
class LoadedDataset:
    """Frames of the successful expert episodes and of every recovery episode (their labels are
    the expert's from whatever state was reached), images letterboxed to the model's size."""

    fps: int
    images: np.ndarray  # uint8 [N, V, 3, S, S]
    state: np.ndarray  # float32 [N, D]
    wrench: np.ndarray  # float32 [N, 6]
    action: np.ndarray  # float32 [N, D]
    episode: np.ndarray  # int64 [N], dataset episode index
    episode_end: np.ndarray  # int64 [N], exclusive end row of the frame's episode
    prompts: List[str]  # per frame (the dataset's task string)
    sim_task: List[str]  # per frame
    stats: dict
    episodes_used: int
    episodes_skipped: int
    label_chunks: Optional[np.ndarray] = None  # float32 [N, chunk, D]: the targets when known per frame
    driver: List[str] = field(default_factory=list)  # per frame
    subtask: List[str] = field(default_factory=list)  # per frame text targets; "" where not recorded
    scene: List[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.state.shape[0])


def read_info(root) -> dict:
    p = Path(root) / "meta" / "info.json"
    if not p.is_file():
        raise DatasetError(f"{root}: no meta/info.json; not a LeRobot dataset directory")
    info = json.loads(p.read_text())
    if info.get("codebase_version") != CODEBASE_VERSION:
        raise DatasetError(f"{p}: codebase_version {info.get('codebase_version')!r}, expected {CODEBASE_VERSION!r}")
    return info


def load_dataset(root, image_size: int, only_successful: bool = True) -> LoadedDataset:
    import pyarrow.parquet as pq

    root = Path(root)
    info = read_info(root)
    views = sorted(k for k, f in info["features"].items() if f["dtype"] == "image")
    episodes = [json.loads(line) for line in (root / "meta" / "episodes.jsonl").read_text().splitlines() if line]
    stats = json.loads((root / "meta" / "stats.json").read_text())
    imgs, state, wrench, action, ep_idx, ends, prompts, sim = [], [], [], [], [], [], [], []
    labels, drivers, subtask, scene = [], [], [], []
    narrated = "subtask" in info["features"]
    label_shape = info["features"].get("action_chunk", {}).get("shape")
    used = skipped = 0
    rows = 0
    for ep in episodes:
        driver = ep.get("driver", "expert")
        # A failed expert episode teaches failure; a failed recovery episode is labelled by the
        # expert frame by frame, and its frames are the point of recording it.
        if only_successful and driver == "expert" and not ep.get("success", True):
            skipped += 1
            continue
        e = ep["episode_index"]
        t = pq.read_table(root / info["data_path"].format(episode_chunk=e // info["chunks_size"], episode_index=e))
        n = t.num_rows
        cols = t.to_pydict()
        frame = np.empty((n, len(views), 3, image_size, image_size), np.uint8)
        for v, key in enumerate(views):
            for i, cell in enumerate(cols[key]):
                frame[i, v] = letterbox(decode_png(cell["bytes"]), image_size).transpose(2, 0, 1)
        imgs.append(frame)
        state.append(np.asarray(cols["observation.state"], np.float32))
        wrench.append(np.asarray(cols["observation.wrench"], np.float32))
        action.append(np.asarray(cols["action"], np.float32))
        ep_idx.append(np.full(n, e, np.int64))
        ends.append(np.full(n, rows + n, np.int64))
        prompts += ep["tasks"] * n
        sim += [ep.get("sim_task", "")] * n
        drivers += [driver] * n
        subtask += cols["subtask"] if narrated else [""] * n
        scene += cols["scene"] if narrated else [""] * n
        if label_shape:
            labels.append(np.asarray(cols["action_chunk"], np.float32).reshape(n, *label_shape))
        rows += n
        used += 1
    if not used:
        raise DatasetError(f"{root}: no usable episodes ({skipped} unsuccessful skipped)")
    return LoadedDataset(info["fps"], np.concatenate(imgs), np.concatenate(state), np.concatenate(wrench),
                         np.concatenate(action), np.concatenate(ep_idx), np.concatenate(ends), prompts, sim, stats,
                         used, skipped, np.concatenate(labels) if label_shape else None, drivers, subtask, scene)


def target_chunks(data: LoadedDataset, chunk: int, action_rate_hz: float) -> np.ndarray:
    """[N, chunk, D]: what each frame's answer should command: its own label chunk (recovery
    data), or the actions of its later frames at the action rate (demonstrations)."""
    if data.label_chunks is not None:
        if data.label_chunks.shape[1] != chunk:
            raise DatasetError(f"label chunks hold {data.label_chunks.shape[1]} actions, the model {chunk}")
        return data.label_chunks
    return data.action[chunk_indices(np.arange(len(data)), data.episode_end, data.fps, action_rate_hz, chunk)]


def merge_datasets(parts: Sequence[LoadedDataset], chunk: int, action_rate_hz: float) -> LoadedDataset:
    """One dataset of several (expert demonstrations and recovery rounds), every frame with its
    target chunk made explicit: a part's own label chunks, or its later frames' actions."""
    if not parts:
        raise DatasetError("no datasets to merge")
    fps = parts[0].fps
    if any(p.fps != fps for p in parts):
        raise DatasetError(f"datasets differ in fps: {[p.fps for p in parts]}")
    labels, ends, episodes, offset, ep_base = [], [], [], 0, 0
    for p in parts:
        labels.append(target_chunks(p, chunk, action_rate_hz))
        ends.append(p.episode_end + offset)
        episodes.append(p.episode + ep_base)
        offset += len(p)
        ep_base += int(p.episode.max()) + 1
    cat = np.concatenate
    return LoadedDataset(
        fps, cat([p.images for p in parts]), cat([p.state for p in parts]), cat([p.wrench for p in parts]),
        cat([p.action for p in parts]), cat(episodes), cat(ends), [x for p in parts for x in p.prompts],
        [x for p in parts for x in p.sim_task], parts[0].stats, sum(p.episodes_used for p in parts),
        sum(p.episodes_skipped for p in parts), cat(labels).astype(np.float32),
        [x for p in parts for x in (p.driver or ["expert"] * len(p))],
        [x for p in parts for x in (p.subtask or [""] * len(p))], [x for p in parts for x in (p.scene or [""] * len(p))])


def chunk_indices(rows: np.ndarray, episode_end: np.ndarray, fps: int, action_rate_hz: float, chunk: int) -> np.ndarray:
    """[N, chunk] row indices of the actions a chunk answering frame `rows` holds: frame + k *
    fps / rate, clamped to the episode's last frame."""
    stride = fps / action_rate_hz
    if abs(stride - round(stride)) > 1e-9:
        raise DatasetError(f"fps {fps} is not a multiple of the action rate {action_rate_hz}")
    offs = np.arange(chunk) * int(round(stride))
    return np.minimum(rows[:, None] + offs[None, :], episode_end[:, None] - 1)
