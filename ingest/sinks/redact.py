"""Keeping credentials inside the process: every text that leaves it goes through `Redactor`.

Secrets are the passwords of URLs (and their whole `user:password`) and every value taken from the
environment (`${CAM7_URL}`); they are replaced by `***` wherever they appear (logs, results, error
messages), also as JSON writes them (`\"`, `\u00e9`). A user name is masked only inside a URL's
userinfo (`rtsp://***@host`), never as a bare word: a user named `camera` or `event` would
otherwise mask the bridge's own keys in every line.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable

MASK = "***"
# scheme://userinfo@ : the userinfo part, whatever it holds (also when no secret is registered).
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s'\"]+)@")
# Short secrets (a one-letter user) would mask random letters of every message: masked only in URLs.
_MIN_LITERAL = 3


class Redactor:
    """Replaces registered secrets, and any URL userinfo, by `***`. Thread-safe."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: frozenset[str] = frozenset()
        self.update(secrets)

    def update(self, secrets: Iterable[str]) -> None:
        """Adds `secrets` (kept: a removed camera's password must stay masked in late messages)."""
        with self._lock:
            given = [s for s in secrets if len(s) >= _MIN_LITERAL]
            # Lines are redacted as JSON text, where `"`, `\\` and non-ASCII characters are escaped.
            self._secrets = self._secrets | {*given, *(json.dumps(s)[1:-1] for s in given)}

    def __call__(self, text: str) -> str:
        """`text` with every secret and URL userinfo masked."""
        text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
        for secret in sorted(self._secrets, key=len, reverse=True):  # longest first: a URL before its parts
            text = text.replace(secret, MASK)
        return text


def url_secrets(url: str) -> list[str]:
    """The password and the whole `user:password` of `url` (percent-encoded and not); [] without
    a password. Not the user alone: a bare word that may be any key or value of a line (`camera`,
    `event`); in URLs the userinfo is masked whatever it holds."""
    from urllib.parse import unquote, urlsplit

    userinfo, at, _ = urlsplit(url).netloc.rpartition("@")
    _, colon, password = userinfo.partition(":")
    if not at or not colon or not password:
        return []
    parts = [userinfo, password]
    return [p for p in {*parts, *map(unquote, parts)} if p]


class RedactingFilter(logging.Filter):
    """A logging filter that renders each record and masks secrets in the text (and traceback)."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self._redact(record.getMessage())
        record.args = None
        if record.exc_info:
            import traceback

            record.msg += "\n" + self._redact("".join(traceback.format_exception(*record.exc_info)))
            record.exc_info = None
            record.exc_text = None
        return True
