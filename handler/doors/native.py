"""The native door: `/predictions` bodies, multipart forms and gRPC `Predictions` input keys
(DESIGN sections 4 and 4a), answered with the JSON of section 4."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from handler.clip import Clip, FrameResult, Meta, Outcome, Request
from handler.config import HandlerConfig
from handler.doors.wire import Headers, Response
from handler.errors import EmptyFrame, FrameError
from handler.formats import media_type
from handler.frames import decode, decode_clip
from handler.limits import Limits
from handler.video import is_segment

#: Input keys (gRPC) and form fields (multipart) that stand for request headers.
OPTIONS: Mapping[str, str] = {
    "stream_id": "x-stream-id",
    "frame_id": "x-frame-id",
    "capture_time": "x-capture-time",
    "frame_width": "x-frame-width",
    "frame_height": "x-frame-height",
    "pixel_format": "x-pixel-format",
    "sample_fps": "x-sample-fps",
    "motion": "x-motion",
}
#: Keys that hold the frame itself (`body`: HTTP; `data`: TorchServe's gRPC and curl idioms).
BODY_KEYS = ("body", "data")
_CONTENT_TYPE_KEY = "content_type"
_OPTION_MAX = 256
_MOTION_MAX = 16384  # X-Motion's JSON may hold mask polygons
# Bytes of a multipart body that are not part values (boundary line, part headers, file name)
# allowed per part before the form is taken to have lost a part (see `_lost_parts`).
_PART_OVERHEAD = 512


class BadForm(FrameError):
    """A multipart form that cannot be served: no file part, or parts lost on the way."""


@dataclass(frozen=True, slots=True)
class Body:
    """A body (HTTP), or a gRPC `data` input, and its Content-Type (None or generic: found from
    the bytes)."""

    body: object
    content_type: str | None = None

    def decode(self, config: HandlerConfig, meta: Meta, lazy: bool) -> Clip:
        return decode(self.body, self.content_type, meta, config, lazy)


@dataclass(frozen=True, slots=True)
class Part:
    """One file part of a multipart form: its field name, bytes and own Content-Type."""

    name: str
    body: object
    content_type: str | None = None

    def decode(self, config: HandlerConfig, meta: Meta, lazy: bool) -> Clip:
        try:
            return decode(self.body, self.content_type, meta, config, lazy)
        except FrameError as err:
            raise type(err)(f"part {self.name!r}: {err}") from None


@dataclass(frozen=True, slots=True)
class Form:
    """A multipart form's file parts, in the order sent: one frame each, or one video segment."""

    parts: tuple[Part, ...]

    def decode(self, config: HandlerConfig, meta: Meta, lazy: bool) -> Clip:
        what = f"the form's {len(self.parts)} file parts"
        Limits.of(config).parts(len(self.parts), f"form of {len(self.parts)} file parts")
        segments = [p.name for p in self.parts if is_segment(p.body, p.content_type)]
        if segments and len(self.parts) > 1:
            raise BadForm(f"the form's part {segments[0][:32]!r} is a video segment among "
                          f"{len(self.parts)} file parts: send a segment as the only file part, "
                          "or several encoded images (one frame each)")
        if len(self.parts) == 1:
            return self.parts[0].decode(config, meta, lazy)  # keeps a video segment's pts
        return decode_clip([partial(part.decode, config, meta, lazy) for part in self.parts], config, what)


def read(item: Mapping[str, object], headers: Mapping[str, object], model: str = "",
         config: HandlerConfig | None = None) -> Request:
    """TorchServe's per-request dict and header map -> the core's Request.

    Args:
        item: the request's dict as TorchServe hands it (`{"body": ...}`, form parts, gRPC keys).
        headers: `context.get_all_request_header(idx)`.
        model: the model's name (unused: native answers do not carry it).
        config: unused (the OIP door bounds inflated bodies by it).
    """
    split = Headers.of(headers)
    if media_type(split.request.get("content-type")) == "multipart/form-data":
        return _from_form(item, split)
    return _from_keys(item, split)


def answer(request: Request, outcome: Outcome) -> Response:
    """200 `{"code": 200, "stream_id", "frame_id", "frames": [{"width", "height", "outputs"}]}`
    (`code` because gRPC answers OK whatever the status), or the error's answer."""
    if isinstance(outcome, FrameError):
        return refuse(request, outcome)
    body = {"code": 200, **request.meta.ids, "frames": [_frame(result) for result in outcome]}
    return Response(200, "OK", json.dumps(body))


