"""One request's body -> its frames (uint8 `[H, W, 3]` arrays), or a FrameError.

Every size is checked from a header before anything of that size is allocated.
"""

from __future__ import annotations

import enum
import io
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib import format as npy_format
from PIL import Image, UnidentifiedImageError

from handler import jpeg
from handler.clip import Clip, Meta, letterbox_size
from handler.config import HandlerConfig, Resize
from handler.errors import CorruptFrame, EmptyFrame, FrameTooLarge, UnsupportedContentType
from handler.formats import Format, media_type, resolve, unwrapped
from handler.limits import Limits
from handler.looks import Watch
from handler.video import decode_segment

_NPY_MAX_HEADER = 4096
# NumPy parses npy headers with ast.literal_eval, and CPython's parser is not thread-safe
# before 3.13 ("SystemError: AST constructor recursion depth mismatch", cpython gh-106905):
# requests are decoded in parallel threads, so the (tiny) header parse is serialised.
_NPY_HEADER_LOCK = threading.Lock()


class PixelFormat(enum.Enum):
    """`X-Pixel-Format` of a raw `application/octet-stream` body."""

    RGB24 = "rgb24"
    BGR24 = "bgr24"
    GRAY8 = "gray8"

    @property
    def channels(self) -> int:
        return 1 if self is PixelFormat.GRAY8 else 3


@dataclass(frozen=True, slots=True)
class DeferredJpeg:
    """A JPEG frame whose header was read and checked; decoded later, into the buffer it goes to.

    Only `decode(..., lazy=True)` returns these, so the decoder can write straight into a
    chunk's uint8 staging slot instead of into an array that is then copied there.

    Attributes:
        body: the JPEG bytes.
        shape: `(h, w, 3)`, the pixels it decodes to.
        config: the limits (for the Pillow fallback).
    """

    body: bytes | bytearray
    shape: tuple[int, int, int]
    config: HandlerConfig

    def decode_into(self, out: np.ndarray) -> None:
        """Writes the pixels into `out` (`[h, w, 3]`): decoded in place when `out` is contiguous
        uint8, otherwise decoded and copied (converting to `out`'s dtype).

        Raises:
            CorruptFrame: the body past its header cannot be decoded.
        """
        if out.dtype == np.uint8 and out.flags.c_contiguous and jpeg.decode_into(self.body, out):
            return
        decoded = jpeg.decode(self.body, lambda h, w: None)
        pixels = decoded[0] if decoded is not None else _decode_image(self.body, "JPEG", self.config)
        np.copyto(out, pixels)


def decode_clip(decoders: Iterable[Callable[[], Clip]], config: HandlerConfig, what: str) -> Clip:
    """Image clips (multipart parts, OIP BYTES elements) decoded one after another and joined.

    The clip limits are checked after each one, so at most `max_clip_pixels` plus one part's
    pixels are ever held: a form of 32 tiny 4K PNGs stops at the first one over the limit.

    Raises:
        ClipTooLarge: naming `what` and the limit; or the FrameError of the part that failed.
    """
    limits = Limits.of(config)
    clips: list[Clip] = []
    frames = pixels = 0
    for decode_one in decoders:
        clip = decode_one()
        sizes = clip.own_sizes
        frames += len(sizes)
        pixels += sum(h * w for h, w in sizes)
        limits.held(frames, pixels, what, "holds at least")
        clips.append(clip)
    return Clip.join(clips)


def decode(body: object, content_type: str | None, meta: Meta, config: HandlerConfig,
           lazy: bool = False) -> Clip:
    """Decodes one request (or one multipart part) into its frames.

    Args:
        body: the request body as TorchServe hands it (bytes for binary content types).
        content_type: the body's Content-Type; None or a generic one: found from the bytes.
        meta: what the request's headers say (raw pixels' size and format, sample rate).
        config: the limits to enforce.
        lazy: a JPEG that libjpeg-turbo takes (with `resize: pad`) comes back as a
            `DeferredJpeg`, checked from its header but not decoded yet.

    Raises:
        FrameError: the request cannot be served; its status says why.
    """
    if not isinstance(body, (bytes, bytearray)):
        raise UnsupportedContentType(
            f"Content-Type {media_type(content_type) or '(none)'!r} with a "
            f"{type(body).__name__} body is not supported: send image/jpeg, image/png, "
            "application/x-npy, application/octet-stream or a video segment"
        )
    if not body:
        raise EmptyFrame("the request body is empty")
    body = unwrapped(body, content_type, meta.sized)
    fmt = resolve(body, content_type, meta.sized)
    limits = Limits.of(config)
    if fmt is Format.JPEG:
        if lazy and config.resize is Resize.PAD:
            size = jpeg.header(body, lambda h, w: limits.frame(w, h))
            if size is not None:
                return Clip([DeferredJpeg(body, (*size, 3), config)])
        pixels, size = _decode_jpeg(body, config, shrink=meta.motion is None)  # regions need all pixels
        return Clip([pixels], sizes=None if pixels.shape[:2] == size else [size])
    if fmt is Format.PNG:
        return Clip([_decode_image(body, fmt.name, config)])
    if fmt is Format.NPY:
        return Clip(_decode_npy(body, limits))
    if fmt is Format.RAW:
        return Clip(_decode_raw(body, meta, limits))
    return decode_segment(body, fmt, meta.sample_fps, config, Watch.of(meta))


