#!/usr/bin/env python3
"""Container health check: GET /ping on TorchServe's inference port, exit 0 when Healthy.

The port comes from the effective config (run/config.properties, written by the entrypoint).
With token authorization on, /ping needs the inference key, read from key_file.json with the
project's one reader (`tskeys`): a refused key is re-read once, as every producer does. Keys are
renewed by `video-keys` (started by the entrypoint), not here; with token authorization on, the
check also fails when `video-keys` is not running, since keys would then lapse within
`token_expiration_min`.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

HOME = Path(os.environ.get("VIDEO_TS_HOME", "/home/model-server"))
CONFIG = HOME / "run" / "config.properties"
KEY_FILE = HOME / "key_file.json"
KEYS_PID = HOME / "run" / "video-keys.pid"
sys.path.insert(0, os.environ.get("VIDEO_KEYS_LIB", "/usr/local/lib/video-keys"))  # tskeys in the image

from tskeys.keyfile import Key, KeyFileError, is_invalid_key, parse_expiration, read_key_file  # noqa: E402
from tskeys.settings import local, read_properties  # noqa: E402


def properties(path: Path) -> dict[str, str]:
    """The effective TorchServe settings (later keys win)."""
    return read_properties(path)


def get(url: str, key: str | None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=4) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def expired(entry: dict) -> bool:
    """Whether a key_file.json entry's "expiration time" (Java Instant) has passed."""
    when = parse_expiration(entry.get("expiration time"))
    return when is not None and when <= datetime.now(timezone.utc)


def rotator_running() -> bool:
    try:
        os.kill(int(KEYS_PID.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def main() -> int:
    config = properties(CONFIG)
    ping = local(config.get("inference_address", "http://127.0.0.1:8080")) + "/ping"
    if config.get("disable_token_authorization", "false").strip().lower() == "true":
        status, body = get(ping, None)
    else:
        if not rotator_running():
            print(f"healthcheck: video-keys is not running ({KEYS_PID}): keys would lapse", file=sys.stderr)
            return 1
        try:
            key = Key(KEY_FILE)
        except KeyFileError:
            print(f"healthcheck: {KEY_FILE} not written yet", file=sys.stderr)
            return 1
        status, body = key.call(lambda value: get(ping, value), lambda answer: is_invalid_key(*answer))
        if is_invalid_key(status, body) and read_key_file(KEY_FILE).inference.expires is not None:
            print("healthcheck: the inference key in key_file.json was refused; see logs/keys.log", file=sys.stderr)
    healthy = status == 200 and b"Healthy" in body
    if not healthy:
        print(f"healthcheck: GET {ping} -> {status} {body[:200]!r}", file=sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, KeyError, ValueError) as error:
        print(f"healthcheck: {error!r}", file=sys.stderr)
        sys.exit(1)
