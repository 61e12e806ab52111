"""The embedded default fleet with one task key changed, parsed; optionally served by the tiny
random model (no checkpoint to load, no start-up profiling) for serving-core tests."""
import copy

from physai_ros.config.fleet import default_fleet_path, parse_fleet

TINY_MODEL = {"preset": "tiny", "tokenizer": "package://physai_ros/assets/tokenizer.json", "max_token_len": 48,
              "seed": 3}


def fleet_with(doc: dict, task: str, key: str, value, tiny: bool = False):
    """`doc` (the default fleet's YAML as loaded) with tasks.<task>.<key> = value (None: left
    out), parsed as the server would."""
    d = copy.deepcopy(doc)
    if value is not None:
        d["tasks"][task][key] = value
    if tiny:
        d["server"]["model"] = dict(TINY_MODEL)
        d["server"]["max_observation_age_s"] = 30.0
        d["server"]["profile"] = False
    return parse_fleet(d, source=str(default_fleet_path()))
