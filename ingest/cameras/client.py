"""One POST to TorchServe's inference API, with its key (re-read through `tskeys` when refused)."""

from __future__ import annotations

import json
import logging
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tskeys import Key, KeyFileError, is_invalid_key

#: Answers worth sending again: the queue is full, the model is not (yet) there after a restart.
RETRYABLE = (503, 404)
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 60.0

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Answer:
    """TorchServe's answer, or None for `status` when nothing answered.

    Attributes:
        status: the HTTP status, or None (connection refused, reset, timed out).
        body: the parsed JSON body (None when it was not JSON).
        error: why nothing answered, or the text of a body that was not JSON.
    """

    status: int | None
    body: dict[str, Any] | None
    error: str = ""

    @property
    def retryable(self) -> bool:
        return self.status is None or self.status in RETRYABLE

    @property
    def refused_key(self) -> bool:
        """Whether TorchServe refused the key (400 `InvalidKeyException`)."""
        # (status first: a 200's body, a segment of answers, is not turned back into text for it)
        return self.status == 400 and is_invalid_key(self.status, self.error or json.dumps(self.body))


class Keys:
    """The inference key, read when first needed and again whenever the server refuses it.

    `path` is TorchServe's `key_file.json` (renewed keys are picked up through `tskeys`), or a
    file holding only the token (a mounted Kubernetes Secret, re-read when refused). A file that
    is missing (token authorization off, TorchServe not started yet) means no key is sent.
    """

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._key: Key | None = None
        self._lock = threading.Lock()
        self._refused = False  # whether the last answer refused the key, read again

    def judged(self, refused: bool) -> None:
        """Takes an answer's verdict on the key: logs once when it stays refused after the file was
        read again (every answer is 400 until a good key is there), and once when one is accepted."""
        with self._lock:
            if refused == self._refused:
                return
            self._refused, held = refused, self._key is not None
        where = self._path or "nowhere (no --token-file)"
        if refused and not held:
            logger.warning("TorchServe wants a key and %s holds none (missing or empty): every camera is answered "
                           "400 until it does (--token-file: TorchServe's key_file.json)", where)
        elif refused:
            logger.warning("TorchServe refuses the key from %s, also read again: it expired or is wrong, and every "
                           "camera is answered 400 until a good key is there (TorchServe's keys lapse after "
                           "token_expiration_min, 60 minutes by default: run video-keys beside it, as ./serve.sh "
                           "does; docs/keys.md)", where)
        else:
            logger.info("TorchServe accepts the key from %s again", where)

    def current(self) -> str | None:
        """The key to send now (None: none)."""
        with self._lock:
            if self._key is None:
                self._key = self._load()
            return None if self._key is None else self._key.value()

    def refreshed(self, refused: str | None) -> str | None:
        """The key to retry with after `refused` was refused: the file read again.

        Raises:
            KeyFileError: `key_file.json` stays unreadable (TorchServe restarting).
        """
        with self._lock:
            if self._key is not None and self._key.path is not None:
                return self._key.refresh(refused=refused)
            self._key = self._load()
            return None if self._key is None else self._key.value()

    def _load(self) -> Key | None:
        if self._path is None or not self._path.is_file():
            return None
        text = self._path.read_text().strip()
        if text.startswith("{"):
            return Key(self._path)
        return Key(token=text) if text else None


class Client:
    """Posts units for one sender thread (one HTTP connection, kept alive)."""

    def __init__(self, url: str, model: str, keys: Keys) -> None:
        self._url = f"{url.rstrip('/')}/predictions/{model}"
        self._keys = keys
        self._session = requests.Session()

    def post(self, body: bytes, headers: dict[str, str]) -> Answer:
        """One request, and one more with the key read again if the key was refused."""
        try:
            key = self._keys.current()
            answer = self._send(body, headers, key)
            if answer.refused_key:
                answer = self._send(body, headers, self._keys.refreshed(key))
            if answer.status is not None:
                self._keys.judged(answer.refused_key)
        except KeyFileError as exc:  # TorchServe restarting: its key file is gone for a moment
            return Answer(None, None, f"KeyFileError: {exc}")
        return answer

    def _send(self, body: bytes, headers: dict[str, str], key: str | None) -> Answer:
        auth = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            response = self._session.post(self._url, data=body, headers={**headers, **auth},
                                          timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S))
        except requests.RequestException as exc:
            return Answer(None, None, f"{type(exc).__name__}: TorchServe at {self._url} did not answer")
        return _answer(response)

    def close(self) -> None:
        self._session.close()


def _answer(response: requests.Response) -> Answer:
    """The response as an Answer; a body that is not strict JSON (RFC 8259) is a bad answer:
    no body, and why in `error`."""
    try:
        body = json.loads(response.content, parse_constant=_no_constant, parse_float=_finite_float)
    except NonFinite as exc:
        return Answer(response.status_code, None, f"NonFinite: the answer holds {exc}: a number JSON cannot "
                                                  "hold (the model or handler gave a NaN or infinite value)")
    except ValueError:
        return Answer(response.status_code, None, response.text[:500])
    return Answer(response.status_code, body if isinstance(body, dict) else {"value": body})


class NonFinite(ValueError):
    """An answer holds NaN, Infinity or a number too large for a float (not JSON: RFC 8259)."""


def _no_constant(name: str) -> Any:
    raise NonFinite(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NonFinite(f"{text[:40]} (beyond a float's range)")
    return value
