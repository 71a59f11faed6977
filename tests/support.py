"""Test frames built from real photographs, their encodings, and an independent frame_quality."""

from __future__ import annotations

import io
import re
import shutil
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from handler.clip import Request
from handler.config import HandlerConfig
from handler.doors import native, route
from handler.doors.wire import Response
from handler.metrics import BatchStats
from handler.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "data" / "images"


def fenced_block(page: Path, after: str, language: str) -> str:
    """The first fenced `language` block after the text `after` in `page` (README.md, docs/...)."""
    text = page.read_text()
    match = re.search(rf"```{language}\n(.*?)```", text[text.index(after):], re.S)
    assert match, f"no ```{language} block after {after!r} in {page.name}"
    return match[1]


def copy_checkout(dest: Path) -> Path:
    """The checkout copied to `dest` as a fresh clone has it: no virtual environments, archives,
    logs, keys, caches or the demo clip (serve.sh makes it). mtimes are kept."""
    shutil.copytree(ROOT, dest, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".venv-*", ".git", "model_store", "logs", "key_file.json", "__pycache__", ".pytest_cache",
        ".hypothesis", "*.egg-info", "build", "demo.ts", ".mypy_cache", ".ruff_cache"))
    return dest


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


def request(body: object, content_type: str | None = None, headers: dict[str, str] | None = None) -> Request:
    """A `/predictions` request as TorchServe hands it (a `body` key, its headers), through the
    native door."""
    typed = {"content-type": content_type} if content_type else {}
    return native.read({"body": body}, {"url_path": "/predictions/m", **typed, **(headers or {})})


class Answering(Pipeline):
    """The core with a door's answers, as `handler.service` gives them: `run` returns each
    request's `Response` (status, phrase, JSON body) and the batch's statistics."""

    def __init__(self, model: Any, config: HandlerConfig, *args: Any, door: Any = native, **kwargs: Any) -> None:
        super().__init__(model, config, *args, **kwargs)
        self.door = door
        self.config = config

    def run(self, requests: Sequence[Request]) -> tuple[list[Response], BatchStats]:  # type: ignore[override]
        outcomes, stats = super().run(requests)
        return [route.answer(self.door, r, o, stats, self.config) for r, o in zip(requests, outcomes)], stats


def read(item: dict[str, object], headers: dict[str, object], model: str = "m",
         config: HandlerConfig | None = None) -> Request:
    """An item and its header map as TorchServe hands them, through the door they pick."""
    return route.read(item, headers, model, config or HandlerConfig())[1]


def calibrated(model: Any, features: Any, batch: Any) -> Any:
    """`model` with `features`' batch-norm statistics taken from `batch` (a plain average), in eval
    mode: seeded random weights then answer with spread scores, as a trained model's would."""
    import torch

    for module in features.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.momentum = None
    features.train()
    with torch.no_grad():
        features(batch)
    return model.eval()
