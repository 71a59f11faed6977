#!/usr/bin/env bash
# Lint and types (configuration in pyproject.toml): ruff over the repo, mypy --strict on handler/.
# ./test.sh runs this first when it runs the whole suite (no arguments), so CI (.ci/run) does too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export EXTRAS="${EXTRAS:-test}"  # ruff and mypy (test.sh's own, which include these, when it runs this)
. scripts/setup.sh
ruff check .
mypy
