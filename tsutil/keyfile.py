"""TorchServe's `key_file.json`, read as TorchServe writes it: the one reader of the file.

TorchServe 0.12 keeps one inference and one management key there (plus the never-expiring `API`
key that issues new ones), rewrites the whole file in place (not atomically) whenever it issues a
key, and deletes it at stop; so a read that finds it empty, partial or absent is tried again for
a moment. What a refused key means, and the retry-once rule, are `tskeys`' (built on this).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

KINDS = ("inference", "management", "API")
# TorchServe truncates then writes the file, and deletes it while it restarts: a read that finds
# it empty, partial or absent is retried for this long before it counts as an error.
SETTLE_S = 2.0
#: How often a file still settling (or still holding a refused key) is read again.
POLL_S = 0.02

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
        return {"inference": self.inference, "management": self.management, "API": self.api}[check_kind(kind)]


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
    kind = check_kind(kind)

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
        time.sleep(POLL_S)


def check_kind(kind: str) -> str:
    """`kind` itself, if it is one of `KINDS`.

    Raises:
        ValueError: naming the kind and the ones there are.
    """
    if kind not in KINDS:
        raise ValueError(f"key kind {kind!r}: use one of {', '.join(KINDS)}")
    return kind
