#!/usr/bin/env bash
# The tests that need torchvision (tests/vision, and the detection tests again with torchvision's
# NMS), in .venv-vision: torchvision 0.28 imports only beside PyPI's build of torch 2.13 (the one
# users get, with its CUDA libraries: about 5 GB), not beside the CPU-only build scripts/setup.sh
# installs. Arguments go to pytest, e.g. scripts/vision.sh -x -k classifier; `--install-only`
# installs and runs nothing (test.sh does it beside its own install and the lint).
# VISION_PIP_ISOLATED=1 makes pip ignore this machine's pip configuration (CI sets it, where that
# configuration points at a local CPU-only torch).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-vision"
stamp="$venv/.installed"
pip_env=()
[[ ${VISION_PIP_ISOLATED:-0} == 1 ]] && pip_env=(env -u PIP_FIND_LINKS -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null)
if [[ ! -f $stamp || $root/pyproject.toml -nt $stamp || $0 -nt $stamp ]]; then
  [[ -x $venv/bin/python ]] || { echo "vision: creating $venv" >&2; python3 -m venv "$venv"; }
  echo "vision: installing torch 2.13 and torchvision 0.28 from PyPI, then the project (once)" >&2
  "${pip_env[@]}" "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --index-url https://pypi.org/simple "torch==2.13.0" "torchvision==0.28.0"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$root[test]"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps facenet-pytorch==2.6.0
  "$venv/bin/python" -c "import torchvision.ops" || {
    echo "vision: torchvision does not import beside this torch; with a local CPU-only torch in pip's" \
         "configuration, run with VISION_PIP_ISOLATED=1" >&2
    exit 1
  }
  touch "$stamp"
fi
[[ ${1:-} == --install-only ]] && exit 0
# shellcheck disable=SC1091
. "$venv/bin/activate"
cd "$root"
exec python -m pytest tests/vision tests/unit/test_detection.py tests/unit/test_task_doors.py tests/unit/test_non_finite.py "$@"
