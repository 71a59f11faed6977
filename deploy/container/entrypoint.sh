#!/usr/bin/env bash
# Starts TorchServe in the foreground with the repo's config.properties plus one overlay
# (overlays/$VIDEO_TS_OVERLAY.properties; a later key wins in a Java properties file), and
# video-keys beside it, which renews the keys in key_file.json before they expire (logs/keys.log);
# stops both cleanly on SIGTERM (docker stop, pod deletion). Extra arguments go to torchserve.
set -euo pipefail
cd "${VIDEO_TS_HOME:-/home/model-server}"
overlay="overlays/${VIDEO_TS_OVERLAY:-docker}.properties"
[[ -f $overlay ]] || { echo "entrypoint: no overlay $overlay (VIDEO_TS_OVERLAY=docker|kubernetes)" >&2; exit 2; }
config=run/config.properties
{ cat config.properties; echo; echo "# --- overlay: $overlay"; cat "$overlay"; } >"$config"

torchserve --start --foreground --ncs --ts-config "$config" "$@" &
pid=$!
PYTHONPATH="${VIDEO_KEYS_LIB:-/usr/local/lib/video-keys}" python -m tskeys.rotate --config "$config" \
  --key-file key_file.json --pid-file run/video-keys.pid >>logs/keys.log 2>&1 &
keys=$!
trap 'kill -TERM "$keys" 2>/dev/null || true; torchserve --stop || kill -TERM "$pid"; wait "$pid"; wait "$keys" || true' TERM INT
wait "$pid"
