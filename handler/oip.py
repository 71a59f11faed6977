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
threads. The answer's encoding lives in `handler.encode`.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from handler.config import HandlerConfig
from handler.errors import (
    ClipTooLarge,
    CorruptFrame,
    EmptyFrame,
    FrameError,
    FrameTooLarge,
    UnsupportedContentType,
)
from handler.frames import Clip, check_clip, decode_clip, pixel_layout
from handler.frames import decode as decode_body
from handler.video import is_segment

HEADER_LENGTH = "inference-header-content-length"
_HEADER_MAX = 1 << 20  # a JSON header with binary tensors holds no data: 1 MiB is plenty
_LENGTH = struct.Struct("<I")
# Largest decompressed body: above the largest request the shipped config admits (200 MiB).
INFLATED_MAX = 256 << 20


class BadInferenceRequest(FrameError):
    """The Open Inference Protocol request is malformed (JSON, inputs, shape or data size)."""


@dataclass(frozen=True, slots=True)
class InferRequest:
    """An OIP request split into its JSON header and the binary tensor data after it.

    Attributes:
        header: the JSON object (`inputs`, optional `id`, `outputs`, `parameters`).
        binary: the bytes after the JSON header (empty for a JSON-only request).
    """

    header: Mapping[str, Any]
    binary: memoryview

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


def parse(body: object, headers: Mapping[str, str], max_inflated: int = INFLATED_MAX) -> InferRequest:
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
    return InferRequest(*_split(body, headers))


def decode(request: InferRequest, headers: Mapping[str, str], config: HandlerConfig) -> Clip:
    """The frames of an OIP request's first input.

    Args:
        request: the parsed request.
        headers: request headers, names in lower case.
        config: the limits to enforce.

    Raises:
        FrameError: the request cannot be served; its status says why.
    """
    tensor, data = _first_input(request.header, request.binary)
    datatype = tensor["datatype"]
    shape = tensor["shape"]
    if datatype == "UINT8":
        return Clip(_pixels(shape, data, config))
    if datatype == "BYTES":
        return _encoded(shape, data, headers, config)
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
    """`(JSON header, binary tensors)`."""
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
    length = length.strip()
    if not (length.isascii() and length.isdigit()) or not 0 < int(length) <= min(len(body), _HEADER_MAX):
        raise BadInferenceRequest(
            f"Inference-Header-Content-Length {length[:32]!r} is not a length within the "
            f"{len(body)}-byte body"
        )
    return _json(view[: int(length)]), view[int(length):]


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


def _pixels(shape: list[int], data: object, config: HandlerConfig) -> list[np.ndarray]:
    """UINT8 `[H, W, 3]`, `[H, W]` or `[N, H, W, 3]` -> frames `[H, W, 3]` (views when binary)."""
    layout = pixel_layout(shape)
    if layout is None:
        raise BadInferenceRequest(
            f"UINT8 input shape {shape[:8]} is not supported: send [H, W, 3], [H, W] or [N, H, W, 3]"
        )
    clip, height, width = layout
    check_clip(clip, height, width, config)  # before anything of that size exists
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


def _encoded(shape: list[int], data: object, headers: Mapping[str, str], config: HandlerConfig) -> Clip:
    """BYTES `[N]`: N encoded images, or one video segment, each decoded like a request body."""
    count = math.prod(shape)
    if count == 0:
        raise EmptyFrame(f"BYTES input of shape {shape} holds no element")
    if count > config.max_clip_frames:
        raise ClipTooLarge(f"BYTES input of {count} elements is above the maximum "
                           f"{config.max_clip_frames} frames per clip")
    elements = _elements(data, count)
    if count == 1:
        return decode_body(elements[0], None, headers, config)
    segments = [index for index, element in enumerate(elements) if is_segment(element)]
    if segments:
        raise BadInferenceRequest(
            f"BYTES input of {count} elements holds a video segment (element {segments[0]}): send "
            "a segment alone, as BYTES of shape [1], or several encoded images (JPEG, PNG, npy)"
        )
    return decode_clip([partial(_element, i, e, headers, config) for i, e in enumerate(elements)],
                       config, f"BYTES input of {count} elements")


def _element(index: int, element: bytes, headers: Mapping[str, str], config: HandlerConfig) -> Clip:
    try:
        return decode_body(element, None, headers, config)
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
