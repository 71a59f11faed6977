#!/usr/bin/env bash
# Runs the whole test suite (lint and types, then unit, integration, end-to-end with a real
# TorchServe). Arguments go to pytest alone, without the lint, e.g. ./test.sh tests/unit -x
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
. scripts/setup.sh
if (($# == 0)); then
  scripts/lint.sh
fi
exec python -m pytest "$@"
