"""Where each LeRobot reference environment's Python is (stdlib only: the main venv's tests,
benchmarks and fixture scripts import it to start the reference in its own venv)."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# release -> (env var naming its python, env var naming its venv, default venv under the repo)
RELEASES = {
    "0.3.2": ("LEROBOT_PYTHON", "LEROBOT_VENV", ".venv-lerobot"),
    "0.6.1": ("LEROBOT06_PYTHON", "LEROBOT06_VENV", ".venv-lerobot06"),
}


def venv_python(release: str) -> Path:
    """$<PYTHON var>, else $<VENV var>/bin/python, else <repo>/<default venv>/bin/python."""
    python_var, venv_var, default = RELEASES[release]
    if os.environ.get(python_var):
        return Path(os.environ[python_var])
    venv = Path(os.environ.get(venv_var, ROOT / default))
    return (venv if venv.is_absolute() else ROOT / venv) / "bin" / "python"
