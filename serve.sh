#!/usr/bin/env bash
# Serves the demo models: installs what is missing, builds the archives, starts TorchServe with
# config.properties, waits until every model is ready and prints a working curl.
#   ./serve.sh         (re)start        ./serve.sh stop         stop
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
. scripts/setup.sh

if [[ ${1:-} == stop ]]; then
  exec torchserve --stop
fi
torchserve --stop >/dev/null 2>&1 || true
./archive.sh
mkdir -p logs
torchserve --start --ncs --ts-config config.properties >logs/console.log 2>&1

python - <<'PY'
import json, sys, time, urllib.request

def get(url, key):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.load(answer)

deadline = time.monotonic() + 180
while time.monotonic() < deadline:
    try:
        keys = json.load(open("key_file.json"))
        text = open("config.properties").read().replace("\\\n", "")
        line = next(l for l in text.splitlines() if l.startswith("load_models="))
        models = [m.removesuffix(".mar") for m in line.split("=", 1)[1].split(",")]
        ready = [get(f"http://127.0.0.1:8081/models/{m}", keys["management"]["key"])[0]["workers"]
                 for m in models]
        if all(w and all(x["status"] == "READY" for x in w) for w in ready):
            break
    except (OSError, ValueError, KeyError, IndexError):
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
