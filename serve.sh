#!/usr/bin/env bash
# Serves the demo models: installs what is missing, builds the archives, starts TorchServe with
# config.properties and video-keys beside it (renews the keys in key_file.json before they expire;
# logs/keys.log), waits until every model is ready and prints a working curl.
#   ./serve.sh         (re)start        ./serve.sh stop         stop both
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
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

if [[ ${1:-} == stop ]]; then
  stop_keys
  exec torchserve --stop
fi
stop_keys
torchserve --stop >/dev/null 2>&1 || true
./archive.sh
mkdir -p logs
torchserve --start --ncs --ts-config config.properties >logs/console.log 2>&1
nohup python -m tskeys.rotate --config config.properties --key-file key_file.json --pid-file "$keys_pid" \
  >>logs/keys.log 2>&1 </dev/null &

python - <<'PY'
import json, sys, time, urllib.request
from tskeys import KeyFileError, read_key
from tskeys.settings import Settings, read_properties

def get(url, key):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.load(answer)

deadline = time.monotonic() + 180
while time.monotonic() < deadline:
    try:
        key = read_key("key_file.json", "management", settle_s=0)
        properties = read_properties("config.properties")
        management = Settings.from_properties(properties).management_url
        models = [m.removesuffix(".mar") for m in properties["load_models"].split(",")]
        ready = [get(f"{management}/models/{m}", key)[0]["workers"] for m in models]
        if all(w and all(x["status"] == "READY" for x in w) for w in ready):
            break
    except (OSError, ValueError, KeyError, IndexError, KeyFileError):
        pass
    time.sleep(0.5)
else:
    sys.exit("serve.sh: TorchServe did not become ready in 180 s; see logs/ts_log.log and logs/model_log.log")
PY

cat <<MSG
TorchServe is serving frame_quality, frame_quality_realtime (low-latency lane) and fixed_batch_cnn
on http://127.0.0.1:8080 (metrics on :8082).
Try:
  curl -H "Authorization: Bearer \$(python3 -c 'import json; print(json.load(open("key_file.json"))["inference"]["key"])')" \\
       -H "Content-Type: image/png" --data-binary @data/images/chelsea.png \\
       http://127.0.0.1:8080/predictions/frame_quality
Stop it with: ./serve.sh stop
MSG
