"""Open Inference Protocol (KServe v2) requests -> frames (DESIGN section 4a).

`POST /v2/models/{m}/infer` arrives as JSON, or as a JSON header of `Inference-Header-Content-Length`
bytes followed by the binary tensors (what `tritonclient.http` sends). The first input is the
frame or clip:

- `UINT8` `[H, W, 3]`, `[H, W]` (grey) or `[N, H, W, 3]`: pixels, row-major RGB;
- `BYTES` `[N]`: N encoded images (a clip), or one video segment alone (`[1]`), each decoded
  like a `/predictions` body whose format is found from its first bytes. A segment among other
  elements is refused (400 `BadInferenceRequest`): its frames would lose their pts and the
  segment limits (`max_video_frames`) would not be the ones applied.

`parse` splits a body into its JSON header and binary data (cheap: TorchServe already parsed a
JSON body, and a binary request's header is small); `decode` builds the frames, in the decode
threads; `answer` stacks each model output over the frames.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from handler.clip import Clip, FrameResult, Meta, Outcome, Request
from handler.config import HandlerConfig
from handler.doors.wire import Headers, Response
from handler.errors import BadHeader, CorruptFrame, EmptyFrame, FrameError, FrameTooLarge, UnsupportedContentType
from handler.formats import media_type
from handler.frames import decode as decode_body
from handler.frames import decode_clip, pixel_layout
from handler.limits import Limits
from handler.video import is_segment

logger = logging.getLogger(__name__)

HEADER_LENGTH = "inference-header-content-length"
_HEADER_MAX = 1 << 20  # a JSON header with binary tensors holds no data: 1 MiB is plenty
_LENGTH = struct.Struct("<I")


class BadInferenceRequest(FrameError):
    """The Open Inference Protocol request is malformed (JSON, inputs, shape or data size)."""


class NotStackable(FrameError):
    """An output's per-frame values differ in shape, so they make no OIP tensor."""


@dataclass(frozen=True, slots=True)
class InferRequest:
    """An OIP request split into its JSON header and the binary tensor data after it.

    Attributes:
        header: the JSON object (`inputs`, optional `id`, `outputs`, `parameters`).
        binary: the bytes after the JSON header (empty for a JSON-only request).
    """

    header: Mapping[str, Any]
    binary: memoryview
    model: str = ""

    def decode(self, config: HandlerConfig, meta: Meta, lazy: bool) -> Clip:
        return decode(self, meta, config)

    @property
    def id(self) -> str | None:
        """The request's `id`, echoed in the answer."""
        value = self.header.get("id")
        return value[:256] if isinstance(value, str) else None

    @property
    def outputs(self) -> tuple[str, ...] | None:
        """The output names asked for, in order; None: all of them."""
        asked = self.header.get("outputs")
        if not isinstance(asked, list) or not asked:
            return None
        return tuple(str(o.get("name"))[:256] for o in asked if isinstance(o, dict))


def accepts(item: Mapping[str, object], headers: Mapping[str, object]) -> bool:
    """Whether an item came through `/v2/models/{m}/infer`: binary tensors announce their JSON
    header's length; a JSON body is OIP unless it came to `/predictions`, which TorchServe marks
    with a `url_path` header (gRPC has no headers, a multipart form is the native door's)."""
    request = Headers.of(headers).request
    if media_type(request.get("content-type")) == "multipart/form-data":
        return False
    if HEADER_LENGTH in request:
        return True
    if "url_path" in request or not request:
        return False
    body = item.get("body")
    if isinstance(body, Mapping):
        return True
    return isinstance(body, (bytes, bytearray)) and bytes(body[:64]).lstrip()[:1] == b"{"


def read(item: Mapping[str, object], headers: Mapping[str, object], model: str,
         config: HandlerConfig) -> Request:
    """An OIP item -> the core's Request (its source the parsed `InferRequest`).

    A compressed body inflates to at most one clip's pixels (plus its JSON header).
    """
    request_headers = Headers.of(headers).request
    meta = Meta.parse(request_headers)
    if meta.motion is not None:
        return Request(None, meta, refused=BadHeader(
            "X-Motion is for /predictions: its answer says what the model looked at in each frame, "
            "which an OIP tensor cannot; send it there, or drop the header"))
    try:
        parsed = parse(item.get("body"), request_headers, 3 * config.max_clip_pixels + _HEADER_MAX, model)
    except FrameError as err:
        return Request(None, meta, refused=err.detached())
    return Request(parsed, meta)


