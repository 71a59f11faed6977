"""Which door an item came through, and the request's answer through that door."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from handler.clip import Outcome, Request
from handler.config import HandlerConfig, Task
from handler.doors import native, oip
from handler.doors.wire import Response
from handler.errors import AnswerTooLarge, FrameError, InternalError
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


def answer(door: Door, request: Request, outcome: Outcome, stats: BatchStats,
           config: HandlerConfig | None = None) -> Response:
    """The request's answer in its door's dialect; an answer that cannot be encoded (e.g. a model
    output JSON cannot hold), or that is larger than TorchServe may send (`max_response_bytes`),
    fails this request alone, counted as rejected."""
    frames = len(outcome) if not isinstance(outcome, FrameError) else 1
    try:
        response: Response = door.answer(request, outcome)
    except Exception:
        logger.exception("encoding a request's answer failed")
    else:
        if config is None or len(response.body) <= config.max_response_bytes:
            return response
        stats.reject(AnswerTooLarge.reason, frames)
        refused: Response = door.refuse(request, _too_large(len(response.body), frames, config))
        return refused
    stats.reject(InternalError.reason, frames)
    return door.refuse(request, InternalError(
        "the handler could not encode this request's answer; see the worker log"))


def _too_large(size: int, frames: int, config: HandlerConfig) -> AnswerTooLarge:
    hint = ("answer boxes, classes or masks instead of the raw outputs: set handler.task to detection, "
            "classification or segmentation" if config.task is Task.RAW else
            "lower handler.max_detections, or send fewer frames per request")
    return AnswerTooLarge(
        f"the answer of {frames} frame(s) is {size} bytes, over handler.max_response_bytes = "
        f"{config.max_response_bytes} (TorchServe's max_response_size; task: {config.task.value}): {hint}; "
        "or raise max_response_size in config.properties and max_response_bytes to match")
