"""JPEG through libjpeg-turbo (simplejpeg): limits from the header, then one decode, no copies.

A one-off `python -m bench.jpeg` (2026-11-30, `git show 1135340:bench/jpeg.py`) measured it against
Pillow and PyTurboJPEG on 720p and 1080p frames here (docs/performance.md). Pillow stays the
fallback: for what this path does not take (CMYK/YCCK, anything simplejpeg cannot read) Pillow
gives the final answer, including the error.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Size = tuple[int, int]

# libjpeg-turbo converts these to RGB itself; CMYK/YCCK (Adobe) are left to Pillow.
_COLORSPACES = frozenset({"YCbCr", "Gray", "RGB"})


def header(body: bytes | bytearray, check: Callable[[int, int], None]) -> Size | None:
    """The frame's (height, width) from its header, after `check(height, width)`; None when
    this path cannot take the body (not readable by libjpeg-turbo here, CMYK/YCCK): use Pillow."""
    try:
        import simplejpeg  # type: ignore[import-untyped]
    except ImportError:  # optional at runtime: Pillow serves JPEG too, slower
        return None
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(body)
    except ValueError:
        return None
    if colorspace not in _COLORSPACES:
        return None
    check(height, width)
    return height, width


def decode(body: bytes | bytearray, check: Callable[[int, int], None],
           target: Callable[[int, int], Size] | None = None) -> tuple[np.ndarray, Size] | None:
    """Decodes a JPEG body to `[h, w, 3]` uint8 RGB, possibly shrunk in the DCT domain.

    Args:
        body: the JPEG bytes (read in place: no `BytesIO`, no copy of the body).
        check: called with the header's (height, width) before anything is decoded; raises
            to refuse the frame.
        target: given the frame's (height, width), the smallest (h, w) the caller needs (a
            letterbox engine's fitted size). When that is at most half the frame, the decoder
            scales by 1/2, 1/4 or 1/8 in the DCT domain, as far as the result stays at least
            that large.

    Returns:
        The pixels and the frame's own (height, width), or None when this path cannot take
        the body (see `header`, or truncated/corrupt past the header): use Pillow.
    """
    size = header(body, check)
    if size is None:
        return None
    import simplejpeg

    min_h, min_w = dct_size(*size, target(*size)) if target is not None else (0, 0)
    try:
        pixels = simplejpeg.decode_jpeg(body, "RGB", min_height=min_h, min_width=min_w)
    except ValueError:
        return None  # truncated or corrupt: Pillow decides, with its own message
    return pixels, size


def decode_into(body: bytes | bytearray, out: np.ndarray) -> bool:
    """Decodes a JPEG straight into `out` (`[h, w, 3]` contiguous uint8 of the frame's size).

    Returns:
        False when it could not (corrupt past the header): `out` is then undefined.
    """
    import simplejpeg

    try:
        simplejpeg.decode_jpeg(body, "RGB", buffer=out)
    except ValueError:
        return False
    return True


def dct_size(height: int, width: int, target: Size) -> Size:
    """The size libjpeg-turbo decodes to at the largest of 1/8, 1/4, 1/2 that still covers
    `target`; (0, 0) (full size) when the target is more than half the frame."""
    for factor in (8, 4, 2):
        scaled = -(-height // factor), -(-width // factor)  # libjpeg rounds scaled sizes up
        if scaled[0] >= target[0] and scaled[1] >= target[1]:
            return scaled
    return 0, 0
