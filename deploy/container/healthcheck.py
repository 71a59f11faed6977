#!/usr/bin/env python3
"""Container health check: GET /ping on TorchServe's inference port, exit 0 when Healthy.

The port comes from the effective config (run/config.properties, written by the entrypoint).
With token authorization on, /ping needs the inference key: it is read from key_file.json, which
TorchServe writes in its working directory. That key expires after token_expiration_min; an
expired key is rotated through TorchServe's own token API (management port, loopback, with the
non-expiring API key), which rewrites key_file.json -- the same rotation clients must follow.
A key that has not expired is never rotated, so the check never invalidates a working client key.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

HOME = Path(os.environ.get("VIDEO_TS_HOME", "/home/model-server"))
CONFIG = HOME / "run" / "config.properties"
KEY_FILE = HOME / "key_file.json"


def properties(path: Path) -> dict[str, str]:
    """The last value of each key of a Java properties file (continuation lines joined)."""
    values: dict[str, str] = {}
    logical = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not logical and (not stripped or stripped[0] in "#!"):
            continue
        if stripped.endswith("\\"):
            logical += stripped[:-1]
            continue
        logical += stripped
        key, _, value = logical.partition("=")
        values[key.strip()] = value.strip()
        logical = ""
    return values


def local(address: str) -> str:
    """An address as seen from inside the container (0.0.0.0 -> 127.0.0.1)."""
    return address.replace("://0.0.0.0", "://127.0.0.1").rstrip("/")


def get(url: str, key: str | None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=4) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def expired(entry: dict) -> bool:
    """Whether a key_file.json entry's "expiration time" (Java Instant, ns digits) has passed."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z", entry.get("expiration time", ""))
    if not match:
        return False
    # Older Pythons' fromisoformat takes at most 6 fraction digits; Java writes up to 9.
    stamp = datetime.strptime(match[1] + "." + (match[2] or "0")[:6].ljust(6, "0"), "%Y-%m-%dT%H:%M:%S.%f")
    return stamp.replace(tzinfo=timezone.utc) <= datetime.now(timezone.utc)


def main() -> int:
    config = properties(CONFIG)
    ping = local(config.get("inference_address", "http://127.0.0.1:8080")) + "/ping"
    keys = None
    if config.get("disable_token_authorization", "false").lower() != "true":
        try:
            keys = json.loads(KEY_FILE.read_text())
        except (OSError, ValueError):
            print(f"healthcheck: {KEY_FILE} not written yet", file=sys.stderr)
            return 1
    status, body = get(ping, keys and keys["inference"]["key"])
    if status == 400 and keys and expired(keys["inference"]):
        management = local(config.get("management_address", "http://127.0.0.1:8081"))
        get(management + "/token?type=inference", keys["API"]["key"])
        keys = json.loads(KEY_FILE.read_text())
        status, body = get(ping, keys["inference"]["key"])
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
