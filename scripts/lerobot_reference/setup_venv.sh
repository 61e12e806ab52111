#!/usr/bin/env bash
# Create the LeRobot reference environment (default: <repo>/.venv-lerobot). Idempotent: a venv whose
# .ready stamp is newer than this script, requirements.txt and constraints.txt is left alone.
#   scripts/lerobot_reference/setup_venv.sh            # or LEROBOT_VENV=/path PYTHON=python3.11 ...
# Why a separate venv: lerobot 0.3.2's declared pins (transformers<4.52 via its pi0 extra, torchvision,
# wandb, rerun-sdk, ...) must never touch the main .venv; PI0 itself needs only the set below.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="${LEROBOT_VENV:-$ROOT/.venv-lerobot}"
# Absolute, because the smoke check below runs from another directory.
mkdir -p "$(dirname "$VENV")"
VENV="$(cd "$(dirname "$VENV")" && pwd)/$(basename "$VENV")"
PYTHON="${PYTHON:-python3.11}"
STAMP="$VENV/.ready"

if [[ -f "$STAMP" && "$STAMP" -nt "$HERE/requirements.txt" && "$STAMP" -nt "$HERE/setup_venv.sh" \
      && "$STAMP" -nt "$ROOT/constraints.txt" ]]; then
    exit 0
fi
start=$(date +%s)
rm -f "$STAMP"
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
# Keep the venv out of git status without touching the repository's .gitignore.
echo '*' > "$VENV/.gitignore"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade "pip>=24"
"${PIP[@]}" install -q -c "$ROOT/constraints.txt" -r "$HERE/requirements.txt"
# --no-deps: lerobot's declared dependency set would pull wandb, rerun-sdk, pynput, torchcodec,
# gymnasium and a transformers < 4.52 that its own PI0 cannot run with. torchvision's wheel is a CUDA
# build that cannot load its ops next to CPU torch; lerobot_compat.py handles its import.
"${PIP[@]}" install -q -c "$ROOT/constraints.txt" --no-deps lerobot==0.3.2 torchvision==0.28.0
# Smoke check: the PI0 import path works and torch is still the CPU 2.13.0 build.
(cd "$HERE" && "$VENV/bin/python" -c "
import torch, lerobot_compat
assert torch.__version__.startswith('2.13.0'), torch.__version__
print('lerobot', lerobot_compat.lerobot_version(), 'torch', torch.__version__)")
touch "$STAMP"
echo "reference venv ready at $VENV in $(( $(date +%s) - start )) s ($(du -sh "$VENV" | cut -f1))"
