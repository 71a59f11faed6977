"""The `handler:` section of the archive's model-config YAML, parsed once into a frozen dataclass."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from handler.errors import ConfigError

_MAX_SIDE = 16384


class Resize(enum.Enum):
    """How frames meet the model's input."""

    PAD = "pad"  # keep each frame's resolution; pad to its shape bucket
    LETTERBOX = "letterbox"  # fixed-input engines: aspect-preserving resize + pad to `input_size`


@dataclass(frozen=True, slots=True)
class Normalize:
    """`x = (pixel * scale - mean[c]) / std[c]`, applied on the device."""

    scale: float = 1.0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)

    @property
    def is_identity(self) -> bool:
        return self.scale == 1.0 and self.mean == (0.0, 0.0, 0.0) and self.std == (1.0, 1.0, 1.0)


@dataclass(frozen=True, slots=True)
class HandlerConfig:
    """Settings of one model's handler. See the README's settings table."""

    model_max_batch: int = 16
    static_batch: int | None = None
    size_divisor: int = 32
    max_width: int = 3840
    max_height: int = 2160
    max_clip_frames: int = 32
    max_clip_pixels: int = 32 * 1920 * 1080
    max_batch_pixels: int = 4 * 32 * 1920 * 1080
    memory_budget_bytes: int | None = None
    bytes_per_pixel: int = 64
    max_frame_age_ms: float | None = None
    pass_sizes: bool = False
    resize: Resize = Resize.PAD
    input_size: tuple[int, int] | None = None
    normalize: Normalize = field(default_factory=Normalize)
    output_names: tuple[str, ...] | None = None
    dense_outputs: tuple[str, ...] | None = None  # None: "auto"
    decode_threads: int = 2
    max_video_frames: int = 120
    video_codecs: tuple[str, ...] = ("h264", "hevc", "mjpeg")
    video_hw_decode: bool = True

    @property
    def max_chunk(self) -> int:
        """Most frames one forward may take."""
        return self.static_batch or self.model_max_batch

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> HandlerConfig:
        """Parses and checks the `handler:` section.

        Raises:
            ConfigError: naming the key, the bad value and what to set instead.
        """
        raw = dict(raw or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(
                f"handler: unknown key(s) {unknown}; known keys are {sorted(known)}"
            )
        values: dict[str, Any] = {}
        for key in ("model_max_batch", "size_divisor", "max_clip_frames", "decode_threads",
                    "max_video_frames"):
            if key in raw:
                values[key] = _int(key, raw[key], 1, 4096)
        for key in ("max_width", "max_height"):
            if key in raw:
                values[key] = _int(key, raw[key], 1, _MAX_SIDE)
        for key in ("max_clip_pixels", "max_batch_pixels", "bytes_per_pixel"):
            if key in raw:
                values[key] = _int(key, raw[key], 1, 2**40)
        if raw.get("static_batch") is not None:
            values["static_batch"] = _int("static_batch", raw["static_batch"], 1, 4096)
            values.setdefault("model_max_batch", values["static_batch"])  # unset: the engine's batch
        if raw.get("memory_budget_bytes") is not None:
            values["memory_budget_bytes"] = _int(
                "memory_budget_bytes", raw["memory_budget_bytes"], 1, 2**50
            )
        if raw.get("max_frame_age_ms") is not None:
            values["max_frame_age_ms"] = _number("max_frame_age_ms", raw["max_frame_age_ms"])
        for key in ("pass_sizes", "video_hw_decode"):
            if key in raw:
                if not isinstance(raw[key], bool):
                    raise ConfigError(f"handler.{key} = {raw[key]!r}: use true or false")
                values[key] = raw[key]
        if "video_codecs" in raw:
            values["video_codecs"] = _codecs(raw["video_codecs"])
        if "resize" in raw:
            try:
                values["resize"] = Resize(raw["resize"])
            except ValueError:
                choices = [r.value for r in Resize]
                raise ConfigError(f"handler.resize = {raw['resize']!r}: use one of {choices}") from None
        if raw.get("input_size") is not None:
            values["input_size"] = _size(raw["input_size"])
        if raw.get("normalize") is not None:
            values["normalize"] = _normalize(raw["normalize"])
        if raw.get("output_names") is not None:
            names = raw["output_names"]
            if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
                raise ConfigError(f"handler.output_names = {names!r}: use a list of names")
            values["output_names"] = tuple(names)
        if raw.get("dense_outputs", "auto") != "auto":
            names = raw["dense_outputs"]
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ConfigError(f"handler.dense_outputs = {names!r}: use auto or a list of output "
                                  "names ([] for none)")
            values["dense_outputs"] = tuple(names)
        config = cls(**values)
        config._check()
        return config

    def _check(self) -> None:
        if self.static_batch is not None and self.model_max_batch > self.static_batch:
            raise ConfigError(
                f"handler.model_max_batch = {self.model_max_batch} exceeds static_batch = "
                f"{self.static_batch}: a fixed-batch engine takes exactly static_batch frames; "
                "drop model_max_batch or set it to static_batch"
            )
        if (self.resize is Resize.LETTERBOX) != (self.input_size is not None):
            raise ConfigError(
                "handler.resize = letterbox needs handler.input_size = [height, width] "
                "(the engine's fixed input), and input_size is only used with letterbox"
            )
        if self.max_batch_pixels < self.max_clip_pixels:
            raise ConfigError(
                f"handler.max_batch_pixels = {self.max_batch_pixels} is below max_clip_pixels = "
                f"{self.max_clip_pixels}: one clip could never be held; raise it to at least "
                f"{self.max_clip_pixels}"
            )
        if self.max_clip_pixels < self.max_width * self.max_height:
            raise ConfigError(
                f"handler.max_clip_pixels = {self.max_clip_pixels} is below one frame of "
                f"max_width x max_height; raise it to at least {self.max_width * self.max_height}"
            )


def _int(key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"handler.{key} = {value!r}: use a whole number from {low} to {high}")
    return value


def _codecs(value: Any) -> tuple[str, ...]:
    """FFmpeg decoder names, e.g. `[h264, hevc, mjpeg]`; `[]` turns video segments off."""
    ok = isinstance(value, list) and all(
        isinstance(v, str) and v and v.replace("_", "").isalnum() and v == v.lower() for v in value
    )
    if not ok:
        raise ConfigError(
            f"handler.video_codecs = {value!r}: use a list of FFmpeg codec names in lower case, "
            "e.g. [h264, hevc, mjpeg]"
        )
    aliases = {"h265": "hevc", "avc": "h264", "x264": "h264", "x265": "hevc", "jpeg": "mjpeg"}
    wrong = [v for v in value if v in aliases]
    if wrong:
        fixes = ", ".join(f"{v} -> {aliases[v]}" for v in wrong)
        raise ConfigError(f"handler.video_codecs = {value!r}: use FFmpeg's codec names ({fixes})")
    return tuple(value)


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"handler.{key} = {value!r}: use a positive number (or omit it)")
    return float(value)


def _size(value: Any) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise ConfigError(f"handler.input_size = {value!r}: use [height, width]")
    return _int("input_size[0]", value[0], 1, _MAX_SIDE), _int("input_size[1]", value[1], 1, _MAX_SIDE)


def _normalize(value: Any) -> Normalize:
    if not isinstance(value, Mapping) or set(value) - {"scale", "mean", "std"}:
        raise ConfigError(f"handler.normalize = {value!r}: use a mapping with scale, mean, std")
    scale = value.get("scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
        raise ConfigError(f"handler.normalize.scale = {scale!r}: use a positive number, e.g. 0.00392156 (1/255)")
    triples: dict[str, tuple[float, float, float]] = {}
    for key, default in (("mean", 0.0), ("std", 1.0)):
        triple = value.get(key, [default] * 3)
        ok = isinstance(triple, list) and len(triple) == 3 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in triple
        )
        if not ok or (key == "std" and min(triple) <= 0):
            raise ConfigError(f"handler.normalize.{key} = {triple!r}: use three numbers (R, G, B)"
                              + (", all positive" if key == "std" else ""))
        triples[key] = (float(triple[0]), float(triple[1]), float(triple[2]))
    return Normalize(float(scale), triples["mean"], triples["std"])
