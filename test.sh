#!/usr/bin/env bash
# Runs the whole test suite (unit, integration, end-to-end with a real TorchServe).
# Extra arguments go to pytest, e.g. ./test.sh tests/unit -x
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
. scripts/setup.sh
exec python -m pytest "$@"
