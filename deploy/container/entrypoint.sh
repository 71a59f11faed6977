#!/usr/bin/env bash
# Starts TorchServe in the foreground with the repo's config.properties plus one overlay
# (overlays/$VIDEO_TS_OVERLAY.properties; a later key wins in a Java properties file), and stops
# it cleanly on SIGTERM (docker stop, pod deletion). Extra arguments go to torchserve.
set -euo pipefail
cd "${VIDEO_TS_HOME:-/home/model-server}"
overlay="overlays/${VIDEO_TS_OVERLAY:-docker}.properties"
[[ -f $overlay ]] || { echo "entrypoint: no overlay $overlay (VIDEO_TS_OVERLAY=docker|kubernetes)" >&2; exit 2; }
config=run/config.properties
{ cat config.properties; echo; echo "# --- overlay: $overlay"; cat "$overlay"; } >"$config"

torchserve --start --foreground --ncs --ts-config "$config" "$@" &
pid=$!
trap 'torchserve --stop || kill -TERM "$pid"; wait "$pid"' TERM INT
wait "$pid"
