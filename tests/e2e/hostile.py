"""Hostile payloads by class: (class, name, body, content_type, headers, expected status)."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image

from tests import support

RAW = "application/octet-stream"
NPY = "application/x-npy"


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR declares width x height, followed by a tiny IDAT (a decompression bomb)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 1024)) + chunk(b"IEND", b"")


def _jpeg_with_size(jpeg: bytes, width: int, height: int) -> bytes:
    """The JPEG with its SOF0 frame header rewritten to declare another size."""
    at = jpeg.index(b"\xff\xc0") + 5
    return jpeg[:at] + struct.pack(">HH", height, width) + jpeg[at + 4:]


def _npy_header(shape, descr: str = "|u1", body: bytes = b"") -> bytes:
    header = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode()
    header += b" " * (64 - (10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + body


def _npy(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=allow_pickle)
    return out.getvalue()


_BOUNDARY = "videoboundary42"


def _part(field: str, body: bytes, content_type: str = "image/jpeg") -> bytes:
    return (f"--{_BOUNDARY}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"f\"\r\n"
            f"Content-Type: {content_type}\r\n\r\n").encode() + body + b"\r\n"


def _form(*parts: bytes, end: bool = True, content_type: str | None = None) -> tuple[bytes, str]:
    """A multipart body made by hand (so it can be malformed) and its Content-Type."""
    body = b"".join(parts) + (f"--{_BOUNDARY}--\r\n".encode() if end else b"")
    return body, content_type or f"multipart/form-data; boundary={_BOUNDARY}"


def _field(name: str, value: str) -> bytes:
    return f"--{_BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n".encode()


def payloads() -> list[tuple[str, str, bytes, str, dict, int]]:
    frame = support.frame(120, 160, 9)
    jpeg = support.jpeg(frame)
    png = support.png(frame)
    gif = io.BytesIO()
    Image.fromarray(frame).save(gif, format="GIF")
    raw_headers = {"X-Frame-Width": "160", "X-Frame-Height": "120"}
    cases = [
        ("truncated_jpeg", "first 10 bytes", jpeg[:10], "image/jpeg", {}),
        ("truncated_jpeg", "header only", jpeg[:600], "image/jpeg", {}),
        ("truncated_jpeg", "half", jpeg[: len(jpeg) // 2], "image/jpeg", {}),
        ("truncated_jpeg", "all but the end", jpeg[:-200], "image/jpeg", {}),
        ("corrupt_jpeg", "garbage after SOI", b"\xff\xd8" + bytes(range(256)) * 8, "image/jpeg", {}),
        ("corrupt_jpeg", "no SOI", jpeg[2:], "image/jpeg", {}),
        ("corrupt_jpeg", "zero width in SOF", _jpeg_with_size(jpeg, 0, 120), "image/jpeg", {}),
        ("corrupt_jpeg", "png labelled jpeg", png, "image/jpeg", {}),
        ("truncated_png", "signature only", png[:8], "image/png", {}),
        ("truncated_png", "half", png[: len(png) // 2], "image/png", {}),
        ("corrupt_png", "bad IHDR crc", png[:29] + b"\0\0\0\0" + png[33:], "image/png", {}),
        ("corrupt_png", "jpeg labelled png", jpeg, "image/png", {}),
        ("decompression_bomb", "png 30000x30000", _png_header_only(30000, 30000), "image/png", {}),
        ("decompression_bomb", "png 65535x65535", _png_header_only(65535, 65535), "image/png", {}),
        ("decompression_bomb", "jpeg 60000x60000", _jpeg_with_size(jpeg, 60000, 60000), "image/jpeg", {}),
        ("decompression_bomb", "png 4000x3000", _png_header_only(4000, 3000), "image/png", {}),
        ("npy_huge_shape", "100000x100000x3", _npy_header((100000, 100000, 3)), NPY, {}),
        ("npy_huge_shape", "clip of 10**9", _npy_header((10**9, 2, 2, 3)), NPY, {}),
        ("npy_huge_shape", "header larger than body", _npy_header((1000, 1000, 3), body=bytes(100)), NPY, {}),
        ("npy_huge_shape", "body larger than header", _npy_header((2, 2, 3), body=bytes(100)), NPY, {}),
        ("npy_bad_dtype", "pickled objects", _npy(np.array([{"a": 1}, None], dtype=object), True), NPY, {}),
        ("npy_bad_dtype", "object dtype header", _npy_header((4, 4, 3), "|O", bytes(384)), NPY, {}),
        ("npy_bad_dtype", "float32", _npy(np.zeros((4, 4, 3), np.float32)), NPY, {}),
        ("npy_bad_dtype", "int16", _npy(np.zeros((4, 4, 3), np.int16)), NPY, {}),
        ("npy_bad_dtype", "structured", _npy(np.zeros((4, 4), dtype=[("r", "u1"), ("g", "u1")])), NPY, {}),
        ("npy_bad_dtype", "4 channels", _npy(np.zeros((4, 4, 4), np.uint8)), NPY, {}),
        ("npy_bad_dtype", "not npy", b"\x93NUMPY\x09\x00junk", NPY, {}),
        ("raw_wrong_length", "one byte short", frame.tobytes()[:-1], RAW, raw_headers),
        ("raw_wrong_length", "one byte long", frame.tobytes() + b"\0", RAW, raw_headers),
        ("raw_bad_headers", "no size headers", frame.tobytes(), RAW, {}),
        ("raw_bad_headers", "negative width", frame.tobytes(), RAW, {**raw_headers, "X-Frame-Width": "-160"}),
        ("raw_bad_headers", "absurd height", frame.tobytes(), RAW, {**raw_headers, "X-Frame-Height": "999999999999"}),
        ("raw_bad_headers", "width not a number", frame.tobytes(), RAW, {**raw_headers, "X-Frame-Width": "160px"}),
        ("raw_bad_headers", "float width", frame.tobytes(), RAW, {**raw_headers, "X-Frame-Width": "1.6e2"}),
        ("raw_bad_headers", "unknown pixel format", frame.tobytes(), RAW, {**raw_headers, "X-Pixel-Format": "yuv420p"}),
        ("zero_sized", "npy 0x0x3", _npy(np.zeros((0, 0, 3), np.uint8)), NPY, {}),
        ("zero_sized", "npy 1x0x3", _npy(np.zeros((1, 0, 3), np.uint8)), NPY, {}),
        ("zero_sized", "npy empty clip", _npy(np.zeros((0, 4, 4, 3), np.uint8)), NPY, {}),
        ("zero_sized", "raw width 0", b"\0" * 10, RAW, {**raw_headers, "X-Frame-Width": "0"}),
        ("empty_body", "jpeg", b"", "image/jpeg", {}),
        ("empty_body", "png", b"", "image/png", {}),
        ("empty_body", "npy", b"", NPY, {}),
        ("empty_body", "raw", b"", RAW, raw_headers),
        ("unsupported_type", "gif", gif.getvalue(), "image/gif", {}),
        ("unsupported_type", "text", b"hello", "text/plain", {}),
        ("unsupported_type", "json", b'{"frame": [1, 2, 3]}', "application/json", {}),
        ("unsupported_type", "webp label", jpeg, "image/webp", {}),
        ("unsupported_type", "video", jpeg, "video/mp4", {}),
        ("clip_over_limit", "npy 33 frames", _npy(np.zeros((33, 8, 8, 3), np.uint8)), NPY, {}),
        ("clip_over_limit", "raw 33 frames", bytes(33 * 8 * 8 * 3), RAW,
         {"X-Frame-Width": "8", "X-Frame-Height": "8"}),
        ("clip_over_limit", "npy 9 frames of 4k", _npy_header((9, 2160, 3840, 3)), NPY, {}),
        ("frame_over_limit", "npy 4000x3000", _npy_header((3000, 4000, 3)), NPY, {}),
        ("frame_over_limit", "raw 5000 wide", bytes(5000 * 3), RAW,
         {"X-Frame-Width": "5000", "X-Frame-Height": "1"}),
        # Multipart forms are served (DESIGN 4a); malformed ones are refused by the handler. Forms
        # netty cannot parse at all (a part without headers or name) get TorchServe's own 500.
        ("malformed_multipart", "no file part", *_form(_field("stream_id", "cam-1")), {}),
        ("malformed_multipart", "empty form", *_form(), {}),
        ("malformed_multipart", "no closing boundary", *_form(_part("data", jpeg), end=False), {}),
        ("malformed_multipart", "wrong boundary", _form(_part("data", jpeg))[0].replace(b"videoboundary42", b"x"),
         _form()[1], {}),
        ("malformed_multipart", "no boundary parameter", *_form(_part("data", jpeg), content_type="multipart/form-data"), {}),
        ("malformed_multipart", "truncated jpeg part", *_form(_part("data", jpeg[:200])), {}),
        ("malformed_multipart", "empty part", *_form(_part("data", b"")), {}),
        ("malformed_multipart", "text part", *_form(_part("data", b"hello", "text/plain")), {}),
        ("malformed_multipart", "png labelled jpeg part", *_form(_part("f0", jpeg), _part("f1", png, "image/jpeg")), {}),
        ("malformed_multipart", "33 parts", *_form(*(_part(f"f{i}", png, "image/png") for i in range(33))), {}),
    ]
    return [(kind, name, body, content_type, headers, 400)
            for kind, name, body, content_type, headers in cases]
