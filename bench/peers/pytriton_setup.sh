#!/usr/bin/env bash
# Makes .venv-pytriton: NVIDIA PyTriton 0.7 (Triton Inference Server in a wheel), for
# `python -m bench.engines`. Its own venv: nvidia-pytriton 0.7 needs numpy < 2, the project's
# .venv has numpy 2. Torch is the same CPU wheel as the project's (`pip install torch==2.13.0`).
#
#   bash bench/peers/pytriton_setup.sh [VENV]     (default: .venv-pytriton at the repo root)
#
# Environment: PYTHON (default: the interpreter the project's .venv was made from, else python3).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${1:-$here/.venv-pytriton}"
base="${PYTHON:-}"
if [[ -z $base && -f $here/.venv/pyvenv.cfg ]]; then
  base="$(sed -n 's/^executable = //p' "$here/.venv/pyvenv.cfg")"
fi
base="${base:-python3}"

"$base" -m venv "$venv"
echo '*' > "$venv/.gitignore"  # git leaves the venv alone (what Python 3.13's venv writes itself)
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "nvidia-pytriton==0.7.0" "numpy<2" "torch==2.13.0" simplejpeg pillow
# The Python stub Triton starts must load this interpreter's libpython: bench.peers.pytriton_server
# sets LD_LIBRARY_PATH to it (sysconfig LIBDIR).
"$venv/bin/python" -c 'import pytriton, torch, numpy, simplejpeg; print("pytriton ok: torch", torch.__version__, "numpy", numpy.__version__)'
