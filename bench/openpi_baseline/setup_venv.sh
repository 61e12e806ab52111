#!/usr/bin/env bash
# Create the openpi baseline environment (default: <repo>/.venv-openpi). Idempotent: a venv whose
# .ready stamp is newer than this script and its requirements is left alone.
# Why a separate venv: openpi-client pins numpy<2, which must never touch the main .venv.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="${OPENPI_VENV:-$ROOT/.venv-openpi}"
PYTHON="${PYTHON:-python3.11}"
STAMP="$VENV/.ready"
if [[ -f "$STAMP" && "$STAMP" -nt "$HERE/requirements.txt" && "$STAMP" -nt "$HERE/setup_venv.sh" ]]; then
    exit 0
fi
rm -f "$STAMP"
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
echo '*' > "$VENV/.gitignore"
"$VENV/bin/python" -m pip --disable-pip-version-check install -q -r "$HERE/requirements.txt"
"$VENV/bin/python" -c "import openpi_client.msgpack_numpy, openpi_client.websocket_client_policy, websockets.asyncio.server"
touch "$STAMP"