def pixel_layout(shape: Sequence[int]) -> tuple[int, int, int] | None:
    """`(frames, height, width)` of a uint8 pixel array shaped `[H, W]`, `[H, W, 3]` or
    `[N, H, W, 3]` (npy, OIP UINT8); None for any other shape."""
    if len(shape) == 2:
        return 1, shape[0], shape[1]
    if len(shape) == 3 and shape[2] == 3:
        return 1, shape[0], shape[1]
    if len(shape) == 4 and shape[3] == 3:
        return shape[0], shape[1], shape[2]
    return None


def _decode_jpeg(body: bytes | bytearray, config: HandlerConfig,
                 shrink: bool = True) -> tuple[np.ndarray, tuple[int, int]]:
    """libjpeg-turbo first (DCT-domain downscaling for a letterbox engine), Pillow as the fallback.

    Returns:
        The pixels and the frame's own (h, w); the pixels are smaller when decoded for a
        letterbox engine whose input is at most half the frame (not with `resize_antialias:
        false`, which resizes the whole frame as OpenCV does).
    """
    shrink = shrink and config.letterboxed and config.resize_antialias
    input_size = config.input_size if shrink else None

    def target(height: int, width: int) -> tuple[int, int]:
        assert input_size is not None
        return letterbox_size(height, width, input_size)

    def check(height: int, width: int) -> None:
        Limits.of(config).frame(width, height)

    decoded = jpeg.decode(body, check, target if input_size is not None else None)
    if decoded is not None:
        return decoded
    pixels = _decode_image(body, "JPEG", config)
    return pixels, pixels.shape[:2]


def _decode_image(body: bytes | bytearray, fmt: str, config: HandlerConfig) -> np.ndarray:
    try:
        with Image.open(io.BytesIO(body), formats=[fmt]) as image:
            width, height = image.size
            Limits.of(config).frame(width, height)
            rgb = image.convert("RGB") if image.mode != "RGB" else image
            rgb.load()
            return np.asarray(rgb)
    except UnidentifiedImageError:
        raise CorruptFrame(f"the body is not a {fmt} image") from None
    except Image.DecompressionBombError as err:  # Pillow's own limit, above ours
        raise FrameTooLarge(f"the {fmt} image is too large: {err}") from None
    except (OSError, SyntaxError, ValueError, EOFError) as err:
        raise CorruptFrame(f"cannot decode the {fmt} image: {err}") from None


def _decode_npy(body: bytes | bytearray, limits: Limits) -> list[np.ndarray]:
    # Only the header is read through a stream: copy at most its bytes, not the pixels.
    stream = io.BytesIO(memoryview(body)[: _NPY_MAX_HEADER + 16].tobytes())
    try:
        version = npy_format.read_magic(stream)
        read_header = {
            (1, 0): npy_format.read_array_header_1_0,
            (2, 0): npy_format.read_array_header_2_0,
        }.get(version)
        if read_header is None:
            raise ValueError(f"npy format version {version} is not supported")
        with _NPY_HEADER_LOCK:
            shape, fortran_order, dtype = read_header(stream, max_header_size=_NPY_MAX_HEADER)
    except (ValueError, SyntaxError, TypeError, EOFError) as err:
        raise CorruptFrame(f"malformed npy header: {err}") from None
    if dtype != np.uint8:
        raise CorruptFrame(f"npy dtype {dtype} is not supported: send uint8 pixels")
    layout = pixel_layout(shape)
    if layout is None:
        raise CorruptFrame(f"npy shape {shape} is not supported: send (H, W, 3), (H, W) or (N, H, W, 3)")
    limits.clip(*layout)
    offset = stream.tell()
    expected = math.prod(shape)
    if len(body) - offset != expected:
        raise CorruptFrame(
            f"npy header declares shape {shape} ({expected} bytes) but the body holds "
            f"{len(body) - offset} bytes of data"
        )
    array = np.frombuffer(body, np.uint8, count=expected, offset=offset)
    array = array.reshape(shape, order="F" if fortran_order else "C")
    return _split_clip(array)


def _decode_raw(body: bytes | bytearray, meta: Meta, limits: Limits) -> list[np.ndarray]:
    height, width = meta.frame_size()
    try:
        pixel_format = PixelFormat(meta.pixel_format)
    except ValueError:
        choices = [p.value for p in PixelFormat]
        raise CorruptFrame(f"X-Pixel-Format {meta.pixel_format!r} is not supported: use one of {choices}") from None
    limits.frame(width, height)
    frame_bytes = width * height * pixel_format.channels
    clip, remainder = divmod(len(body), frame_bytes)
    if remainder:
        raise CorruptFrame(
            f"raw body of {len(body)} bytes is not a whole number of {width}x{height} "
            f"{pixel_format.value} frames ({frame_bytes} bytes each)"
        )
    limits.clip(clip, height, width)
    array = np.frombuffer(body, np.uint8).reshape(clip, height, width, pixel_format.channels)
    if pixel_format is PixelFormat.BGR24:
        array = array[..., ::-1]
    return _split_clip(array)


def _split_clip(array: np.ndarray) -> list[np.ndarray]:
    """`[N, H, W, C]`, `[H, W, 3]` or `[H, W]` -> N views of `[H, W, 3]` (grey is broadcast)."""
    if array.ndim == 2:
        array = array[None, :, :, None]
    elif array.ndim == 3:
        array = array[None]
    if array.shape[-1] == 1:
        array = np.broadcast_to(array, (*array.shape[:-1], 3))
    return list(array)
