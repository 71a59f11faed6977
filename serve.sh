#!/usr/bin/env bash
# Serves the demo models: installs what is missing, builds the archives, starts TorchServe with
# config.properties and video-keys beside it (renews the keys in key_file.json before they expire;
# logs/keys.log), waits until every model is ready and prints a working curl.
#   ./serve.sh         (re)start        ./serve.sh stop         stop both (and Ray Serve, if started)
#   ./serve.sh --engine ray             the same archives on Ray Serve instead (docs/engines.md):
#                                       a one-node Ray on 127.0.0.1, HTTP on port 8000
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
engine=torchserve
if [[ ${1:-} == --engine ]]; then
  engine=${2:-}
  [[ $engine == torchserve || $engine == ray ]] || { echo "serve.sh: --engine torchserve or ray" >&2; exit 2; }
fi
# What serving needs and, on TorchServe, the live view's demo printed at the end (video-ingest).
if [[ $engine == ray ]]; then export EXTRAS=ray; else export EXTRAS=ingest; fi
. scripts/setup.sh

keys_pid=logs/video-keys.pid
stop_keys() {
  local pid
  pid="$(cat "$keys_pid" 2>/dev/null)" || return 0
  if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$keys_pid"
}

stop_ray() {  # the node `video-ray start` made, when one runs
  if python -c 'import socket, sys; sys.exit(socket.socket().connect_ex(("127.0.0.1", 6390)) != 0)' 2>/dev/null &&
     python -c 'import rayserve.cli, ray' 2>/dev/null; then
    python -m rayserve stop
  fi
}

if [[ ${1:-} == stop ]]; then
  stop_keys
  stop_ray
  exec torchserve --stop
fi
if [[ $engine == ray ]]; then
  ./archive.sh
  # What the archives served need besides Ray (onnx for an ONNX graph), installed before they load.
  needed=$(python -m rayserve extras --config config.properties)
  if [[ -n $needed ]]; then
    EXTRAS=ray,$needed
    . scripts/setup.sh
  fi
  mkdir -p logs
  if ! python -m rayserve start --config config.properties 2>logs/ray.log; then
    tail -n 20 logs/ray.log >&2
    exit 1
  fi
  grep -h "^WARNING rayserve.plan: .*has no Ray Serve meaning" logs/ray.log | sed 's/^WARNING rayserve.plan: /warning: /' >&2 || true
  exit 0
fi
stop_keys
torchserve --stop >/dev/null 2>&1 || true
./archive.sh
# The live view's demo clip (docs/ingest.md, "Live view and zone editor"), made once.
[[ -f data/demo.ts ]] || python scripts/demo_clip.py
mkdir -p logs
# VIDEO_TS_PORT_OFFSET moves every port, to run beside another TorchServe (the quick-start test).
config=config.properties
if [[ ${VIDEO_TS_PORT_OFFSET:-0} != 0 ]]; then
  config=logs/config.properties
  python -m tsutil.properties config.properties --port-offset "$VIDEO_TS_PORT_OFFSET" >"$config"
fi
torchserve --start --ncs --ts-config "$config" >logs/console.log 2>&1
nohup python -m tskeys.rotate --config "$config" --key-file key_file.json --pid-file "$keys_pid" \
  >>logs/keys.log 2>&1 </dev/null &
python -m tsutil.server wait "$config" --timeout 180
inference=$(python -m tsutil.properties "$config" --get inference_address)
metrics=$(python -m tsutil.properties "$config" --get metrics_address)

cat <<MSG
TorchServe is serving frame_quality, frame_quality_realtime (low-latency lane), frame_quality_stream
(gRPC stream lane), fixed_batch_cnn and face_detector on $inference (metrics on $metrics/metrics);
video-keys renews the keys in key_file.json before they expire (logs/keys.log).
Try:
  curl -H "Authorization: Bearer \$(python3 -c 'import json; print(json.load(open("key_file.json"))["inference"]["key"])')" \\
       -H "Content-Type: image/png" --data-binary @data/images/chelsea.png \\
       $inference/predictions/frame_quality
Watch face_detector track a face, and play the clip recorded each time it enters or leaves the
zone "left" (open the address it prints, then Recordings):
  .venv/bin/video-ingest --config scripts/demo.yaml --model face_detector --record recordings --web 127.0.0.1:8095
Stop it with: ./serve.sh stop
MSG
