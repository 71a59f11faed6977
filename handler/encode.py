"""Per-request answers: the JSON of DESIGN section 4, or Open Inference Protocol outputs (4a)."""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from handler.errors import FrameError
from handler.oip import BadInferenceRequest, InferRequest
from handler.requests import Protocol, Request

_ID_MAX = 256


@dataclass(frozen=True, slots=True)
class Response:
    """One request's answer: HTTP status, reason phrase and JSON body."""

    status: int
    phrase: str
    body: str


class NotStackable(FrameError):
    """An output's per-frame values differ in shape, so they make no OIP tensor."""


def ids(headers: Mapping[str, str]) -> dict[str, str | None]:
    """`stream_id` and `frame_id` echoed from the request headers (bounded in length)."""
    def get(name: str) -> str | None:
        value = headers.get(name)
        return None if value is None else value[:_ID_MAX]

    return {"stream_id": get("x-stream-id"), "frame_id": get("x-frame-id")}


def ok(request: Request, frames: list[dict[str, Any]]) -> Response:
    """200 with the request's frames, in its protocol.

    Native: `{"code": 200, "stream_id", "frame_id", "frames": [{"width", "height", "outputs"}]}`
    (`code` because gRPC answers OK whatever the status). OIP: one FP32 (INT64 for integers) output per model output
    (or per output asked for), stacked over the frames (`[N]` numbers, `[N, K]` vectors), for a
    video segment `pts` (FP64 `[N]`, seconds), and the request's `id`; 400 when they do not stack.
    """
    if request.protocol is Protocol.OIP:
        parsed = request.body if isinstance(request.body, InferRequest) else None
        model_outputs = list(frames[0]["outputs"]) if frames else []
        # A segment's frames carry their pts: one more output, FP64 seconds (a model output of
        # that name wins).
        with_pts = bool(frames) and "pts" in frames[0] and "pts" not in model_outputs
        available = [*model_outputs, "pts"] if with_pts else model_outputs
        names = (parsed.outputs if parsed is not None else None) or available
        missing = [name for name in names if name not in available]
        if missing:
            return error(request, BadInferenceRequest(
                f"outputs {missing[:8]} were asked for; this model has {available}"))
        try:
            outputs = [_tensor(name, [f["outputs"][name] for f in frames]) if name in model_outputs
                       else {"name": "pts", "datatype": "FP64", "shape": [len(frames)],
                             "data": [f["pts"] for f in frames]}
                       for name in names]
        except NotStackable as err:
            return error(request, err)
        answer: dict[str, Any] = {"model_name": request.model, "outputs": outputs}
        if parsed is not None and parsed.id is not None:
            answer["id"] = parsed.id
        return Response(200, "OK", json.dumps(answer))
    return Response(200, "OK", json.dumps({"code": 200, **ids(request.headers), "frames": frames}))


def error(request: Request, err: FrameError) -> Response:
    """The error's status; native `{"code", "type", "message", "stream_id", "frame_id"}`,
    OIP `{"error": "<type>: <message>"}`."""
    if request.protocol is Protocol.OIP:
        return Response(err.status, err.kind, json.dumps({"error": f"{err.kind}: {err}"}))
    body = {"code": err.status, "type": err.kind, "message": str(err), **ids(request.headers)}
    return Response(err.status, err.kind, json.dumps(body))


def _tensor(name: str, values: list[Any]) -> dict[str, Any]:
    """One OIP output: `values` (one per frame) stacked, shape `[N, ...]`, data row-major."""
    shape = [len(values)] + _shape(values[0], name)
    data: list[Any] = []
    for value in values:
        if _shape(value, name) != shape[1:]:
            raise NotStackable(
                f"output {name!r} has per-frame shapes {_shape(values[0], name)} and "
                f"{_shape(value, name)}, which make no tensor: send these frames to /predictions"
            )
        _flatten(value, data)
    integers = all(isinstance(v, int) and not isinstance(v, bool) for v in data)
    # NaN and inf are already null (JSON has no NaN); tritonclient reads a null FP32 as NaN.
    return {"name": name, "datatype": "INT64" if integers and data else "FP32", "shape": shape, "data": data}


def _shape(value: Any, name: str) -> list[int]:
    if value is None or isinstance(value, numbers.Real):  # None: a NaN or inf output
        return []
    if isinstance(value, list) and value:
        inner = [_shape(item, name) for item in value]
        if any(shape != inner[0] for shape in inner):
            raise NotStackable(f"output {name!r} holds a ragged list")
        return [len(value)] + inner[0]
    raise NotStackable(f"output {name!r} holds a {type(value).__name__} value, not numbers")


def _flatten(value: Any, out: list[Any]) -> None:
    if isinstance(value, list):
        for item in value:
            _flatten(item, out)
    else:
        out.append(value)