def parse(body: object, headers: Mapping[str, str], max_inflated: int, model: str = "") -> InferRequest:
    """Splits a request body: JSON header (a dict TorchServe already parsed, or the first
    `Inference-Header-Content-Length` bytes, or the whole body) and binary data. Reads a
    gzip or deflate `Content-Encoding` (tritonclient's `request_compression_algorithm`), inflated
    to at most `max_inflated` bytes.

    Raises:
        FrameError: the body is not an OIP request.
    """
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding in ("gzip", "deflate") and isinstance(body, (bytes, bytearray)):
        body = _inflate(body, encoding, max_inflated)
    return InferRequest(*_split(body, headers), model)


def decode(request: InferRequest, meta: Meta, config: HandlerConfig) -> Clip:
    """The frames of an OIP request's first input.

    Args:
        request: the parsed request.
        meta: what the request's headers say.
        config: the limits to enforce.

    Raises:
        FrameError: the request cannot be served; its status says why.
    """
    tensor, data = _first_input(request.header, request.binary)
    datatype = tensor["datatype"]
    shape = tensor["shape"]
    if datatype == "UINT8":
        return Clip(_pixels(shape, data, Limits.of(config)))
    if datatype == "BYTES":
        return _encoded(shape, data, meta, config)
    raise UnsupportedContentType(
        f"input datatype {datatype[:16]!r} is not supported: send UINT8 pixels of shape [H, W, 3], "
        "[H, W] or [N, H, W, 3], or BYTES [N] of encoded images or one video segment"
    )


def _inflate(body: bytes | bytearray, encoding: str, limit: int) -> bytes:
    """The decompressed body, at most `limit` bytes (a compression bomb is refused)."""
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16 if encoding == "gzip" else zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit)
    except zlib.error as err:
        raise BadInferenceRequest(f"cannot read the {encoding} body: {err}") from None
    if inflater.unconsumed_tail:
        raise FrameTooLarge(f"the {encoding} body inflates to more than {limit} bytes")
    return out


def _split(body: object, headers: Mapping[str, str]) -> tuple[dict[str, Any], memoryview]:
    """`(JSON header, binary tensors)`.

    A JSON-only body that still carries an `Inference-Header-Content-Length` is read whole:
    `tritonclient.http`'s `infer(headers=h)` writes that header into the caller's dict `h`, so
    a client that reuses one headers dict sends the length of its last binary request with its
    next JSON one. The length is trusted only where it cuts the body into valid JSON.
    """
    if isinstance(body, Mapping):
        return dict(body), memoryview(b"")
    if not isinstance(body, (bytes, bytearray)):
        raise BadInferenceRequest(f"the request body is a {type(body).__name__}, not JSON")
    if not body:
        raise EmptyFrame("the request body is empty")
    view = memoryview(body)
    length = headers.get(HEADER_LENGTH)
    if length is None:
        return _json(view), memoryview(b"")
    try:
        cut = _header_length(length, len(body))
        return _json(view[:cut]), view[cut:]
    except BadInferenceRequest:
        whole = _whole_json(view)
        if whole is None:
            raise
        logger.debug("Inference-Header-Content-Length %s on a JSON-only body: read whole", length[:32])
        return whole, memoryview(b"")


def _header_length(length: str, size: int) -> int:
    length = length.strip()
    if not (length.isascii() and length.isdigit()) or not 0 < int(length) <= min(size, _HEADER_MAX):
        raise BadInferenceRequest(
            f"Inference-Header-Content-Length {length[:32]!r} is not a length within the "
            f"{size}-byte body"
        )
    return int(length)


def _whole_json(view: memoryview) -> dict[str, Any] | None:
    """The body as one JSON object when it is one (a JSON-only request), else None."""
    if bytes(view[:64]).lstrip()[:1] != b"{" or bytes(view[-64:]).rstrip()[-1:] != b"}":
        return None
    try:
        return _json(view)
    except BadInferenceRequest:
        return None


