#!/usr/bin/env bash
# Create the LeRobot 0.6.1 reference environment (default: <repo>/.venv-lerobot06). Idempotent: a venv
# whose .ready stamp is newer than this script, requirements06.txt, patch_pep695.py and
# constraints.txt is left alone.
#   scripts/lerobot_reference/setup_venv06.sh          # or LEROBOT06_VENV=/path PYTHON=python3.11 ...
# Why this route: lerobot 0.6.1 declares Python >= 3.12 and torch < 2.12; we keep Python 3.11 and
# the repository's torch 2.13.0 CPU build, install lerobot without its declared dependencies and
# rewrite its few PEP 695 lines (patch_pep695.py). Its own pins never touch the main .venv.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="${LEROBOT06_VENV:-$ROOT/.venv-lerobot06}"
# Absolute, because the smoke check below runs from another directory.
mkdir -p "$(dirname "$VENV")"
VENV="$(cd "$(dirname "$VENV")" && pwd)/$(basename "$VENV")"
PYTHON="${PYTHON:-python3.11}"
STAMP="$VENV/.ready"

if [[ -f "$STAMP" && "$STAMP" -nt "$HERE/requirements06.txt" && "$STAMP" -nt "$HERE/setup_venv06.sh" \
      && "$STAMP" -nt "$HERE/patch_pep695.py" && "$STAMP" -nt "$ROOT/constraints.txt" ]]; then
    exit 0
fi
start=$(date +%s)
rm -f "$STAMP"
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
# Keep the venv out of git status without touching the repository's .gitignore.
echo '*' > "$VENV/.gitignore"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade "pip>=24"
"${PIP[@]}" install -q -c "$ROOT/constraints.txt" -r "$HERE/requirements06.txt"
# --no-deps: lerobot 0.6.1 pins torch<2.12 and torchvision<0.27 (we keep torch 2.13.0 CPU) and its
# core set pulls cmake and setuptools<82 that the policies never import. --ignore-requires-python:
# it declares Python >= 3.12; the only 3.12 syntax it uses is rewritten below. --force-reinstall
# gives the patcher pristine files every time this script runs. torchvision's wheel is a CUDA build
# that cannot load its ops next to CPU torch; lerobot06_compat.py handles its import.
"${PIP[@]}" install -q -c "$ROOT/constraints.txt" --no-deps --ignore-requires-python --force-reinstall \
    lerobot==0.6.1 torchvision==0.28.0
"$VENV/bin/python" "$HERE/patch_pep695.py"
# Smoke check: both policies import, torch is still the CPU 2.13.0 build, transformers is the pin.
(cd "$HERE" && "$VENV/bin/python" -c "
import torch, transformers, lerobot06_compat as lc
from lerobot.policies.pi05.processor_pi05 import make_pi05_pre_post_processors
from lerobot.policies.pi0.processor_pi0 import make_pi0_pre_post_processors
assert torch.__version__.startswith('2.13.0'), torch.__version__
assert lc.lerobot_version() == '0.6.1', lc.lerobot_version()
print('lerobot', lc.lerobot_version(), 'transformers', transformers.__version__, 'torch', torch.__version__)")
touch "$STAMP"
echo "reference venv (lerobot 0.6.1) ready at $VENV in $(( $(date +%s) - start )) s ($(du -sh "$VENV" | cut -f1))"
