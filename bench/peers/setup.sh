#!/usr/bin/env bash
# Makes a peer's own venv for `python -m bench.engines`, away from the project's .venv:
#   pytriton  NVIDIA PyTriton 0.7 (Triton Inference Server in a wheel); it needs numpy < 2, the
#             project's .venv has numpy 2
#   litserve  LitServe 0.2; its FastAPI/uvicorn pins never reach the project's .venv (Ray Serve and
#             TorchServe's tools live there)
# Torch is the same CPU wheel as the project's (`pip install torch==2.13.0`).
#
#   bash bench/peers/setup.sh pytriton|litserve [VENV]     (default: .venv-PEER at the repo root)
#
# Environment: PYTHON (default: the interpreter the project's .venv was made from, else python3).
set -euo pipefail

peer="${1:?usage: bash bench/peers/setup.sh pytriton|litserve [VENV]}"
case $peer in
  # The Python stub Triton starts must load this interpreter's libpython:
  # bench.peers.pytriton_server sets LD_LIBRARY_PATH to it (sysconfig LIBDIR).
  pytriton) pins=("nvidia-pytriton==0.7.0" "numpy<2" pillow) check="pytriton" ;;
  litserve) pins=("litserve>=0.2.19,<0.3" numpy python-multipart) check="litserve" ;;
  *) echo "setup.sh: unknown peer $peer (pytriton or litserve)" >&2; exit 2 ;;
esac
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${2:-$here/.venv-$peer}"
base="${PYTHON:-}"
if [[ -z $base && -f $here/.venv/pyvenv.cfg ]]; then
  base="$(sed -n 's/^executable = //p' "$here/.venv/pyvenv.cfg")"
fi
base="${base:-python3}"

"$base" -m venv "$venv"
echo '*' > "$venv/.gitignore"  # git leaves the venv alone (what Python 3.13's venv writes itself)
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "${pins[@]}" "torch==2.13.0" simplejpeg
"$venv/bin/python" -c "import $check, torch, numpy, simplejpeg; print('$peer ok: torch', torch.__version__, 'numpy', numpy.__version__)"
