"""What a model's replica and `doors` both check before a request reaches the core: the key
(TorchServe's `key_file.json`, re-read when it changes), the request's size, and how an answer
leaves (TorchServe's JSON, a bug in our code answered 500 `InternalError`).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from rayserve import wire
from rayserve.wire import Answer

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Gate:
    """What a model's replica checks on the requests Serve's proxy hands it directly: the key file
    (None: token authorization off), `max_request_size`, the model's `responseTimeout` and
    `job_queue_size` (config.properties)."""

    key_file: str | None
    max_request_size: int
    timeout_s: float
    queue: int


class Keys:
    """The inference key of a `key_file.json`, re-read when the file changes (a rotation)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._key: str | None = None

    def accepts(self, token: str | None) -> bool:
        if self.path is None:
            return True  # token authorization turned off by the operator
        key = self._current()
        return token is not None and key is not None and hmac.compare_digest(token, key)

    def _current(self) -> str | None:
        try:
            stat = os.stat(self.path)  # type: ignore[arg-type]
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp != self._stamp:
                with open(self.path, encoding="utf-8") as f:  # type: ignore[arg-type]
                    self._key = str(json.load(f)["inference"]["key"])
                self._stamp = stamp
        except (OSError, ValueError, KeyError, TypeError):
            logger.warning("cannot read the inference key from %s: every request is refused until it can be",
                           self.path)
            self._stamp, self._key = None, None
        return self._key


async def respond(request: Request, answer: Callable[[Request], Awaitable[Answer]], who: str) -> Response:
    """`answer`'s Answer as an HTTP response (`application/json`, or no type for an empty body, as
    TorchServe); a bug in it becomes 500 `InternalError`, logged."""
    try:
        found = await answer(request)
    except Exception:
        logger.exception("%s failed on %s %s", who, request.method, request.url.path)
        found = Answer.error(500, "InternalError", f"{who} failed on this request; see the replica log")
    return Response(found.body, found.status, media_type="application/json" if found.body else None)


async def receive(request: Request, limit: int, predictions: bool) -> tuple[dict[str, object], dict[str, object]] | Answer:
    """The request as TorchServe's worker hands it (`wire.item`), or TorchServe's 413 past `limit`
    bytes (checked from `Content-Length`, then while reading; the reason goes to the log)."""
    declared = request.headers.get("content-length", "")
    body = None if declared.isdigit() and int(declared) > limit else await _body(request, limit)
    if body is None:
        logger.warning("%s %s: the request is %s bytes, over max_request_size = %d (config.properties): "
                       "answered 413", request.method, request.url.path, declared or "more than that", limit)
        return wire.too_large()
    return await wire.item(request, body, predictions)


async def _body(request: Request, limit: int) -> bytes | None:
    """The whole body, or None once it passes `limit` (a chunked body declares no length)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # Starlette's own cache: request.form() parses it from here
    return body
