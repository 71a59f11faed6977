"""The key a producer sends, and the retry-once rule for refused keys (the file is read by `tsutil.keyfile`).

TorchServe 0.12 holds one inference and one management key (plus the never-expiring `API` key
that issues new ones). Checked by running it: a key is refused (HTTP 400 `InvalidKeyException`;
gRPC `PERMISSION_DENIED` "Token Authorization failed") once it expires *or* as soon as a new key of its
kind is issued, since the frontend keeps no old key; TorchServe rewrites the whole file in place
(not atomically) on every issue and deletes it at stop. So a producer keeps its key until it is
refused, then re-reads the file and retries once; `tskeys.rotate` keeps the file's keys valid.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

# The reader of key_file.json lives a floor below (tsutil.server reads keys too); its names stay
# importable from here, where producers have always found them.
from tsutil.keyfile import (
    KINDS,
    POLL_S,
    SETTLE_S,
    KeyEntry,
    KeyFile,
    KeyFileError,
    check_kind,
    parse_expiration,
    parse_key_file,
    read_key,
    read_key_file,
)

__all__ = ["GRPC_INVALID_KEY", "INVALID_KEY", "KINDS", "SETTLE_S", "Key", "KeyEntry", "KeyFile", "KeyFileError",
           "is_grpc_invalid_key", "is_invalid_key", "parse_expiration", "parse_key_file", "read_key",
           "read_key_file"]

INVALID_KEY = "InvalidKeyException"
GRPC_INVALID_KEY = "Token Authorization failed"

T = TypeVar("T")


def is_invalid_key(status: int, body: bytes | str) -> bool:
    """Whether an HTTP answer is TorchServe refusing the key (expired, replaced or unknown)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return status == 400 and INVALID_KEY in text


def is_grpc_invalid_key(code: object, details: str | None) -> bool:
    """Whether a gRPC error is TorchServe refusing the key ("Token Authorization failed").

    TorchServe 0.12 answers `PERMISSION_DENIED` (seen for `Predictions` and `StreamPredictions2`);
    its later sources use `CANCELLED`; both are taken, with the text.

    Args:
        code: the call's `grpc.StatusCode` (compared by name, so `grpc` stays optional here).
        details: the call's details text.
    """
    name = getattr(code, "name", str(code))
    return name in _GRPC_REFUSED and GRPC_INVALID_KEY in (details or "")


_GRPC_REFUSED = ("PERMISSION_DENIED", "UNAUTHENTICATED", "CANCELLED")


class Key:
    """A key to send: fixed (`token`), from `key_file.json` (`path`), or none.

    `value()` is cheap (cached); `refresh()` re-reads the file after the key was refused.
    Thread-safe: many senders share one.
    """

    def __init__(self, path: Path | None = None, token: str | None = None, kind: str = "inference") -> None:
        self._path = None if path is None else Path(path)
        self._kind = check_kind(kind)
        self._lock = threading.Lock()
        self._value = token if self._path is None else read_key(self._path, self._kind)

    @property
    def path(self) -> Path | None:
        return self._path

    def value(self) -> str | None:
        return self._value

    def refresh(self, refused: str | None = None, wait_s: float = SETTLE_S) -> str | None:
        """Re-reads the file (a fixed token stays as it is); returns the key to retry with.

        Args:
            refused: the key that was just refused. TorchServe swaps its key a moment before it
                rewrites the file, so while the file still holds `refused` it is re-read for up to
                `wait_s` (a key that expired with no rotation in sight stays and is returned).
            wait_s: how long to wait for the file to change.
        """
        if self._path is None:
            return self._value
        deadline = time.monotonic() + wait_s
        with self._lock:
            if refused is not None and self._value != refused:
                return self._value  # another sender already picked up the new key
            while True:
                value = read_key(self._path, self._kind)
                if value != refused or time.monotonic() >= deadline:
                    break
                time.sleep(POLL_S)
            self._value = value
            return value

    def headers(self, value: str | None = None) -> dict[str, str]:
        """`{"Authorization": "Bearer ..."}` for `value` (default: the current key), or nothing."""
        value = self._value if value is None else value
        return {"Authorization": f"Bearer {value}"} if value else {}

    def metadata(self, value: str | None = None) -> tuple[tuple[str, str], ...]:
        """The same as gRPC call metadata (`authorization`, lower case)."""
        value = self._value if value is None else value
        return (("authorization", f"Bearer {value}"),) if value else ()

    def call(self, send: Callable[[str | None], T], refused: Callable[[T], bool]) -> T:
        """`send(key)`; if `refused(answer)`, re-reads the file and sends once more.

        This is the retry-once rule: `send` may raise for other failures, which pass through.
        """
        value = self._value
        answer = send(value)
        if self._path is None or not refused(answer):
            return answer
        return send(self.refresh(refused=value))
