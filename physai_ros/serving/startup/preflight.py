"""The files a policy server needs, checked before anything heavy starts.

A missing or unreadable checkpoint used to surface as a traceback in the server's log a minute
later (after torch imported and the robots had started), while the launcher went on waiting. The
server and physai-fleet call check_server_files first and stop with one line that names the
fleet.yaml key, the resolved path and the reason: missing files, a checkpoint format whose files
contradict each other, normalisation statistics missing or too short. Pure file checks, no model is
built (physai_ros.engine's package import still brings torch in: about 3 s on a busy machine).
"""
from __future__ import annotations

import os
from pathlib import Path

from physai_ros.config.fleet import FleetConfig, fleet_dir, resolve_package_path, tokenizer_path
from physai_ros.config_fields import FleetConfigError
from physai_ros.engine.checkpoint.format import PHYSAI, CheckpointError, detect_format
from physai_ros.engine.processor.normalizer import Normalizer
from physai_ros.errors import UserInputError
from physai_ros.serving.pipeline.backends import check_component_models
from physai_ros.serving.validation import camera_slots

# A LeRobot checkpoint directory: config.json plus one file of weights or a shard index.
CHECKPOINT_CONFIG = "config.json"
CHECKPOINT_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")


# The policy server's progress lines while it starts carry this; physai-fleet relays them.
STARTUP_LOG_PREFIX = "startup:"
# Its last one, logged once the register service exists: the launch file starts the robots on it.
SERVING_LOG_MARK = f"{STARTUP_LOG_PREFIX} serving "


class ServerFilesError(RuntimeError, UserInputError):
    """A file the server needs is missing or unreadable; the message is for the user as is."""


def _readable(path: Path) -> str | None:
    """Why path cannot be read as a file, or None."""
    if not path.exists():
        return "does not exist"
    if not path.is_file():
        return "is not a file"
    if not os.access(path, os.R_OK):
        return "is not readable (permissions)"
    return None


_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}


def safetensors_problem(path: Path) -> str | None:
    """Why a .safetensors file cannot hold the tensors its header lists (cut short, a corrupt
    header, a tensor whose bytes do not match its shape), or None. Reads the header only: the
    size on disk must reach the end of the last tensor's bytes. A model.safetensors cut in half
    passed the header-only checks and failed a minute later, at model load."""
    import json
    import math

    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return f"{size} bytes: too short for a safetensors header"
            n = int.from_bytes(head, "little")
            if n > size - 8:
                return f"header says {n} bytes, the file has {size - 8} after its length: cut short or not safetensors"
            header = json.loads(f.read(n))
    except (OSError, ValueError) as e:
        return f"unreadable safetensors header ({e})"
    end = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, stop = (int(x) for x in t["data_offsets"])
            want = math.prod(int(d) for d in t["shape"]) * _DTYPE_BYTES[t["dtype"]]
        except (KeyError, TypeError, ValueError) as e:
            return f"tensor {name!r}: malformed header entry ({e})"
        if stop - begin != want:
            return f"tensor {name!r}: {stop - begin} bytes for shape {t['shape']} {t['dtype']} ({want} expected)"
        end = max(end, stop)
    if size < 8 + n + end:
        return f"{size} bytes on disk, its tensors need {8 + n + end}: the file is cut short (an interrupted download?)"
    return None


def checkpoint_dir(cfg: FleetConfig) -> Path | None:
    """The resolved server.model.checkpoint directory (None for a preset model)."""
    if cfg.server.model.checkpoint is None:
        return None
    return resolve_package_path(cfg.server.model.checkpoint, fleet_dir(cfg))