def refuse(request: Request, err: FrameError) -> Response:
    """The error's status, body `{"code", "type", "message", "stream_id", "frame_id"}`."""
    body = {"code": err.status, "type": err.kind, "message": str(err), **request.meta.ids}
    return Response(err.status, err.kind, json.dumps(body))


def _frame(result: FrameResult) -> dict[str, Any]:
    frame: dict[str, Any] = {"width": result.width, "height": result.height}
    if result.look is not None:
        frame.update(result.look.fields())
        if not result.look.regions:  # not looked at: no answer, which would say "nothing there"
            return frame | ({} if result.pts is None else {"pts": result.pts})
    if result.answer is None:
        frame["outputs"] = result.outputs
    else:
        frame.update(result.answer)
    if result.pts is not None:
        frame["pts"] = result.pts
    return frame


def _from_keys(item: Mapping[str, object], headers: Headers) -> Request:
    """A plain body (`body`) or gRPC input keys (`data` plus options)."""
    merged = {**_options(item), **headers.request}  # a real header wins over an input key of the same meaning
    meta = Meta.parse(merged)
    for key in BODY_KEYS:
        if key in item:
            content_type = (headers.request.get("content-type") or _text(item.get(_CONTENT_TYPE_KEY))
                            or headers.parts.get(key))
            body = item[key]
            if isinstance(body, Mapping) and isinstance(body.get("data"), str):
                # {"data": "<base64>"} with Content-Type: application/json (TorchServe parses it),
                # as its own vision handlers' clients send an image: the text, its type found from it
                return Request(Body(body["data"].encode(), None), meta)
            return Request(Body(body, content_type), meta)
    return Request(None, meta, refused=EmptyFrame(
        f"the request holds no frame (keys {_names(item)}): send it as the body, or as "
        'input["data"] over gRPC'))


def _from_form(item: Mapping[str, object], headers: Headers) -> Request:
    """A multipart form: fields named like options are headers; every other part is a frame."""
    merged = {**headers.request, **_options(item)}  # the form's own fields describe its frames
    form_type = merged.pop("content-type", "")  # says nothing about the parts
    parts = tuple(Part(name, value, headers.parts.get(name))
                  for name, value in item.items() if name not in OPTIONS and name != _CONTENT_TYPE_KEY)
    refused: FrameError | None = None
    if any(media_type(p.content_type) == "multipart/form-data" for p in parts):
        # TorchServe could not split the form (no boundary) and passed it whole.
        refused = BadForm(f"the multipart body could not be split into parts ({form_type[:80]!r}): "
                          "send a boundary parameter and parts delimited by it")
    elif not parts:
        refused = BadForm(f"the form has no file part (fields {_names(item)}): send each "
                          "frame as a file part, e.g. curl -F data=@frame.jpg")
    else:
        refused = _lost_parts(item, merged.get("content-length"), form_type)
    return Request(Form(parts), Meta.parse(merged), refused)


def _lost_parts(item: Mapping[str, object], content_length: str | None, form_type: str) -> BadForm | None:
    """TorchServe keeps one part per field name: `curl -F data=@a.jpg -F data=@b.jpg` reaches the
    handler as the last part only. The request's Content-Length then exceeds its parts' bytes by
    far more than boundaries and part headers take, and the form is refused rather than served
    with a frame missing."""
    if content_length is None or not (content_length.isascii() and content_length.isdigit()):
        return None
    boundary = form_type.partition("boundary=")[2]
    values = sum(len(v) if isinstance(v, (bytes, bytearray, str)) else 0 for v in item.values())
    allowance = (len(item) + 1) * (_PART_OVERHEAD + len(boundary))
    if int(content_length) - values <= allowance:
        return None
    return BadForm(
        f"the form is {content_length} bytes but its parts hold {values}: parts were lost, as "
        "TorchServe keeps only the last part of each field name; give every file part its own "
        "name (data0, data1, ...)"
    )


def _names(item: Mapping[str, object]) -> list[str]:
    """The first item keys, bounded, for messages."""
    return [str(name)[:32] for name in list(item)[:8]]


def _options(item: Mapping[str, object]) -> dict[str, str]:
    return {header: _text(item[key])[:_MOTION_MAX if key == "motion" else _OPTION_MAX]
            for key, header in OPTIONS.items() if key in item}


def _text(value: object) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace").strip()
    return "" if value is None else str(value).strip()