def _json(view: memoryview) -> dict[str, Any]:
    try:
        header = json.loads(bytes(view))
    except (UnicodeDecodeError, ValueError) as err:
        raise BadInferenceRequest(f"the inference request is not JSON: {err}") from None
    if not isinstance(header, dict):
        raise BadInferenceRequest("the inference request is not a JSON object")
    return header


def _first_input(header: Mapping[str, Any], binary: memoryview) -> tuple[dict[str, Any], object]:
    """The first input tensor (name, shape, datatype checked) and its data: bytes or a JSON list."""
    inputs = header.get("inputs")
    if not isinstance(inputs, list) or not inputs or not all(isinstance(t, dict) for t in inputs):
        raise BadInferenceRequest('the inference request needs "inputs": a list of tensors')
    first = inputs[0]  # binary tensors come in input order: the first one's start the data
    shape, datatype = first.get("shape"), first.get("datatype")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise BadInferenceRequest(f"input shape {str(shape)[:64]} is not a list of whole numbers")
    if not isinstance(datatype, str):
        raise BadInferenceRequest("input datatype is missing")
    size = _binary_size(first)
    if size is None:
        if "data" not in first:
            raise BadInferenceRequest('the first input has neither "data" nor binary_data_size')
        return first, first["data"]
    if size > len(binary):
        raise BadInferenceRequest(f"binary_data_size {size} runs past the {len(binary)} bytes of "
                                  "binary data after the JSON header")
    return first, binary[:size]


