"""Which format a request body is in: from its Content-Type, or from its first bytes (DESIGN 4a).

One function, `resolve`, used by every entry point (HTTP, multipart parts, gRPC, OIP BYTES).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from handler.errors import UnsupportedContentType


class Format(enum.Enum):
    """A body format the handler decodes."""

    JPEG = "jpeg"
    PNG = "png"
    NPY = "npy"
    RAW = "raw"  # application/octet-stream with X-Frame-Width/X-Frame-Height
    MP4 = "mp4"
    MPEGTS = "mpegts"
    H264 = "h264"  # Annex-B elementary stream
    H265 = "h265"

    @property
    def is_video(self) -> bool:
        return self in _VIDEO


_VIDEO = frozenset({Format.MP4, Format.MPEGTS, Format.H264, Format.H265})

MEDIA_TYPES: Mapping[str, Format] = {
    "image/jpeg": Format.JPEG,
    "image/jpg": Format.JPEG,
    "image/pjpeg": Format.JPEG,
    "image/png": Format.PNG,
    "image/x-png": Format.PNG,
    "application/x-npy": Format.NPY,
    "video/mp4": Format.MP4,
    "video/mp2t": Format.MPEGTS,
    "video/h264": Format.H264,
    "video/h265": Format.H265,
    "video/hevc": Format.H265,
}
#: Content-Types that say nothing about the format: the bytes decide.
GENERIC = frozenset({"", "application/octet-stream", "binary/octet-stream", "application/binary"})
_SUPPORTED = "image/jpeg, image/png, application/x-npy, application/octet-stream (raw pixels), " \
    "video/mp4, video/mp2t, video/h264 or video/h265"

_MP4_BOXES = (b"ftyp", b"styp", b"moov", b"moof")
_TS_PACKET = 188
# First NAL unit types an Annex-B stream starts with. H.265 (2-byte header, type in bits 1-6):
# VPS, SPS, PPS, AUD, prefix SEI, IDR_W_RADL, IDR_N_LP, CRA. H.264 (type in bits 0-4): non-IDR
# slice, IDR slice, SEI, SPS, PPS, AUD.
_H265_START = frozenset({32, 33, 34, 35, 39, 19, 20, 21})
_H264_START = frozenset({1, 5, 6, 7, 8, 9})


def media_type(content_type: str | None) -> str:
    """`'Image/JPEG; q=1'` -> `'image/jpeg'`; None -> `''`."""
    return (content_type or "").split(";")[0].strip().lower()


def resolve(body: bytes | bytearray | memoryview, content_type: str | None, sized: bool = False) -> Format:
    """The format of one body.

    A known media type (or alias) wins; `application/octet-stream` with a frame size (`sized`:
    `X-Frame-Width` or `X-Frame-Height` given) is raw pixels; no type or a generic one is
    decided by the first bytes.

    Raises:
        UnsupportedContentType: naming the Content-Type and the first bytes seen (as hex).
    """
    media = media_type(content_type)
    if media in MEDIA_TYPES:
        return MEDIA_TYPES[media]
    if media == "application/octet-stream" and sized:
        return Format.RAW
    if media in GENERIC:
        if sized and sniff(body) is None:  # raw pixels over gRPC or in an untyped form part
            return Format.RAW
        found = sniff(body)
        if found is not None:
            return found
        raise UnsupportedContentType(
            f"cannot tell the format of a body with Content-Type {media or '(none)'!r} from its "
            f"first bytes {bytes(body[:8]).hex(' ') or '(empty)'}: send {_SUPPORTED}, or raw "
            "pixels with X-Frame-Width and X-Frame-Height"
        )
    raise UnsupportedContentType(f"Content-Type {media!r} is not supported: send {_SUPPORTED}")


def unwrapped(body: bytes | bytearray, content_type: str | None, sized: bool) -> bytes | bytearray:
    """`body`, or the image it holds as base64 text where its format is to be found from its
    bytes (no Content-Type or a generic one, no raw frame size): JSON clients send images so."""
    if media_type(content_type) in GENERIC and not sized and sniff(body) is None:
        return from_base64(body) or body
    return body


def from_base64(body: bytes | bytearray | memoryview) -> bytes | None:
    """The bytes that `body` holds as base64 text (as TorchServe's vision handlers and KServe's
    examples send images in JSON), when they are a format this handler takes; else None (and
    `body`'s own first bytes are what a refusal names)."""
    import base64
    import binascii

    text = bytes(body).strip()
    if not text or sniff(text) is not None:
        return None
    try:
        decoded = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return decoded if sniff(decoded) is not None else None


def sniff(body: bytes | bytearray | memoryview) -> Format | None:
    """The format from the first bytes, or None when they match none."""
    head = bytes(body[:16])
    if head.startswith(b"\xff\xd8\xff"):
        return Format.JPEG
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return Format.PNG
    if head.startswith(b"\x93NUMPY"):
        return Format.NPY
    if head[4:8] in _MP4_BOXES:
        return Format.MP4
    if head[:1] == b"\x47" and len(body) > _TS_PACKET and body[_TS_PACKET] == 0x47:
        return Format.MPEGTS
    return _annex_b(head)


def _annex_b(head: bytes) -> Format | None:
    if head.startswith(b"\x00\x00\x00\x01"):
        nal = head[4:6]
    elif head.startswith(b"\x00\x00\x01"):
        nal = head[3:5]
    else:
        return None
    if len(nal) < 2 or nal[0] & 0x80:  # forbidden_zero_bit
        return None
    if (nal[0] >> 1) & 0x3F in _H265_START and nal[1] == 0x01:  # layer 0, temporal id 1
        return Format.H265
    if nal[0] & 0x1F in _H264_START:
        return Format.H264
    return None
