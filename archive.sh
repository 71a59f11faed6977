#!/usr/bin/env bash
# Packages models with the video frame handler into model_store/.
#
#   ./archive.sh                                   the demo archives: frame_quality, its low-latency
#                                                  lane frame_quality_realtime, its stream lane
#                                                  frame_quality_stream, fixed_batch_cnn,
#                                                  face_detector (MTCNN)
#   ./archive.sh NAME MODEL_FILE CONFIG_YAML [VERSION] [--model-file MODULE.py]
#                                                  your own model: a TorchScript (.pt),
#                                                  torch.export (.pt2) or ONNX (.onnx) file, or with --model-file
#                                                  (one nn.Module class) its state dict (.pth,
#                                                  .pt), and a model-config YAML with a `handler:`
#                                                  section; its `labels:` file, beside the YAML,
#                                                  is packed too
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
  local name=$1 model=$2 config=$3 version=${4:-1.0} model_file=${5:-}
  [[ $name =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || die "invalid model name '$name': use letters, digits, _ . -"
  [[ -f $model ]] || die "model file not found: $model"
  [[ -f $config ]] || die "model-config YAML not found: $config"
  if [[ -n $model_file ]]; then
    [[ -f $model_file && $model_file == *.py ]] || die "--model-file $model_file: give the Python file that defines the model's nn.Module class"
    case $model in
      *.pth|*.pt|*.bin) ;;
      *) die "with --model-file, MODEL_FILE is the module's state dict (.pth or .pt from torch.save(model.state_dict()))" ;;
    esac
  else
    case $model in
      *.pt|*.ts|*.torchscript|*.pt2|*.onnx) ;;
      *) die "cannot package $model: use a TorchScript (.pt), torch.export (.pt2) or ONNX (.onnx) file, or a state dict with --model-file" ;;
    esac
  fi
  # Check the handler: section now rather than at worker start; it names the labels file.
  local labels
  # An ONNX graph's input sets the batch and size: a setting that contradicts it fails here too.
  labels="$(PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$python" -c '
import sys, yaml
from handler.config import HandlerConfig
from handler.errors import CannotLoad, ConfigError
handler = (yaml.safe_load(open(sys.argv[1])) or {}).get("handler")
try:
    if sys.argv[2].endswith(".onnx"):
        from handler.onnx_model import settings_for
        handler = settings_for(sys.argv[2], handler)
    print(HandlerConfig.from_mapping(handler).labels or "")
except (CannotLoad, ConfigError) as err:
    sys.exit(f"archive.sh: {err}")
' "$config" "$model")" || die "fix the handler: section of $config or the model"

  local stage
  stage="$(mktemp -d)"
  # The handler package, subpackages included (the demo models' code is not needed to serve).
  (cd "$here" && find handler -name '*.py' -not -path 'handler/models/*' -exec cp --parents -t "$stage" {} +)
  if [[ -n $labels ]]; then
    local beside
    beside="$(dirname "$config")/$labels"
    [[ -f $beside ]] || die "handler.labels = $labels: put that file beside $config"
    cp "$beside" "$stage/"
  fi
  mkdir -p "$store"
  local extra=()
  [[ -n $model_file ]] && extra=(--model-file "$model_file")
  torch-model-archiver --model-name "$name" --version "$version" \
    --serialized-file "$model" --handler "$handler_file" "${extra[@]}" \
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
  package face_detector "$build/face_detector.pt" "$here/handler/models/face_detector.yaml"
elif [[ $# -ge 3 ]]; then
  args=() model_file=""
  while (($#)); do
    case $1 in
      --model-file) (($# >= 2)) || die "--model-file needs a file"; model_file=$2; shift 2 ;;
      --model-file=*) model_file=${1#*=}; shift ;;
      *) args+=("$1"); shift ;;
    esac
  done
  ((${#args[@]} >= 3 && ${#args[@]} <= 4)) || { sed -n '2,14p' "$0" >&2; exit 2; }
  package "${args[0]}" "${args[1]}" "${args[2]}" "${args[3]:-1.0}" "$model_file"
else
  sed -n '2,14p' "$0" >&2
  exit 2
fi
