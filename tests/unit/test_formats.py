"""The one format detector (DESIGN 4a): Content-Type, aliases, and the first bytes."""

from __future__ import annotations

import pytest

from handler.errors import UnsupportedContentType
from handler.formats import Format, resolve, sniff
from tests import support

JPEG = support.jpeg(support.frame(16, 16))
PNG = support.png(support.frame(16, 16))
NPY = support.npy(support.frame(4, 4))


@pytest.mark.parametrize(("content_type", "expected"), [
    ("image/jpeg", Format.JPEG), ("image/jpg", Format.JPEG), ("IMAGE/PJPEG; q=1", Format.JPEG),
    ("image/png", Format.PNG), ("image/x-png", Format.PNG), ("application/x-npy", Format.NPY),
    ("video/mp4", Format.MP4), ("video/mp2t", Format.MPEGTS), ("video/h264", Format.H264),
    ("video/h265", Format.H265),
])
def test_media_types_and_aliases(content_type, expected):
    assert resolve(b"anything", content_type, {}) is expected


@pytest.mark.parametrize(("body", "expected"), [
    (JPEG, Format.JPEG), (PNG, Format.PNG), (NPY, Format.NPY),
    (b"\x00\x00\x00\x20ftypisom" + bytes(20), Format.MP4),
    (b"\x00\x00\x00\x18styp" + bytes(20), Format.MP4),
    ((b"\x47" + bytes(187)) * 3, Format.MPEGTS),
    (b"\x00\x00\x00\x01\x09\xf0\x00\x00\x00\x01\x67", Format.H264),  # AUD, SPS
    (b"\x00\x00\x01\x67\x64\x00\x1f", Format.H264),  # 3-byte start code, SPS
    (b"\x00\x00\x00\x01\x40\x01\x0c\x01", Format.H265),  # VPS
    (b"\x00\x00\x00\x01\x46\x01\x10", Format.H265),  # AUD
])
def test_no_or_generic_type_is_found_from_the_bytes(body, expected):
    assert sniff(body) is expected
    assert resolve(body, None, {}) is expected
    assert resolve(body, "application/octet-stream", {}) is expected


def test_octet_stream_with_size_headers_is_raw_pixels():
    assert resolve(JPEG, "application/octet-stream", {"x-frame-width": "4", "x-frame-height": "4"}) is Format.RAW


@pytest.mark.parametrize("body", [b"GIF89a\x01\x00", b"\x00\x01\x02\x03\x04", b"", (b"\x47" + bytes(200))])
def test_unknown_bytes_name_what_was_seen(body):
    with pytest.raises(UnsupportedContentType) as caught:
        resolve(body, None, {})
    assert (body[:8].hex(" ") or "(empty)") in str(caught.value)


def test_unknown_content_type_is_refused_by_name():
    with pytest.raises(UnsupportedContentType, match="'image/gif' is not supported"):
        resolve(JPEG, "image/gif", {})
