"""Every door a frame comes through -> one core `Request` (DESIGN section 4a).

TorchServe hands the handler one dict per request and its headers; what they hold depends on the
entry point (seen with TorchServe 0.12, docs/clients.md):

- `POST /predictions/{m}` with a body: one key `body`, headers as sent plus `url_path`.
- `multipart/form-data`: one key per form field and file part, in the order sent; each part's
  own Content-Type as a per-parameter header (`''` for plain form fields).
- gRPC `Predictions`: one key per `input` entry (bytes), and no request headers at all.
- `POST /v2/models/{m}/infer` (Open Inference Protocol): one key `body` (a dict when sent as
  `application/json`), the request's headers but no `url_path`.

This module turns those into `Request`s; `Request.decode` turns a request into its frames.
Nothing here imports `ts`: the handler passes plain dicts.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from handler import oip
from handler.config import HandlerConfig
from handler.errors import ClipTooLarge, FrameError, InternalError
from handler.formats import media_type
from handler.frames import Clip, decode

logger = logging.getLogger(__name__)

#: Input keys (gRPC) and form fields (multipart) that stand for request headers.
OPTIONS: Mapping[str, str] = {
    "stream_id": "x-stream-id",
    "frame_id": "x-frame-id",
    "capture_time": "x-capture-time",
    "frame_width": "x-frame-width",
    "frame_height": "x-frame-height",
    "pixel_format": "x-pixel-format",
    "sample_fps": "x-sample-fps",
}
#: Keys that hold the frame itself (`body`: HTTP; `data`: TorchServe's gRPC and curl idioms).
BODY_KEYS = ("body", "data")
_CONTENT_TYPE_KEY = "content_type"
_OPTION_MAX = 256
# Bytes of a multipart body that are not part values (boundary line, part headers, file name)
# allowed per part before the form is taken to have lost a part (see `_lost_parts`).
_PART_OVERHEAD = 512


class Protocol(enum.Enum):
    """How a request is answered."""

    NATIVE = "native"  # /predictions and gRPC Predictions: the JSON of DESIGN section 4
    OIP = "oip"  # /v2/models/{m}/infer: Open Inference Protocol tensors


class BadForm(FrameError):
    """A multipart form that cannot be served: no file part, or parts lost on the way."""


@dataclass(frozen=True, slots=True)
class Part:
    """One file part of a multipart form.

    Attributes:
        name: the form field name.
        body: the part's bytes.
        content_type: the part's own Content-Type (`''` or a generic one: found from the bytes).
    """

    name: str
    body: object
    content_type: str | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """One request as the core sees it, whatever door it came through.

    Attributes:
        body: the body (bytes for the binary content types; a dict for parsed JSON).
        content_type: the body's Content-Type.
        headers: request headers, names in lower case (form fields and gRPC keys mapped in).
        parts: a multipart form's file parts, in the order sent (then `body` is unused).
        protocol: how the request is answered.
        model: the model's name (OIP answers carry it).
        refused: set when the adapter already knows the request cannot be served.
    """

    body: object
    content_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    parts: tuple[Part, ...] = ()
    protocol: Protocol = Protocol.NATIVE
    model: str = ""
    refused: FrameError | None = None

    def decode(self, config: HandlerConfig) -> Clip:
        """The request's frames, in order.

        Raises:
            FrameError: the request cannot be served; its status says why.
        """
        if self.refused is not None:
            raise self.refused
        if self.protocol is Protocol.OIP:
            return oip.decode(self.body, self.headers, config)
        if not self.parts:
            return decode(self.body, self.content_type, self.headers, config)
        if len(self.parts) > config.max_clip_frames:
            raise ClipTooLarge(f"form of {len(self.parts)} file parts is above the maximum "
                               f"{config.max_clip_frames} frames per clip")
        clips = [self._decode_part(part, config) for part in self.parts]
        if len(clips) == 1:
            return clips[0]  # keeps a video segment's pts
        frames = [frame for clip in clips for frame in clip.frames]
        if len(frames) > config.max_clip_frames:
            raise ClipTooLarge(f"form of {len(frames)} frames is above the maximum "
                               f"{config.max_clip_frames} frames per clip")
        if sum(f.shape[0] * f.shape[1] for f in frames) > config.max_clip_pixels:
            raise ClipTooLarge(f"the form's {len(frames)} frames hold more than "
                               f"{config.max_clip_pixels} pixels")
        return Clip(frames)

    def _decode_part(self, part: Part, config: HandlerConfig) -> Clip:
        try:
            return decode(part.body, part.content_type, self.headers, config)
        except FrameError as err:
            raise type(err)(f"part {part.name!r}: {err}") from None


def from_item(item: Mapping[str, object], headers: Mapping[str, object], model: str = "") -> Request:
    """TorchServe's per-request dict and header map -> the core's Request.

    Args:
        item: the request's dict as TorchServe hands it (`{"body": ...}`, form parts, gRPC keys).
        headers: `context.get_all_request_header(idx)`: request headers (str values) and, per
            item key, `{"content-type": ...}` (dict values).
        model: the model's name.

    Never raises: a request the adapter fails on is answered 500 alone, not with its batch.
    """
    try:
        return _from_item(item, headers, model)
    except Exception:
        logger.exception("reading a request's items and headers failed")
        return Request(None, refused=InternalError("the handler failed on this request; see the worker log"))


def _from_item(item: Mapping[str, object], headers: Mapping[str, object], model: str) -> Request:
    request_headers = {str(k).lower(): v for k, v in headers.items() if isinstance(v, str)}
    part_types = {str(k): _part_type(v) for k, v in headers.items() if isinstance(v, Mapping)}
    content_type = request_headers.get("content-type")
    if media_type(content_type) == "multipart/form-data":
        return _from_form(item, request_headers, part_types)
    if _is_oip(item, request_headers):
        return Request(item.get("body"), content_type, request_headers, protocol=Protocol.OIP, model=model)
    return _from_keys(item, request_headers, part_types)


def _is_oip(item: Mapping[str, object], headers: Mapping[str, str]) -> bool:
    """`/v2/models/{m}/infer`: binary tensors announce their JSON header's length; a JSON body
    is OIP unless it came to `/predictions`, which TorchServe marks with a `url_path` header."""
    if "inference-header-content-length" in headers:
        return True
    if "url_path" in headers or not headers:  # /predictions, or gRPC (which has no headers)
        return False
    body = item.get("body")
    if isinstance(body, Mapping):
        return True
    return isinstance(body, (bytes, bytearray)) and bytes(body[:64]).lstrip()[:1] == b"{"


def _from_keys(item: Mapping[str, object], headers: dict[str, str],
               part_types: Mapping[str, str]) -> Request:
    """A plain body (`body`) or gRPC input keys (`data` plus options)."""
    options = _options(item)
    merged = {**options, **headers}  # a real header wins over an input key of the same meaning
    for key in BODY_KEYS:
        if key in item:
            content_type = (headers.get("content-type") or _text(item.get(_CONTENT_TYPE_KEY))
                            or part_types.get(key))
            return Request(item[key], content_type, merged)
    return Request(None, headers.get("content-type"), merged)


def _from_form(item: Mapping[str, object], headers: dict[str, str],
               part_types: Mapping[str, str]) -> Request:
    """A multipart form: fields named like options are headers; every other part is a frame."""
    merged = {**headers, **_options(item)}  # the form's own fields describe its frames
    form_type = merged.pop("content-type", "")  # says nothing about the parts
    parts = tuple(Part(name, value, part_types.get(name))
                  for name, value in item.items() if name not in OPTIONS and name != _CONTENT_TYPE_KEY)
    refused: FrameError | None = None
    if any(media_type(p.content_type) == "multipart/form-data" for p in parts):
        # TorchServe could not split the form (no boundary) and passed it whole.
        refused = BadForm(f"the multipart body could not be split into parts ({form_type[:80]!r}): "
                          "send a boundary parameter and parts delimited by it")
    elif not parts:
        refused = BadForm(f"the form has no file part (fields: {sorted(item)[:8]}): send each "
                          "frame as a file part, e.g. curl -F data=@frame.jpg")
    else:
        refused = _lost_parts(item, merged.get("content-length"), form_type)
    return Request(None, None, merged, parts=parts, refused=refused)


def _lost_parts(item: Mapping[str, object], content_length: str | None, form_type: str) -> BadForm | None:
    """TorchServe keeps one part per field name: `curl -F data=@a.jpg -F data=@b.jpg` reaches the
    handler as the last part only. The request's Content-Length then exceeds its parts' bytes by
    far more than boundaries and part headers take, and the form is refused rather than served
    with a frame missing."""
    if content_length is None or not content_length.isdigit():
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


def _options(item: Mapping[str, object]) -> dict[str, str]:
    out = {}
    for key, header in OPTIONS.items():
        if key in item:
            out[header] = _text(item[key])[:_OPTION_MAX]
    return out


def _text(value: object) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace").strip()
    return "" if value is None else str(value).strip()


def _part_type(value: Mapping[object, object]) -> str:
    found = value.get("content-type")
    return found if isinstance(found, str) else ""


