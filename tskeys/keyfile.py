"""Reading keys from TorchServe's `key_file.json`, and the retry-once rule for refused keys.

TorchServe 0.12 holds one inference and one management key (plus the never-expiring `API` key
that issues new ones). Checked by running it: a key is refused (HTTP 400 `InvalidKeyException`;
gRPC `PERMISSION_DENIED` "Token Authorization failed") once it expires *or* as soon as a new key of its
kind is issued, since the frontend keeps no old key; TorchServe rewrites the whole file in place
(not atomically) on every issue and deletes it at stop. So a producer keeps its key until it is
refused, then re-reads the file and retries once; `tskeys.rotate` keeps the file's keys valid.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

INVALID_KEY = "InvalidKeyException"
GRPC_INVALID_KEY = "Token Authorization failed"
KINDS = ("inference", "management", "API")
# TorchServe truncates then writes the file, and deletes it while it restarts: a read that finds
# it empty, partial or absent is retried for this long before it counts as an error.
SETTLE_S = 2.0
_POLL_S = 0.02

T = TypeVar("T")


class KeyFileError(ValueError):
    """`key_file.json` is missing or does not hold the key asked for (a bad `--token-file`, say)."""


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One key of the file.

    Attributes:
        key: the token to send as `Authorization: Bearer <key>`.
        expires: when TorchServe stops accepting it (its own clock, UTC); None for `API`.
    """

    key: str
    expires: datetime | None


@dataclass(frozen=True, slots=True)
class KeyFile:
    """The three keys of one `key_file.json`."""

    inference: KeyEntry
    management: KeyEntry
    api: KeyEntry

    def entry(self, kind: str) -> KeyEntry:
        """The entry for `kind` ("inference", "management" or "API")."""
        return {"inference": self.inference, "management": self.management, "API": self.api}[_kind(kind)]


def parse_expiration(text: str | None) -> datetime | None:
    """A Java `Instant` as TorchServe writes it (`2024-02-16T21:12:24.801167190Z`), in UTC.

    Raises:
        ValueError: naming the text.
    """
    if text is None:
        return None
    stamp, dot, fraction = text.rstrip("Z").partition(".")
    try:
        # Python's parser takes at most 6 fraction digits; Java writes up to 9.
        parsed = datetime.strptime(f"{stamp}.{(fraction if dot else '0')[:6]:0<6}", "%Y-%m-%dT%H:%M:%S.%f")
    except ValueError:
        raise ValueError(f"expiration time {text!r} is not an ISO-8601 instant") from None
    return parsed.replace(tzinfo=timezone.utc)


def parse_key_file(text: str) -> KeyFile:
    """The keys of a `key_file.json` text.

    Raises:
        ValueError: not JSON, or a key missing.
    """
    data = json.loads(text)
    try:
        entries = [KeyEntry(str(data[kind]["key"]), parse_expiration(data[kind].get("expiration time")))
                   for kind in KINDS]
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"key_file.json lacks {exc!s}") from None
    return KeyFile(*entries)


def read_key_file(path: Path, settle_s: float = SETTLE_S) -> KeyFile:
    """All keys of `path`, read now; an empty, partial or absent file is re-read for `settle_s`.

    Raises:
        KeyFileError: naming the file and what to pass instead.
    """
    return _settled(path, settle_s, "the keys", parse_key_file)


def read_key(path: Path, kind: str = "inference", settle_s: float = SETTLE_S) -> str:
    """The `kind` key ("inference", "management" or "API") from `key_file.json`, read now.

    Raises:
        KeyFileError: naming the file and what to pass instead.
    """
    kind = _kind(kind)

    def parse(text: str) -> str:
        try:
            return str(json.loads(text)[kind]["key"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"no {kind} key: {exc!r}") from None

    return _settled(path, settle_s, f"the {kind} key", parse)


def _settled(path: Path, settle_s: float, what: str, parse: Callable[[str], T]) -> T:
    deadline = time.monotonic() + settle_s
    while True:
        try:
            return parse(Path(path).read_text())
        except (OSError, ValueError) as exc:
            if time.monotonic() >= deadline:
                raise KeyFileError(f"cannot read {what} from {path}: {exc!r}; pass the key_file.json "
                                   "TorchServe wrote in its working directory") from None
        time.sleep(_POLL_S)


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
        self._kind = _kind(kind)
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
                time.sleep(_POLL_S)
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


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"key kind {kind!r}: use one of {', '.join(KINDS)}")
    return kind
