#!/usr/bin/env bash
# Run HERE (a machine that reaches the package registry), in the checkout the device call sends,
# before the one device call that runs `python -m bench.gpu_probe` (docs/gpu.md).
#
# The GPU host has Python 3.12, torch, torchvision, numpy, Pillow and PyYAML, and nothing can be
# fetched there. This downloads the cp312 manylinux x86_64 wheels of what the probe needs
# besides (PyAV, whose wheel carries FFmpeg with NVDEC's cuda hwaccel and libx264; simplejpeg)
# into .whl/ (ignored by git), lists each wheel's Requires-Dist, and prints the device command
# and its carry list. Extra requirements (NAME==VERSION) can follow on the command line.
#
#   bash bench/gpu_probe/prepare.sh                      # av and simplejpeg at the versions installed here
#   AV_VERSION=18.1.0 bash bench/gpu_probe/prepare.sh torchserve==0.12.0
set -euo pipefail

cd "$(dirname "$0")/../.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}

installed() {  # the version of $1 installed for $PY, or $2
  "$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1" 2>/dev/null || echo "$2"
}
AV_VERSION=${AV_VERSION:-$(installed av 18.1.0)}
SIMPLEJPEG_VERSION=${SIMPLEJPEG_VERSION:-$(installed simplejpeg 1.9.0)}
WANTED=("av==$AV_VERSION" "simplejpeg==$SIMPLEJPEG_VERSION" "$@")

rm -rf .whl
mkdir -p .whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d .whl "${WANTED[@]}"

echo "wheels in .whl/ (Requires-Dist without extras; the GPU host has numpy, Pillow, PyYAML, torch):"
for wheel in .whl/*.whl; do
  needs=$("$PY" - "$wheel" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
print(", ".join(l.split(":", 1)[1].strip() for l in lines
                if l.startswith("Requires-Dist:") and "extra ==" not in l) or "none")
EOF
)
  printf '  %-60s %6s  needs: %s\n' "$(basename "$wheel")" "$(du -h "$wheel" | cut -f1)" "$needs"
done
echo "total: $(du -ch .whl/*.whl | tail -1 | cut -f1) (the working tree that travels is limited to 64 MiB)"

cat <<'EOF'

The device call (one command, timeout_s 300, carry [".whl"]):

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; PYTHONUNBUFFERED=1 python3 -m bench.gpu_probe --out $OUT/gpu_probe.json
EOF
