#!/usr/bin/env bash
# Makes .venv-litserve: LitServe 0.2 for `python -m bench.engines`. Its own venv so that its
# FastAPI/uvicorn pins never reach the project's .venv (Ray Serve and TorchServe's tools live there).
#
#   bash bench/peers/litserve_setup.sh [VENV]     (default: .venv-litserve at the repo root)
#
# Environment: PYTHON (default: the interpreter the project's .venv was made from, else python3).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${1:-$here/.venv-litserve}"
base="${PYTHON:-}"
if [[ -z $base && -f $here/.venv/pyvenv.cfg ]]; then
  base="$(sed -n 's/^executable = //p' "$here/.venv/pyvenv.cfg")"
fi
base="${base:-python3}"

"$base" -m venv "$venv"
echo '*' > "$venv/.gitignore"  # git leaves the venv alone (what Python 3.13's venv writes itself)
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "litserve>=0.2.19,<0.3" "torch==2.13.0" simplejpeg numpy python-multipart
"$venv/bin/python" -c 'import litserve, torch, simplejpeg; print("litserve ok:", litserve.__version__, "torch", torch.__version__)'
