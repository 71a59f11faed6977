"""Reading keys from TorchServe's `key_file.json`, and the retry-once rule for expired keys.

TorchServe answers an expired or unknown key with 400 and a body naming `InvalidKeyException`;
a producer then re-reads the key file (rotated by the deployment) and retries once.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

INVALID_KEY = "InvalidKeyException"


class KeyFileError(RuntimeError):
    """`key_file.json` is missing or does not hold the key asked for."""


def read_key(path: Path, kind: str = "inference") -> str:
    """The `kind` key ("inference", "management" or "API") from `key_file.json`, read now.

    Raises:
        KeyFileError: naming the file and what to pass instead.
    """
    try:
        return str(json.loads(Path(path).read_text())[kind]["key"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise KeyFileError(f"cannot read the {kind} key from {path}: {exc!r}; pass the "
                           "key_file.json TorchServe wrote in its working directory") from None


def is_invalid_key(status: int, body: bytes | str) -> bool:
    """Whether an answer is TorchServe refusing the key (expired or unknown)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return status == 400 and INVALID_KEY in text


class Key:
    """A key to send: fixed (`token`), from `key_file.json` (`path`), or none.

    `value()` is cheap (cached); `refresh()` re-reads the file after an `InvalidKeyException`.
    Thread-safe: many senders share one.
    """

    def __init__(self, path: Path | None = None, token: str | None = None, kind: str = "inference") -> None:
        self._path = path
        self._kind = kind
        self._lock = threading.Lock()
        self._value = token if path is None else read_key(path, kind)

    def value(self) -> str | None:
        return self._value

    def refresh(self) -> str | None:
        """Re-reads the file (a fixed token stays as it is); returns the key to retry with."""
        if self._path is not None:
            with self._lock:
                self._value = read_key(self._path, self._kind)
        return self._value

    def headers(self) -> dict[str, str]:
        """`{"Authorization": "Bearer ..."}`, or nothing without a key."""
        value = self._value
        return {"Authorization": f"Bearer {value}"} if value else {}
