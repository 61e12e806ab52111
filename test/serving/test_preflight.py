"""serving.startup.preflight: the policy server's files are checked before anything heavy starts, and
the error names the fleet.yaml key, the resolved path and the reason."""
import json
import shutil
from pathlib import Path

import pytest
import yaml

from physai_ros.config.fleet import default_fleet_path, load_fleet
from physai_ros.serving.startup.preflight import ServerFilesError, check_server_files, checkpoint_dir

SHIPPED = checkpoint_dir(load_fleet(None))


def _fleet(tmp_path: Path, **model) -> Path:
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["server"]["model"].update(model)
    p = tmp_path / "fleet.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _cut(path: Path, keep: float) -> None:
    """Truncate a file to a fraction of its size, as an interrupted download leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[:max(9, int(len(data) * keep))])


def test_the_shipped_fleet_passes():
    check_server_files(load_fleet(None))


@pytest.mark.parametrize("break_it, reason", [
    (lambda d: shutil.rmtree(d), "does not exist"),
    (lambda d: (shutil.rmtree(d), d.write_text("")), "is not a directory"),
    (lambda d: (d / "config.json").unlink(), "config.json does not exist"),
    (lambda d: (d / "model.safetensors").unlink(), "has no model.safetensors or model.safetensors.index.json"),
    (lambda d: ((d / "model.safetensors").unlink(), (d / "model.safetensors").mkdir()), "is not a file"),
    (lambda d: _cut(d / "model.safetensors", 0.5), "the file is cut short (an interrupted download?)"),
    (lambda d: _cut(d / "model.safetensors", 0.0001), "cut short or not safetensors"),
    (lambda d: (d / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}......"),
     "unreadable safetensors header"),
])
def test_a_broken_checkpoint_is_named_with_its_key_path_and_reason(tmp_path, break_it, reason):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(SHIPPED, ckpt)
    break_it(ckpt)
    fleet = _fleet(tmp_path, checkpoint="ckpt")  # relative to the fleet file
    with pytest.raises(ServerFilesError) as err:
        check_server_files(load_fleet(fleet))
    msg = str(err.value)
    assert msg.startswith("server.model.checkpoint 'ckpt'") and str(fleet) in msg
    assert str(ckpt) in msg and reason in msg


def test_a_missing_tokenizer_is_named(tmp_path):
    fleet = _fleet(tmp_path, tokenizer="/no/such/tokenizer.json")
    with pytest.raises(ServerFilesError, match=r"^server\.model\.tokenizer '/no/such/tokenizer.json'.*does not exist"):
        check_server_files(load_fleet(fleet))


def test_a_preset_model_needs_no_checkpoint(tmp_path):
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["server"]["model"] = {"preset": "tiny", "tokenizer": "package://physai_ros/assets/tokenizer.json",
                              "max_token_len": 48, "seed": 0}
    p = tmp_path / "fleet.yaml"
    p.write_text(yaml.safe_dump(doc))
    check_server_files(load_fleet(p))


def test_every_shard_of_an_index_is_checked(tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(SHIPPED, ckpt)
    shard = ckpt / "model-00001-of-00001.safetensors"
    (ckpt / "model.safetensors").rename(shard)
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": shard.name}}))
    check_server_files(load_fleet(_fleet(tmp_path, checkpoint="ckpt")))  # the whole shard: accepted
    _cut(shard, 0.9)
    with pytest.raises(ServerFilesError, match="model-00001-of-00001.safetensors: .* cut short"):
        check_server_files(load_fleet(_fleet(tmp_path, checkpoint="ckpt")))
    shard.unlink()
    with pytest.raises(ServerFilesError, match="model-00001-of-00001.safetensors does not exist"):
        check_server_files(load_fleet(_fleet(tmp_path, checkpoint="ckpt")))
