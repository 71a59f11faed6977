# Sourced by serve.sh and test.sh: a virtual environment in .venv with everything the project needs.
# TORCH_SPEC chooses the torch build (default torch==2.13.0; a CUDA host may want another);
# EXTRAS the project's extras (default test; test.sh and `serve.sh --engine ray` add ray).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ ! -x $root/.venv/bin/python ]]; then
  echo "setup: creating $root/.venv" >&2
  python3 -m venv "$root/.venv"
fi
# shellcheck disable=SC1091
. "$root/.venv/bin/activate"
extras="${EXTRAS:-test}"
stamp="$root/.venv/.installed-${extras//,/-}"
if [[ ! -f $stamp || $root/pyproject.toml -nt $stamp ]]; then
  echo "setup: installing torch and the project's dependencies (once)" >&2
  python -m pip install --quiet --disable-pip-version-check "${TORCH_SPEC:-torch==2.13.0}"
  python -m pip install --quiet --disable-pip-version-check -e "$root[$extras]"
  # The face_detector demo's trained MTCNN weights ship in this wheel (MIT); its pinned
  # dependencies (an old torch among them) must not be installed, and nothing else of it is used.
  python -m pip install --quiet --disable-pip-version-check --no-deps facenet-pytorch==2.6.0
  touch "$stamp"
fi
if ! java -version >/dev/null 2>&1; then
  echo "setup: TorchServe needs Java 17; on Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless" >&2
  exit 1
fi
