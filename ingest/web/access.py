"""The web view's token: read from a file shaped like TorchServe's `key_file.json`, or made at start.

    {"web": {"key": "<token>"}}

`--web-token-file FILE` reads FILE, or writes a new token to it (mode 0600) when it does not exist;
without it a token is made for this run only. Either way the token is compared in constant time.

A `<video>` or `<img>` cannot send the token: the API gives their addresses signed instead,
`?exp=<unix seconds>&sig=<HMAC-SHA256 keyed by the token over the path, its query and exp>`, valid
`SIGNED_S` (the token itself is never in an address, nor in a cookie).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlencode

from ingest.config import ConfigError

MIN_LENGTH = 16
#: Seconds a signed address stays valid.
SIGNED_S = 600


@dataclass(frozen=True, slots=True)
class Token:
    """The token and where it came from (`made`: new this run, to be printed once)."""

    value: str
    made: bool
    path: Path | None = None

    def matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.value.encode())

    def sign(self, path: str, params: Mapping[str, str], now: float) -> str:
        """`path?params` signed: with `exp` (`SIGNED_S` from `now`) and `sig`, usable without the token."""
        query = {**params, "exp": str(int(now) + SIGNED_S)}
        return f"{path}?{urlencode({**query, 'sig': self._mac(path, query)})}"

    def refuses(self, path: str, query: str, now: float) -> str | None:
        """Why `path?query` is no valid signed address, naming the fix; None when it is one."""
        given = parse_qs(query, keep_blank_values=True)
        if any(len(values) > 1 for values in given.values()) or not {"exp", "sig"} <= set(given):
            return "give the token, or the signed address (`exp` and `sig`, once each) the API gave"
        params = {key: values[0] for key, values in given.items() if key != "sig"}
        if not hmac.compare_digest(given["sig"][0].encode(), self._mac(path, params).encode()):
            return "this address's signature does not match it: ask the API for the address again"
        if not params["exp"].isdigit() or int(params["exp"]) < now:
            return f"this address expired (they last {SIGNED_S // 60} minutes): ask the API for the address again"
        return None

    def _mac(self, path: str, params: Mapping[str, str]) -> str:
        message = f"media\n{path}?{urlencode(sorted(params.items()))}"
        return hmac.new(self.value.encode(), message.encode(), hashlib.sha256).hexdigest()


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
