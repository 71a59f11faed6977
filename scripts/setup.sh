# Sourced by serve.sh and test.sh: a virtual environment in .venv with the project and the extras
# they need. TORCH_SPEC chooses the torch build (default torch==2.13.0; a CUDA host may want
# another); EXTRAS the project's extras (default none: the base install; serve.sh asks for ingest,
# the live view's demo it prints; test.sh for test,ray,onnx).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ ! -x $root/.venv/bin/python ]]; then
  echo "setup: creating $root/.venv" >&2
  python3 -m venv "$root/.venv"
fi
# shellcheck disable=SC1091
. "$root/.venv/bin/activate"
extras="${EXTRAS:-}"
stamp="$root/.venv/.installed-${extras//,/-}"
# Up to date: installed with these extras since pyproject.toml changed, or installed since with
# others that include them (test includes ingest: serve.sh after test.sh installs nothing).
current=false
for installed in "$root"/.venv/.installed-*; do
  [[ -f $installed && ! $root/pyproject.toml -nt $installed ]] && current=true
done
if [[ ! -f $stamp || $root/pyproject.toml -nt $stamp ]] &&
   ! { $current && (cd "$root" && python -m tsutil.extras check "$extras" 2>/dev/null); }; then
  echo "setup: installing torch and the project's dependencies (once)" >&2
  python -m pip install --quiet --disable-pip-version-check "${TORCH_SPEC:-torch==2.13.0}"
  python -m pip install --quiet --disable-pip-version-check -e "$root${extras:+[$extras]}"
  # The face_detector demo's trained MTCNN weights ship in this wheel (MIT); its pinned
  # dependencies (an old torch among them) must not be installed, and nothing else of it is used.
  python -m pip install --quiet --disable-pip-version-check --no-deps facenet-pytorch==2.6.0
  touch "$stamp"
fi
if ! java -version >/dev/null 2>&1; then
  echo "setup: TorchServe needs Java 17; on Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless" >&2
  exit 1
fi
