"""An extension point for a server's engine slots: PHYSAI_SLOT_HOOK="package.module:function"
names a function the policy server calls with its engine slots once they are built, before any
batch runs (to observe them, or to set a slot's `before_batch(instance_id, batch_no)`). Unset: nothing
is imported and nothing runs.

Only the environment of the process that starts the server sets it (never fleet.yaml: it is not
an operator setting). The fault tests use it to make a real server process's engine fail at a
known batch without patching code inside it (physai_lab.fault_injection, outside this package).
"""
from __future__ import annotations

import importlib
import os
from typing import Mapping, Optional

ENV_VAR = "PHYSAI_SLOT_HOOK"


def run_slot_hook(slots: list, environ: Optional[Mapping[str, str]] = None) -> None:
    spec = (os.environ if environ is None else environ).get(ENV_VAR, "").strip()
    if not spec:
        return
    module, sep, name = spec.partition(":")
    if not (module and sep and name):
        raise ValueError(f"{ENV_VAR}: expected <package.module>:<function>, got {spec!r}")
    hook = getattr(importlib.import_module(module), name, None)
    if not callable(hook):
        raise ValueError(f"{ENV_VAR}: {module} has no function {name!r}")
    hook(slots)
