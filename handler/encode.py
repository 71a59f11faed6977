"""Per-request JSON bodies (DESIGN section 4)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from handler.errors import FrameError

_ID_MAX = 256


@dataclass(frozen=True, slots=True)
class Response:
    """One request's answer: HTTP status, reason phrase and JSON body."""

    status: int
    phrase: str
    body: str


def ids(headers: Mapping[str, str]) -> dict[str, str | None]:
    """`stream_id` and `frame_id` echoed from the request headers (bounded in length)."""
    def get(name: str) -> str | None:
        value = headers.get(name)
        return None if value is None else value[:_ID_MAX]

    return {"stream_id": get("x-stream-id"), "frame_id": get("x-frame-id")}


def ok(headers: Mapping[str, str], frames: list[dict[str, Any]]) -> Response:
    """200 with one entry per frame: `{"width", "height", "outputs"}`."""
    return Response(200, "OK", json.dumps({**ids(headers), "frames": frames}))


def error(headers: Mapping[str, str], err: FrameError) -> Response:
    """The error's status with `{"code", "type", "message", "stream_id", "frame_id"}`."""
    body = {"code": err.status, "type": err.kind, "message": str(err), **ids(headers)}
    return Response(err.status, err.kind, json.dumps(body))
