"""TorchServe's management API, authenticated with the key from `key_file.json`.

Keys expire (`token_expiration_min`) and are renewed by `video-keys`, which rewrites the file; a
call whose key is refused (400 `InvalidKeyException`) re-reads the file and is sent once more
(`tskeys.Key.call`), so a sidecar that runs for days keeps working.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from tskeys import Key, KeyFileError, is_invalid_key

logger = logging.getLogger(__name__)


class ManagementError(RuntimeError):
    """The management API refused or failed a call."""


@dataclass(frozen=True, slots=True)
class Version:
    """One registered version of a model (from describe)."""

    version: str
    url: str
    batch_size: int
    max_batch_delay_ms: int
    pending: int
    workers_ready: int
    workers: int


class Management:
    """Calls to `management_url`; `key_file` is TorchServe's key_file.json (None: no auth)."""

    def __init__(self, management_url: str, key_file: Path | None, timeout_s: float = 120.0) -> None:
        self.url = management_url.rstrip("/")
        self.key_file = key_file
        self.timeout_s = timeout_s
        self.session = requests.Session()
        self._key: Key | None = None

    @property
    def key(self) -> Key:
        """The management key (read at the first call, re-read when refused)."""
        if self._key is None:
            try:
                self._key = Key(self.key_file, kind="management")
            except KeyFileError as exc:
                raise ManagementError(str(exc)) from None
        return self._key

    def _call(self, method: str, path: str, **params) -> requests.Response:
        key = self.key
        answer = key.call(
            lambda value: self.session.request(method, self.url + path, params=params or None,
                                               headers=key.headers(value), timeout=self.timeout_s),
            lambda a: is_invalid_key(a.status_code, a.content))
        if answer.status_code == 405:
            raise ManagementError(f"{method} {path}: 405, the model API is off; start TorchServe with "
                                  "enable_model_api=true (see docs/autotune.md)")
        if answer.status_code >= 400:
            raise ManagementError(f"{method} {path}: {answer.status_code} {answer.text.strip()}")
        return answer

    def versions(self, model: str) -> list[Version]:
        """Every registered version of `model`."""
        out = []
        for d in self._call("GET", f"/models/{model}/all").json():
            workers = d.get("workers") or []
            out.append(Version(str(d["modelVersion"]), d.get("modelUrl", ""), int(d["batchSize"]),
                               int(d["maxBatchDelay"]), int((d.get("jobQueueStatus") or {}).get("pendingRequests", 0)),
                               sum(w.get("status") == "READY" for w in workers), len(workers)))
        return out

    def default(self, model: str) -> Version:
        """The version `/predictions/{model}` goes to."""
        d = self._call("GET", f"/models/{model}").json()[0]
        return next(v for v in self.versions(model) if v.version == str(d["modelVersion"]))

    def register(self, mar_name: str, model: str, batch_size: int, max_batch_delay_ms: int,
                 workers: int = 1) -> None:
        """Registers an archive of the model store and waits until its workers are up."""
        self._call("POST", "/models", url=mar_name, model_name=model, batch_size=batch_size,
                   max_batch_delay=max_batch_delay_ms, initial_workers=workers, synchronous="true")

    def set_default(self, model: str, version: str) -> None:
        self._call("PUT", f"/models/{model}/{version}/set-default")

    def unregister(self, model: str, version: str) -> None:
        self._call("DELETE", f"/models/{model}/{version}")

    def wait_queue_empty(self, model: str, version: str, quiet_s: float, timeout_s: float = 120.0) -> None:
        """Waits until `version` has had no queued request for `quiet_s` seconds."""
        deadline = time.monotonic() + timeout_s
        quiet_since = None
        while time.monotonic() < deadline:
            pending = next((v.pending for v in self.versions(model) if v.version == version), 0)
            now = time.monotonic()
            if pending:
                quiet_since = None
            else:
                quiet_since = quiet_since or now
                if now - quiet_since >= quiet_s:
                    return
            time.sleep(0.05)
        raise ManagementError(f"{model} {version} still had queued requests after {timeout_s} s")


def _sentinel_png() -> bytes:
    """A valid 8x8 grey PNG: answered 200 by the video handler, rejected by nothing."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (128, 128, 128)).save(buffer, format="PNG")
    return buffer.getvalue()


def flush(inference_url: str, key_file: Path | None, model: str, version: str, workers: int = 1,
          timeout_s: float = 120.0) -> None:
    """Sends one tiny frame per worker to `version` and waits for the answers.

    Jobs leave a version's queue in order and a worker takes its next batch only after the last
    one is answered, so once a sentinel sent after the queue emptied is answered, every request
    the worker held before it has been answered too: unregistering can no longer cut a batch.
    (Exact for one worker per version, as shipped; with more, one worker may take several
    sentinels in one batch, so the caller's quiet period still matters.)
    """
    from concurrent.futures import ThreadPoolExecutor

    try:
        key = Key(key_file)
    except KeyFileError as exc:
        raise ManagementError(str(exc)) from None
    headers = {"Content-Type": "image/png", "X-Stream-Id": "autotune-drain"}
    body = _sentinel_png()
    url = f"{inference_url.rstrip('/')}/predictions/{model}/{version}"

    def send(_: int) -> int:
        return key.call(lambda value: requests.post(url, data=body, headers={**headers, **key.headers(value)},
                                                    timeout=timeout_s),
                        lambda a: is_invalid_key(a.status_code, a.content)).status_code

    with ThreadPoolExecutor(max(1, workers)) as pool:
        statuses = list(pool.map(send, range(max(1, workers))))
    if any(s >= 500 for s in statuses):
        logger.warning("drain sentinels for %s %s answered %s", model, version, statuses)