def check_server_files(cfg: FleetConfig) -> None:
    """Raise ServerFilesError naming the first missing or unreadable file the server needs."""
    where = f" (in {cfg.source})" if cfg.source else ""
    ckpt = checkpoint_dir(cfg)
    if ckpt is not None:
        key = f"server.model.checkpoint {cfg.server.model.checkpoint!r}{where}"
        if not ckpt.exists():
            raise ServerFilesError(f"{key}: the checkpoint directory {ckpt} does not exist")
        if not ckpt.is_dir():
            raise ServerFilesError(f"{key}: {ckpt} is not a directory (expected a LeRobot "
                                   f"checkpoint directory with {CHECKPOINT_CONFIG} and model.safetensors)")
        why = _readable(ckpt / CHECKPOINT_CONFIG)
        if why:
            raise ServerFilesError(f"{key}: {ckpt / CHECKPOINT_CONFIG} {why}")
        weights = [ckpt / name for name in CHECKPOINT_WEIGHTS if (ckpt / name).exists()]
        if not weights:
            raise ServerFilesError(f"{key}: {ckpt} has no {' or '.join(CHECKPOINT_WEIGHTS)}")
        why = _readable(weights[0])
        if why:
            raise ServerFilesError(f"{key}: {weights[0]} {why}")
        for shard in _weight_files(weights[0]):
            why = _readable(shard) or safetensors_problem(shard)
            if why:
                raise ServerFilesError(f"{key}: {shard} {why}" if why.startswith(("does", "is ")) else
                                       f"{key}: {shard}: {why}")
        # Which LeRobot wrote it and its normalisation statistics, read from the files: a
        # contradictory format or missing statistics is named here, before the model loads.
        try:
            fmt = detect_format(ckpt)
            Normalizer.from_checkpoint(ckpt)
        except CheckpointError as e:
            raise ServerFilesError(f"{key}: {e}") from None
        streaming = sorted(n for n, t in cfg.tasks.items() if t.mode == "streaming")
        if fmt.policy_type != "pi0" and streaming:
            raise ServerFilesError(
                f"tasks.{streaming[0]}.mode: streaming needs a pi0 checkpoint (the streaming action expert "
                f"is built for pi0's state token); {key} {ckpt} is {fmt.policy_type}: set `mode: chunked` "
                f"for {', '.join(streaming)} or remove {'it' if len(streaming) == 1 else 'them'}")
        cameras = checkpoint_cameras(ckpt)
        for i, robot in enumerate(cfg.robots):
            why = camera_slots(robot.camera_features, robot.num_views, cameras)
            if isinstance(why, str):
                raise ServerFilesError(f"robots[{i}].cameras ({robot.id}): {why}; {key} {ckpt}")
    tok = tokenizer_path(cfg)
    why = _readable(tok)
    if why:
        raise ServerFilesError(f"server.model.tokenizer {cfg.server.model.tokenizer!r}{where}: {tok} {why}")
    # Pipeline components' Hugging Face model directories (serving.pipeline.service loads them).
    try:
        check_component_models(cfg)
    except FleetConfigError as e:
        raise ServerFilesError(f"{e}{where}") from None


def checkpoint_cameras(ckpt: Path | None) -> tuple[str, ...]:
    """A LeRobot checkpoint's cameras: its VISUAL input features in config.json's order (the
    order its policy reads them); () for our own checkpoints (views in the robot's order) or a
    preset model."""
    if ckpt is None:
        return ()
    import json

    try:
        if detect_format(ckpt).family == PHYSAI:
            return ()
        features = json.loads((ckpt / CHECKPOINT_CONFIG).read_text()).get("input_features") or {}
        return tuple(name for name, spec in features.items() if isinstance(spec, dict) and spec.get("type") == "VISUAL")
    except (OSError, ValueError, CheckpointError) as e:
        raise ServerFilesError(f"{ckpt / CHECKPOINT_CONFIG}: {e}") from None


def _weight_files(weights: Path) -> list[Path]:
    """model.safetensors itself, or the shards a model.safetensors.index.json names."""
    if weights.suffix != ".json":
        return [weights]
    import json

    try:
        shards = sorted(set(json.loads(weights.read_text())["weight_map"].values()))
    except (OSError, ValueError, KeyError, AttributeError) as e:
        raise ServerFilesError(f"{weights}: not a safetensors index ({e})") from None
    return [weights.parent / s for s in shards]


def check_keystore(cfg: FleetConfig) -> None:
    """A named keystore (security.keystore other than auto) holds every key this fleet's server
    and robots need, private ones included (a launcher runs them all on this host): otherwise
    KeystoreError naming the file and the `physai-fleet keys` command that makes it."""
    from physai_ros.security.config import AUTO, open_keystore
    from physai_ros.security.keystore import Identity

    sec = cfg.security
    if sec.insecure or sec.keystore == AUTO:
        return
    idents = [sec.server] + [Identity("robot", r.id) for r in cfg.robots]
    ks = open_keystore(sec, fleet_dir(cfg), idents)
    for ident in idents:
        ks.private_key(ident)
