#!/usr/bin/env bash
# Runs the whole test suite (lint and types, then unit, integration, end-to-end with a real
# TorchServe, then scripts/vision.sh: the real torchvision models, in .venv-vision). Arguments go
# to pytest in .venv alone, without the lint and the vision tests, e.g. ./test.sh tests/unit -x
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
export EXTRAS=test,ray,onnx  # the Ray Serve engine's tests too (rayserve/), and ONNX Runtime's
. scripts/setup.sh
if (($# > 0)); then
  exec python -m pytest "$@"
fi
scripts/lint.sh
python -m pytest --ignore=tests/vision
scripts/vision.sh
