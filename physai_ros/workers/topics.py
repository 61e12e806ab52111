"""Topic names of one engine_worker instance (the contract between worker and proxy)."""
from __future__ import annotations

import re

WORKER_NAMESPACE = "/engine_workers"
_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def check_instance_id(instance_id: str) -> str:
    # The id becomes a ROS name token, so it must be one.
    if not isinstance(instance_id, str) or not _ID.match(instance_id):
        raise ValueError(f"instance_id: expected letters, digits and '_' starting with a letter, "
                         f"got {instance_id!r}")
    return instance_id


def request_topic(instance_id: str) -> str:
    return f"{WORKER_NAMESPACE}/{check_instance_id(instance_id)}/batch_request"


def result_topic(instance_id: str) -> str:
    return f"{WORKER_NAMESPACE}/{check_instance_id(instance_id)}/batch_result"


def status_topic(instance_id: str) -> str:
    return f"{WORKER_NAMESPACE}/{check_instance_id(instance_id)}/status"
