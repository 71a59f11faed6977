"""The web view's token: read from a file shaped like TorchServe's `key_file.json`, or made at start.

    {"web": {"key": "<token>"}}

`--web-token-file FILE` reads FILE, or writes a new token to it (mode 0600) when it does not exist;
without it a token is made for this run only. Either way the token is compared in constant time.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from ingest.config import ConfigError

MIN_LENGTH = 16


@dataclass(frozen=True, slots=True)
class Token:
    """The token and where it came from (`made`: new this run, to be printed once)."""

    value: str
    made: bool
    path: Path | None = None

    def matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.value.encode())


def load(path: Path | None) -> Token:
    """The token of `path` (made and written there if the file does not exist), or a new one.

    Raises:
        ConfigError: an unreadable file, or one without a usable `web.key`, naming the fix.
    """
    if path is None:
        return Token(secrets.token_urlsafe(24), made=True)
    if not path.exists():
        value = secrets.token_urlsafe(24)
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(handle, "w") as out:
            json.dump({"web": {"key": value}}, out)
        return Token(value, made=True, path=path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--web-token-file {path}: cannot read it ({exc}): write {{\"web\": {{\"key\": \"...\"}}}} "
                          "or remove it to have one made") from None
    key = data.get("web", {}).get("key") if isinstance(data, dict) and isinstance(data.get("web"), dict) else None
    if not isinstance(key, str) or len(key) < MIN_LENGTH:
        raise ConfigError(f"--web-token-file {path}: give {{\"web\": {{\"key\": \"...\"}}}} with a key of at least "
                          f"{MIN_LENGTH} characters (or remove the file to have one made)")
    return Token(key, made=False, path=path)
