"""One POST to TorchServe's inference API, with its key (re-read through `tskeys` when refused)."""

from __future__ import annotations

import json
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


class Keys:
    """The inference key from `key_file.json`, read when first needed and again when refused.

    A file that is missing (token authorization off, or TorchServe not started yet) means no key
    is sent; it is looked for again whenever the server refuses a request.
    """

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._key: Key | None = None
        self._lock = threading.Lock()

    def current(self) -> Key | None:
        with self._lock:
            if self._key is None and self._path is not None and self._path.is_file():
                try:
                    self._key = Key(self._path)
                except KeyFileError:
                    self._key = None
            return self._key


class Client:
    """Posts units for one sender thread (one HTTP connection, kept alive)."""

    def __init__(self, url: str, model: str, keys: Keys) -> None:
        self._url = f"{url.rstrip('/')}/predictions/{model}"
        self._keys = keys
        self._session = requests.Session()

    def post(self, body: bytes, headers: dict[str, str]) -> Answer:
        """One request (and one more with the re-read key if the key was refused)."""
        key = self._keys.current()

        def send(value: str | None) -> Answer:
            auth = {"Authorization": f"Bearer {value}"} if value else {}
            try:
                response = self._session.post(self._url, data=body, headers={**headers, **auth},
                                              timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S))
            except requests.RequestException as exc:
                return Answer(None, None, f"{type(exc).__name__}: TorchServe at {self._url} did not answer")
            return _answer(response)

        try:
            if key is None:
                return send(None)
            return key.call(send, lambda a: a.status is not None and is_invalid_key(a.status, a.error or
                                                                                    json.dumps(a.body)))
        except KeyFileError as exc:  # TorchServe restarting: its key file is gone for a moment
            return Answer(None, None, f"KeyFileError: {exc}")

    def close(self) -> None:
        self._session.close()


def _answer(response: requests.Response) -> Answer:
    try:
        body = response.json()
    except ValueError:
        return Answer(response.status_code, None, response.text[:500])
    return Answer(response.status_code, body if isinstance(body, dict) else {"value": body})
