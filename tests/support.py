"""Test frames built from real photographs, their encodings, and an independent frame_quality."""

from __future__ import annotations

import io
from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "data" / "images"


@cache
def _photos() -> tuple[Image.Image, ...]:
    return tuple(Image.open(p).convert("RGB") for p in sorted(IMAGES.glob("*.png")))


def frame(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A `[height, width, 3]` uint8 frame: a photograph scaled to cover the size, panned by seed."""
    photo = _photos()[seed % len(_photos())]
    scale = max(height / photo.height, width / photo.width) * (1.0 + (seed % 7) / 10)
    size = (max(width, round(photo.width * scale)), max(height, round(photo.height * scale)))
    big = photo.resize(size, Image.BILINEAR)
    left = (seed * 37) % (size[0] - width + 1)
    top = (seed * 53) % (size[1] - height + 1)
    return np.asarray(big.crop((left, top, left + width, top + height)))


def quality(pixels: np.ndarray) -> dict[str, float]:
    """DESIGN section 5 in float64 NumPy, independent of the model's code."""
    rgb = pixels.astype(np.float64)
    y = 0.299 * rgb[..., 0] + 0.587 * rgb[..., 1] + 0.114 * rgb[..., 2]
    sharpness = 0.0
    if y.shape[0] >= 3 and y.shape[1] >= 3:
        lap = y[:-2, 1:-1] + y[2:, 1:-1] + y[1:-1, :-2] + y[1:-1, 2:] - 4 * y[1:-1, 1:-1]
        sharpness = float(lap.var())
    return {"brightness": float(y.mean()), "contrast": float(y.std()), "sharpness": sharpness}


def jpeg(pixels: np.ndarray, quality: int = 85) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=quality)
    return out.getvalue()


def png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG", compress_level=1)
    return out.getvalue()


def npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def decoded(body: bytes) -> np.ndarray:
    """What a JPEG/PNG body decodes to (the handler's input), for reference values."""
    return np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))


def assert_quality(outputs: dict, pixels: np.ndarray, rel: float = 1e-4) -> None:
    expected = quality(pixels)
    for name, value in expected.items():
        assert abs(outputs[name] - value) <= rel * max(abs(value), 1.0), (name, outputs[name], value)
