"""Which door an item came through, and the request's answer through that door."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from handler.clip import Outcome, Request
from handler.config import HandlerConfig
from handler.doors import native, oip
from handler.doors.wire import Response
from handler.errors import FrameError, InternalError
from handler.metrics import BatchStats

logger = logging.getLogger(__name__)


class Door(Protocol):
    """A wire dialect (a module of this package)."""

    def read(self, item: Mapping[str, object], headers: Mapping[str, object], model: str,
             config: HandlerConfig) -> Request: ...

    def answer(self, request: Request, outcome: Outcome) -> Response: ...

    def refuse(self, request: Request, err: FrameError) -> Response: ...


def read(item: Mapping[str, object], headers: Mapping[str, object], model: str,
         config: HandlerConfig) -> tuple[Door, Request]:
    """The item's door and its Request. Never raises: a request the door fails on is answered
    500 alone, not with its batch."""
    door: Door = oip if oip.accepts(item, headers) else native
    try:
        return door, door.read(item, headers, model, config)
    except Exception:
        logger.exception("reading a request's items and headers failed")
        return door, Request(None, refused=InternalError("the handler failed on this request; see the worker log"))


def answer(door: Door, request: Request, outcome: Outcome, stats: BatchStats) -> Response:
    """The request's answer in its door's dialect; an answer that cannot be encoded (e.g. a model
    output JSON cannot hold) fails this request alone, counted as rejected."""
    try:
        response: Response = door.answer(request, outcome)
        return response
    except Exception:
        logger.exception("encoding a request's answer failed")
    frames = len(outcome) if not isinstance(outcome, FrameError) else 1
    stats.reject(InternalError.reason, frames)
    refused: Response = door.refuse(request, InternalError(
        "the handler could not encode this request's answer; see the worker log"))
    return refused
