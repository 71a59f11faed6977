import io

import numpy as np
import pytest
from PIL import Image

from handler.clip import Meta
from handler.config import HandlerConfig
from handler.errors import (
    ClipTooLarge,
    CorruptFrame,
    EmptyFrame,
    FrameTooLarge,
    UnsupportedContentType,
)
from handler.frames import decode
from tests import support

CONFIG = HandlerConfig.from_mapping({"max_width": 1920, "max_height": 1080, "max_clip_frames": 4})


def _decode(body, content_type, **headers):
    return decode(body, content_type, Meta.parse(headers), CONFIG).frames


def test_png_is_lossless():
    pixels = support.frame(37, 53, seed=1)
    [out] = _decode(support.png(pixels), "image/png")
    np.testing.assert_array_equal(out, pixels)


def test_jpeg_decodes_to_rgb_of_its_size():
    [out] = _decode(support.jpeg(support.frame(72, 128)), "image/jpeg; charset=binary")
    assert out.shape == (72, 128, 3) and out.dtype == np.uint8


@pytest.mark.parametrize("mode", ["L", "RGBA", "P", "LA"])
def test_grey_rgba_and_palette_png_become_rgb(mode):
    image = Image.fromarray(support.frame(20, 30)).convert(mode)
    body = _png(image)
    with Image.open(io.BytesIO(body)) as sent:
        assert sent.mode == mode  # the body really is a grey / RGBA / palette / grey+alpha PNG
    [out] = _decode(body, "image/png")
    np.testing.assert_array_equal(out, np.asarray(image.convert("RGB")))


def test_jpeg_decodes_like_pillow_from_a_bytearray():
    body = support.jpeg(support.frame(720, 1280, 2))
    clip = decode(bytearray(body), "image/jpeg", Meta(), CONFIG)
    np.testing.assert_array_equal(clip.frames[0], support.decoded(body))
    assert clip.sizes is None


