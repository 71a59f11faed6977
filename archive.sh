#!/usr/bin/env bash
# Packages models with the video frame handler into model_store/.
#
#   ./archive.sh                                   the demo archives: frame_quality, its low-latency
#                                                  lane frame_quality_realtime, its stream lane
#                                                  frame_quality_stream, fixed_batch_cnn
#   ./archive.sh NAME MODEL_FILE CONFIG_YAML [VERSION]
#                                                  your own model: a TorchScript (.pt) or
#                                                  torch.export (.pt2) file and a model-config
#                                                  YAML with a `handler:` section
# Environment: MODEL_STORE (default: model_store/ beside this script), PYTHON (default: python3),
# HANDLER_FILE (default: handler/service.py; a file defining one subclass of VideoFrameHandler).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
store="${MODEL_STORE:-$here/model_store}"
python="${PYTHON:-python3}"
handler_file="${HANDLER_FILE:-$here/handler/service.py}"

die() { echo "archive.sh: $*" >&2; exit 1; }

[[ -f $handler_file ]] || die "handler file not found: $handler_file"
command -v torch-model-archiver >/dev/null ||
  die "torch-model-archiver not found: pip install torch-model-archiver==0.12.0"

package() {
  local name=$1 model=$2 config=$3 version=${4:-1.0}
  [[ $name =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || die "invalid model name '$name': use letters, digits, _ . -"
  [[ -f $model ]] || die "model file not found: $model"
  [[ -f $config ]] || die "model-config YAML not found: $config"
  case $model in
    *.pt|*.ts|*.torchscript|*.pt2) ;;
    *) die "cannot package $model: use a TorchScript (.pt) or torch.export (.pt2) file" ;;
  esac
  # Check the handler: section now rather than at worker start.
  PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$python" -c '
import sys, yaml
from handler.config import HandlerConfig
HandlerConfig.from_mapping((yaml.safe_load(open(sys.argv[1])) or {}).get("handler"))
' "$config" || die "fix the handler: section of $config"

  local stage
  stage="$(mktemp -d)"
  # The handler package, subpackages included (the demo models' code is not needed to serve).
  (cd "$here" && find handler -name '*.py' -not -path 'handler/models/*' -exec cp --parents -t "$stage" {} +)
  mkdir -p "$store"
  torch-model-archiver --model-name "$name" --version "$version" \
    --serialized-file "$model" --handler "$handler_file" \
    --extra-files "$stage" --config-file "$config" \
    --export-path "$store" --force
  rm -rf "$stage"
  echo "archive.sh: wrote $store/$name.mar"
}

if [[ $# -eq 0 ]]; then
  build="$(mktemp -d)"
  trap 'rm -rf "$build"' EXIT
  PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$python" -m handler.models.build "$build"
  package frame_quality "$build/frame_quality.pt" "$here/handler/models/frame_quality.yaml"
  package frame_quality_realtime "$build/frame_quality.pt" "$here/handler/models/frame_quality_realtime.yaml"
  package frame_quality_stream "$build/frame_quality.pt" "$here/handler/models/frame_quality_stream.yaml"
  package fixed_batch_cnn "$build/fixed_batch_cnn.pt2" "$here/handler/models/fixed_batch_cnn.yaml"
elif [[ $# -ge 3 && $# -le 4 ]]; then
  package "$@"
else
  sed -n '2,10p' "$0" >&2
  exit 2
fi
