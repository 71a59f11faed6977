#!/usr/bin/env bash
# Runs the whole test suite (lint and types, then unit, integration, end-to-end with a real
# TorchServe, then scripts/vision.sh: the real torchvision models, in .venv-vision). Arguments go
# to pytest in .venv alone, without the lint and the vision tests, e.g. ./test.sh tests/unit -x
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
export EXTRAS=test,ray,onnx  # the Ray Serve engine's tests too (rayserve/), and ONNX Runtime's
if (($# == 0)); then  # .venv-vision's install (minutes, mostly download) beside .venv's and the lint
  mkdir -p logs
  scripts/vision.sh --install-only >logs/vision-install.log 2>&1 &
  vision_install=$!
fi
. scripts/setup.sh
if (($# > 0)); then
  exec python -m pytest "$@"
fi
scripts/lint.sh
wait "$vision_install" || { cat logs/vision-install.log >&2; exit 1; }
python -m pytest --ignore=tests/vision
scripts/vision.sh