@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_grey_and_cmyk_jpeg_become_rgb_as_pillow_converts_them(mode):
    image = Image.fromarray(support.frame(40, 50)).convert(mode)
    buf = io.BytesIO()
    image.save(buf, format="JPEG")
    [out] = _decode(buf.getvalue(), "image/jpeg")
    assert out.shape == (40, 50, 3)
    np.testing.assert_array_equal(out, np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")))


def test_jpeg_limits_are_checked_from_the_header():
    body = support.jpeg(np.zeros((8, 2000, 3), np.uint8))
    with pytest.raises(FrameTooLarge, match="frame 2000x8 is above the maximum 1920x1080"):
        _decode(body, "image/jpeg")


@pytest.mark.parametrize(("input_size", "decoded"), [
    ([128, 128], (90, 160)),    # fitted 72x128: 1/8 of 720x1280 is still at least that
    ([400, 400], (360, 640)),   # fitted 225x400: 1/2 (1/4 would be 180x320, too small)
    ([640, 640], (360, 640)),   # fitted 360x640: exactly half
    ([700, 700], (720, 1280)),  # fitted 394x700 is more than half: decoded at full size
])
def test_letterbox_engines_get_jpeg_shrunk_in_the_dct_domain(input_size, decoded):
    config = HandlerConfig.from_mapping({"resize": "letterbox", "input_size": input_size})
    clip = decode(support.jpeg(support.frame(720, 1280)), "image/jpeg", Meta(), config)
    assert clip.frames[0].shape == (*decoded, 3)
    assert clip.sizes == (None if decoded == (720, 1280) else [(720, 1280)])


def _png(image):
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def test_npy_frame_grey_and_clip():
    pixels = support.frame(10, 12)
    [rgb] = _decode(support.npy(pixels), "application/x-npy")
    np.testing.assert_array_equal(rgb, pixels)
    [grey] = _decode(support.npy(pixels[..., 0].copy()), "application/x-npy")
    np.testing.assert_array_equal(grey, np.repeat(pixels[..., :1], 3, axis=2))
    clip = np.stack([support.frame(10, 12, seed) for seed in range(3)])
    frames = _decode(support.npy(clip), "application/x-npy")
    assert len(frames) == 3
    np.testing.assert_array_equal(frames[2], clip[2])


def test_npy_fortran_order():
    pixels = np.asfortranarray(support.frame(9, 7))
    [out] = _decode(support.npy(pixels), "application/x-npy")
    np.testing.assert_array_equal(out, pixels)


@pytest.mark.parametrize(("fmt", "convert"), [
    ("rgb24", lambda p: p), ("bgr24", lambda p: p[..., ::-1]), ("gray8", lambda p: p[..., 0])])
def test_raw_pixel_formats(fmt, convert):
    pixels = support.frame(6, 8)
    body = np.ascontiguousarray(convert(pixels)).tobytes() * 2
    frames = _decode(body, "application/octet-stream", **{
        "x-frame-width": "8", "x-frame-height": "6", "x-pixel-format": fmt})
    expected = pixels if fmt != "gray8" else np.repeat(pixels[..., :1], 3, axis=2)
    assert len(frames) == 2
    np.testing.assert_array_equal(frames[1], expected)


def test_raw_defaults_to_rgb24():
    pixels = support.frame(4, 5)
    [out] = _decode(pixels.tobytes(), "application/octet-stream", **{"x-frame-width": "5", "x-frame-height": "4"})
    np.testing.assert_array_equal(out, pixels)


def _npy_header_only(shape, descr="|u1"):
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    return support.npy(np.zeros((1,), np.uint8))[:8] + _header_bytes(header)


def _header_bytes(header):
    text = repr(header).encode("latin1")
    pad = 64 - (10 + len(text) + 1) % 64
    text = text + b" " * pad + b"\n"
    return len(text).to_bytes(2, "little") + text


JPEG = support.jpeg(support.frame(64, 64))
PNG = support.png(support.frame(64, 64))
RAW = {"x-frame-width": "8", "x-frame-height": "6"}


@pytest.mark.parametrize(("body", "content_type", "headers", "error"), [
    (JPEG[: len(JPEG) // 2], "image/jpeg", {}, CorruptFrame),
    (PNG[: len(PNG) // 2], "image/png", {}, CorruptFrame),
    (JPEG, "image/png", {}, CorruptFrame),
    (b"not an image", "image/jpeg", {}, CorruptFrame),
    (b"", "image/jpeg", {}, EmptyFrame),
    (JPEG, "image/gif", {}, UnsupportedContentType),
    (b"GIF89a\x01\x00\x01\x00", None, {}, UnsupportedContentType),
    (b"GIF89a\x01\x00\x01\x00", "application/octet-stream", {}, UnsupportedContentType),
    ({"a": 1}, "application/json", {}, UnsupportedContentType),
    (support.npy(np.zeros((4, 4, 3), np.float32)), "application/x-npy", {}, CorruptFrame),
    (support.npy(np.zeros((4, 4, 4), np.uint8)), "application/x-npy", {}, CorruptFrame),
    (support.npy(np.zeros((0, 4, 3), np.uint8)), "application/x-npy", {}, EmptyFrame),
    (support.npy(np.zeros((4, 4, 3), np.uint8))[:-5], "application/x-npy", {}, CorruptFrame),
    (support.npy(np.zeros((4, 4, 3), np.uint8)) + b"x", "application/x-npy", {}, CorruptFrame),
    (_npy_header_only((100000, 100000, 3)), "application/x-npy", {}, FrameTooLarge),
    (_npy_header_only((1000, 1000, 3)), "application/x-npy", {}, CorruptFrame),
    (_npy_header_only((4, 4, 3), descr="|O"), "application/x-npy", {}, CorruptFrame),
    (_npy_header_only((5, 8, 8, 3)), "application/x-npy", {}, ClipTooLarge),
    (b"\x93NUMPY\x01\x00garbage", "application/x-npy", {}, CorruptFrame),
    (bytes(8 * 6 * 3 + 1), "application/octet-stream", RAW, CorruptFrame),
    (bytes(8 * 6 * 3 * 5), "application/octet-stream", RAW, ClipTooLarge),
    (bytes(10), "application/octet-stream", {"x-frame-width": "-5", "x-frame-height": "2"}, CorruptFrame),
    (bytes(10), "application/octet-stream", {"x-frame-width": "0", "x-frame-height": "2"}, EmptyFrame),
    (bytes(10), "application/octet-stream", {"x-frame-width": "99999", "x-frame-height": "2"}, FrameTooLarge),
    (bytes(10), "application/octet-stream", {**RAW, "x-pixel-format": "yuv420"}, CorruptFrame),
])
def test_bad_input_is_a_typed_error(body, content_type, headers, error):
    with pytest.raises(error):
        decode(body, content_type, Meta.parse(headers), CONFIG)


def test_decompression_bomb_is_refused_from_the_header():
    image = Image.new("L", (20000, 20000))
    with pytest.raises(FrameTooLarge):
        _decode(_png(image), "image/png")