def _binary_size(tensor: Mapping[str, Any]) -> int | None:
    parameters = tensor.get("parameters")
    if not isinstance(parameters, dict) or "binary_data_size" not in parameters:
        return None
    size = parameters["binary_data_size"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise BadInferenceRequest(f"binary_data_size {str(size)[:32]} is not a whole number")
    return size


def _pixels(shape: list[int], data: object, limits: Limits) -> list[np.ndarray]:
    """UINT8 `[H, W, 3]`, `[H, W]` or `[N, H, W, 3]` -> frames `[H, W, 3]` (views when binary)."""
    layout = pixel_layout(shape)
    if layout is None:
        raise BadInferenceRequest(
            f"UINT8 input shape {shape[:8]} is not supported: send [H, W, 3], [H, W] or [N, H, W, 3]"
        )
    clip, height, width = layout
    limits.clip(clip, height, width)  # before anything of that size exists
    expected = math.prod(shape)
    if isinstance(data, memoryview):
        if len(data) != expected:
            raise BadInferenceRequest(f"UINT8 input of shape {shape} needs {expected} bytes, "
                                      f"binary_data_size gives {len(data)}")
        array = np.frombuffer(data, np.uint8, count=expected)
    else:
        array = _json_pixels(data, shape, expected)
    array = array.reshape(shape)
    if array.ndim == 2:
        array = np.broadcast_to(array[:, :, None], (height, width, 3))
    return list(array) if array.ndim == 4 else [array]


def _json_pixels(data: object, shape: list[int], expected: int) -> np.ndarray:
    if not isinstance(data, list):
        raise BadInferenceRequest('UINT8 "data" must be a JSON list of numbers')
    try:
        array = np.asarray(data)
    except ValueError as err:  # ragged nesting
        raise BadInferenceRequest(f'UINT8 "data" is not a regular array: {err}') from None
    if array.size != expected:
        raise BadInferenceRequest(f"UINT8 input of shape {shape} needs {expected} values, "
                                  f"data holds {array.size}")
    if array.dtype.kind not in "iub" or (array.size and (array.min() < 0 or array.max() > 255)):
        raise BadInferenceRequest('UINT8 "data" must hold whole numbers from 0 to 255')
    return array.astype(np.uint8).reshape(-1)


def _encoded(shape: list[int], data: object, meta: Meta, config: HandlerConfig) -> Clip:
    """BYTES `[N]`: N encoded images, or one video segment, each decoded like a request body."""
    count = math.prod(shape)
    if count == 0:
        raise EmptyFrame(f"BYTES input of shape {shape} holds no element")
    Limits.of(config).parts(count, f"BYTES input of {count} elements")
    elements = _elements(data, count)
    if count == 1:
        return decode_body(elements[0], None, meta, config)
    segments = [index for index, element in enumerate(elements) if is_segment(element)]
    if segments:
        raise BadInferenceRequest(
            f"BYTES input of {count} elements holds a video segment (element {segments[0]}): send "
            "a segment alone, as BYTES of shape [1], or several encoded images (JPEG, PNG, npy)"
        )
    return decode_clip([partial(_element, i, e, meta, config) for i, e in enumerate(elements)],
                       config, f"BYTES input of {count} elements")


def _element(index: int, element: bytes, meta: Meta, config: HandlerConfig) -> Clip:
    try:
        return decode_body(element, None, meta, config)
    except FrameError as err:
        raise type(err)(f"BYTES element {index}: {err}") from None


def _elements(data: object, count: int) -> list[bytes]:
    """BYTES elements: binary is each element's 4-byte little-endian length then its bytes."""
    if isinstance(data, memoryview):
        elements: list[bytes] = []
        at = 0
        for index in range(count):  # bounded by the declared shape, not by the data
            if at + _LENGTH.size > len(data):
                raise CorruptFrame(f"BYTES data ends inside the length of element {index}")
            (size,) = _LENGTH.unpack_from(data, at)
            at += _LENGTH.size
            if at + size > len(data):
                raise CorruptFrame(f"BYTES element {index} declares {size} bytes, {len(data) - at} remain")
            elements.append(data[at: at + size].tobytes())
            at += size
        if at != len(data):
            raise BadInferenceRequest(f"BYTES input declares {count} elements; {len(data) - at} bytes "
                                      "follow the last one")
    elif isinstance(data, list) and all(isinstance(e, str) for e in data):
        elements = [e.encode("utf-8") for e in data]
    else:
        raise BadInferenceRequest('BYTES "data" must be a JSON list of strings')
    if len(elements) != count:
        raise BadInferenceRequest(f"BYTES input declares {count} elements, its data holds {len(elements)}")
    return elements


def answer(request: Request, outcome: Outcome) -> Response:
    """200 with one FP32 (INT64 for integers) output per model output (or per output asked for),
    stacked over the frames (`[N]` numbers, `[N, K]` vectors), for a video segment `pts` (FP64
    `[N]`, seconds), and the request's `id`; 400 when they do not stack; or the error's answer."""
    if isinstance(outcome, FrameError):
        return refuse(request, outcome)
    parsed = request.source if isinstance(request.source, InferRequest) else None
    if outcome and outcome[0].answer is not None:
        return _task_answer(request, parsed, outcome)
    model_outputs = list(outcome[0].outputs) if outcome else []
    # A segment's frames carry their pts: one more output, FP64 seconds (a model output of that
    # name wins).
    with_pts = bool(outcome) and outcome[0].pts is not None and "pts" not in model_outputs
    available = [*model_outputs, "pts"] if with_pts else model_outputs
    names = (parsed.outputs if parsed is not None else None) or available
    missing = [name for name in names if name not in available]
    if missing:
        return refuse(request, BadInferenceRequest(f"outputs {missing[:8]} were asked for; this model has {available}"))
    try:
        outputs = [_tensor(name, [f.outputs[name] for f in outcome]) if name in model_outputs
                   else _pts(outcome) for name in names]
    except NotStackable as err:
        return refuse(request, err)
    body: dict[str, Any] = {"model_name": parsed.model if parsed is not None else "", "outputs": outputs}
    if parsed is not None and parsed.id is not None:
        body["id"] = parsed.id
    return Response(200, "OK", json.dumps(body))


def _task_answer(request: Request, parsed: InferRequest | None, outcome: list[FrameResult]) -> Response:
    """A task's answers as tensors (docs/clients.md): detections as Triton users know them from
    EfficientNMS, classes as `[N, k]`, segments as one JSON text per frame."""
    tensors = _task_tensors(outcome)
    names = (parsed.outputs if parsed is not None else None) or list(tensors)
    missing = [name for name in names if name not in tensors]
    if missing:
        return refuse(request, BadInferenceRequest(f"outputs {missing[:8]} were asked for; this model has {list(tensors)}"))
    outputs = [{"name": name, "datatype": tensors[name][0], "shape": tensors[name][1], "data": tensors[name][2]}
               for name in names]
    body: dict[str, Any] = {"model_name": parsed.model if parsed is not None else "", "outputs": outputs}
    if parsed is not None and parsed.id is not None:
        body["id"] = parsed.id
    return Response(200, "OK", json.dumps(body))


Tensor = tuple[str, list[int], list[Any]]


def _task_tensors(frames: list[FrameResult]) -> dict[str, Tensor]:
    answers = [f.answer or {} for f in frames]
    n = len(frames)
    tensors: dict[str, Tensor] = {}
    if "detections" in answers[0]:
        rows = [a["detections"] for a in answers]
        k = max((len(r) for r in rows), default=0)
        tensors["num_detections"] = ("INT32", [n], [len(r) for r in rows])
        tensors["detection_boxes"] = ("FP32", [n, k, 4], _flat(_column(rows, k, "box", [0.0] * 4)))
        tensors["detection_scores"] = ("FP32", [n, k], _column(rows, k, "score", 0.0))
        tensors["detection_classes"] = ("INT32", [n, k], _column(rows, k, "class_id", -1))
        tensors["detection_labels"] = ("BYTES", [n, k], _column(rows, k, "label", ""))
        # The model's parts, known at load: its tensors come whatever the frames hold (a pose
        # model's detection_keypoints is [N, 0, P, 3] for frames with nobody in them).
        extras = frames[0].extras
        if "keypoints" in extras:
            points = extras["keypoints"][0]
            column = _column(rows, k, "keypoints", [[0.0] * 3] * points)
            tensors["detection_keypoints"] = ("FP32", [n, k, points, 3], _flat(_flat(column)))
        if "mask" in extras:
            masks = _column(rows, k, "mask", None)
            tensors["detection_masks"] = ("BYTES", [n, k], ["" if m is None else json.dumps(m) for m in masks])
    elif "classes" in answers[0]:
        rows = [a["classes"] for a in answers]
        k = max((len(r) for r in rows), default=0)
        tensors["classes"] = ("INT32", [n, k], _column(rows, k, "class_id", -1))
        tensors["scores"] = ("FP32", [n, k], _column(rows, k, "score", 0.0))
        tensors["labels"] = ("BYTES", [n, k], _column(rows, k, "label", ""))
    elif "segments" in answers[0]:
        tensors["segments"] = ("BYTES", [n], [json.dumps(a["segments"]) for a in answers])
    if frames[0].pts is not None:
        tensors["pts"] = ("FP64", [n], [f.pts for f in frames])
    return tensors


def _column(rows: list[list[dict[str, Any]]], k: int, key: str, fill: Any) -> list[Any]:
    """`row[j][key]` of every row, each row filled up to `k` entries with `fill`, row-major."""
    return [value for row in rows for value in [d.get(key, fill) for d in row] + [fill] * (k - len(row))]


def _flat(values: list[Any]) -> list[Any]:
    return [v for value in values for v in value]


def refuse(request: Request, err: FrameError) -> Response:
    """The error's status, body `{"error": "<type>: <message>"}`."""
    return Response(err.status, err.kind, json.dumps({"error": f"{err.kind}: {err}"}))


def _pts(frames: list[FrameResult]) -> dict[str, Any]:
    return {"name": "pts", "datatype": "FP64", "shape": [len(frames)], "data": [f.pts for f in frames]}


def _tensor(name: str, values: list[Any]) -> dict[str, Any]:
    """One OIP output: `values` (one per frame) stacked, shape `[N, ...]`, data row-major."""
    shape = [len(values), *_shape(values[0], name)]
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
        return [len(value), *inner[0]]
    raise NotStackable(f"output {name!r} holds a {type(value).__name__} value, not numbers")


def _flatten(value: Any, out: list[Any]) -> None:
    if isinstance(value, list):
        for item in value:
            _flatten(item, out)
    else:
        out.append(value)
