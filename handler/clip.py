"""The ground floor: the values every room passes along (a request, its frames, its outcome).

A door (`handler.doors`) builds a `Request`; the core decodes it into a `Clip`, runs its frames
and answers it with a `Served` (one `FrameResult` per frame) or a `FrameError`; the door turns
that into its wire format. Nothing here knows a wire format.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import numpy as np
import torch

from handler.errors import BadHeader, CorruptFrame, FrameError

if TYPE_CHECKING:
    from handler.config import HandlerConfig

Size = tuple[int, int]
#: One frame's value of one output, as JSON takes it: a number, nested lists, or None (NaN, inf).
Value: TypeAlias = "float | int | None | list[Value]"
_ID_MAX = 256


def letterbox_size(height: int, width: int, target: Size) -> Size:
    """The (h, w) a frame takes inside `target` after an aspect-preserving resize."""
    scale = min(target[0] / height, target[1] / width)
    return max(1, min(target[0], round(height * scale))), max(1, min(target[1], round(width * scale)))


class Deferred(Protocol):
    """A frame decoded on demand into the buffer it goes to (`handler.frames.DeferredJpeg`)."""

    @property
    def shape(self) -> tuple[int, int, int]: ...

    def decode_into(self, out: np.ndarray) -> None: ...


@dataclass(frozen=True, slots=True)
class Look:
    """What the model looked at in one frame (DESIGN section 15), when the request asked for motion.

    Attributes:
        size: the frame's own (h, w).
        regions: what the model saw, (x1, y1, x2, y2) frame pixels; () when it did not look.
        motion: the motion boxes, frame pixels.
        lighting: a lighting change reset the background at this frame.
    """

    size: Size
    regions: tuple[tuple[int, int, int, int], ...] = ()
    motion: tuple[tuple[int, int, int, int], ...] = ()
    lighting: bool = False

    def fields(self) -> dict[str, Any]:
        """The answer's `looked`, `regions`, `motion` (and `lighting` when set)."""
        out: dict[str, Any] = {"looked": bool(self.regions), "regions": [list(r) for r in self.regions],
                               "motion": [list(b) for b in self.motion]}
        if self.lighting:
            out["lighting"] = True
        return out


#: A frame: pixels on the host, a deferred JPEG, or `[H, W, 3]` uint8 already on the worker's
#: device (NVDEC, `handler.video`).
Frame = np.ndarray | Deferred | torch.Tensor


@dataclass(frozen=True, slots=True)
class Clip:
    """One request's frames, each `[H, W, 3]` uint8, and their presentation times for video.

    Attributes:
        frames: the frames in order (possibly read-only or strided views of the body).
        pts: seconds from the container, one per frame, for video segments; None otherwise.
        sizes: each frame's own (h, w) when a frame was decoded smaller than it was sent (the
            JPEG decoder's DCT-domain downscaling for a letterbox engine); None: the frames'
            own shapes.
        decoder: what decoded a video segment, "nvdec" (every frame on the GPU) or "cpu"; None
            for images.
        looks: with motion (`X-Motion`), one per frame, and then `frames` are the regions looked
            at, frame after frame (`handler.looks`) and `pts` are the frames'.
        originals: with `looks`, the looked-at frames whole, that a grown region is cut from.
    """

    frames: Sequence[Frame]
    pts: list[float] | None = None
    sizes: list[Size] | None = None
    decoder: str | None = None
    looks: tuple[Look, ...] | None = None
    originals: tuple[Frame, ...] = ()

    @property
    def own_sizes(self) -> list[Size]:
        """Each frame's own (h, w): `sizes` when set, else the frames' shapes."""
        return self.sizes or [(f.shape[0], f.shape[1]) for f in self.frames]

    @property
    def decoded_pixels(self) -> int:
        """Pixels this clip holds decoded, on the host or the device (a deferred JPEG holds none
        until it is collated)."""
        held = [*self.frames, *self.originals]
        return sum(f.shape[0] * f.shape[1] for f in held if isinstance(f, (np.ndarray, torch.Tensor)))

    @staticmethod
    def join(clips: Sequence[Clip]) -> Clip:
        """Image clips (multipart parts, OIP BYTES elements) as one clip, sizes kept."""
        frames = [frame for clip in clips for frame in clip.frames]
        if all(clip.sizes is None for clip in clips):
            return Clip(frames)
        return Clip(frames, sizes=[size for clip in clips for size in clip.own_sizes])


@dataclass(frozen=True, slots=True)
class Meta:
    """What a request says about itself, parsed once from its headers (names in lower case).

    A malformed value is kept as its error and raised by the property that reads it, so a
    request fails only on a header that matters to it (`X-Sample-Fps` for a video segment,
    `X-Capture-Time` when frames can be stale, the frame size for raw pixels).

    Attributes:
        stream_id: `X-Stream-Id`, echoed back (at most 256 characters).
        frame_id: `X-Frame-Id`, echoed back (at most 256 characters).
        sized: `X-Frame-Width` or `X-Frame-Height` was given (the body is raw pixels).
        pixel_format: `X-Pixel-Format` of raw pixels, lower case.
        parsed: the numeric headers by name, each its value or the error it gave.
        motion: `X-Motion` as given (`handler.looks.Watch` reads it), or None.
    """

    stream_id: str | None = None
    frame_id: str | None = None
    sized: bool = False
    pixel_format: str = "rgb24"
    parsed: Mapping[str, float | FrameError] = field(default_factory=dict)
    motion: str | None = None

    @classmethod
    def parse(cls, headers: Mapping[str, str]) -> Meta:
        """The request's metadata from its headers (form fields and gRPC keys mapped in)."""
        def text(name: str) -> str | None:
            value = headers.get(name)
            return None if value is None else value[:_ID_MAX]

        parsed: dict[str, float | FrameError] = {}
        for name, read in _NUMBERS.items():
            raw = headers.get(name)
            if raw is not None and (raw.strip() or name != "x-sample-fps"):  # a blank rate: every frame
                parsed[name] = read(raw)
        return cls(text("x-stream-id"), text("x-frame-id"),
                   "x-frame-width" in headers or "x-frame-height" in headers,
                   headers.get("x-pixel-format", "rgb24").strip().lower(), parsed, headers.get("x-motion"))

    @property
    def ids(self) -> dict[str, str | None]:
        """`stream_id` and `frame_id`, as answers echo them."""
        return {"stream_id": self.stream_id, "frame_id": self.frame_id}

    @property
    def capture_time(self) -> float | None:
        """`X-Capture-Time`, Unix seconds.

        Raises:
            BadHeader: the value is not a finite number.
        """
        return self._number("x-capture-time")

    @property
    def sample_fps(self) -> float | None:
        """`X-Sample-Fps`, a positive rate.

        Raises:
            BadHeader: the value is not a positive, finite number.
        """
        return self._number("x-sample-fps")

    def frame_size(self) -> Size:
        """`(height, width)` of raw pixels from `X-Frame-Height` and `X-Frame-Width`.

        Raises:
            CorruptFrame: a header is missing or not a positive whole number.
        """
        width = self._number("x-frame-width")
        height = self._number("x-frame-height")
        for name, value in (("x-frame-width", width), ("x-frame-height", height)):
            if value is None:
                raise CorruptFrame(f"a raw application/octet-stream body needs the {name} header")
        return int(height or 0), int(width or 0)

    def _number(self, name: str) -> float | None:
        value = self.parsed.get(name)
        if isinstance(value, FrameError):
            raise type(value)(str(value))
        return value


def _time(raw: str) -> float | FrameError:
    seconds = _float(raw)
    if not math.isfinite(seconds):  # "nan" and "inf" parse, but say nothing about age
        return BadHeader(f"X-Capture-Time {raw[:32]!r} is not a Unix time in seconds")
    return seconds


def _rate(raw: str) -> float | FrameError:
    fps = _float(raw)
    if not math.isfinite(fps) or fps <= 0:
        return BadHeader(f"X-Sample-Fps {raw[:32]!r} is not a positive number of frames per second")
    return fps


def _side(name: str) -> Callable[[str], float | FrameError]:
    def read(raw: str) -> float | FrameError:
        value = raw.strip()
        if not (value.isascii() and value.isdigit()) or len(value) > 6:
            return CorruptFrame(f"header {name}: {value[:32]!r} is not a positive whole number")
        return int(value)

    return read


def _float(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        return math.nan


_NUMBERS = {"x-capture-time": _time, "x-sample-fps": _rate,
            "x-frame-width": _side("x-frame-width"), "x-frame-height": _side("x-frame-height")}


class Source(Protocol):
    """A request's frames as its door received them; the core decodes them in a decode thread."""

    def decode(self, config: HandlerConfig, meta: Meta, lazy: bool) -> Clip:
        """The frames, in order (`lazy`: a JPEG may come back deferred, see `handler.frames`).

        Raises:
            FrameError: the request cannot be served; its status says why.
        """
        ...


@dataclass(frozen=True, slots=True)
class Request:
    """One request as the core sees it, whatever door it came through.

    Attributes:
        source: its frames, to decode (the door's own type; the door reads it back to answer).
        meta: what its headers say.
        refused: set when the door already knows the request cannot be served.
    """

    source: Source | None
    meta: Meta = field(default_factory=Meta)
    refused: FrameError | None = None

    def decode(self, config: HandlerConfig, lazy: bool = False) -> Clip:
        """The request's frames, in order.

        Raises:
            FrameError: the request cannot be served; its status says why.
        """
        if self.refused is not None:
            raise self.refused
        if self.source is None:
            raise CorruptFrame("the request holds no frame")
        return self.source.decode(config, self.meta, lazy)


@dataclass(slots=True)
class FrameResult:
    """One frame's answer: its own size, the model's outputs for it (`task: raw`) or the task's
    answer (`{"detections": [...]}`, `{"classes": [...]}`, `{"segments": [...]}`, JSON-ready)
    and, for video, its pts.

    Attributes:
        extras: the optional parts every detection of this model has, with their shapes, known
            even for a frame without detections (`keypoints`: [P, 3]; `mask`: []): the OIP door
            answers them as tensors whatever a frame holds.
        look: what the model looked at, when the request asked for motion; a frame it did not
            look at has no `outputs` or `answer`.
    """

    width: int
    height: int
    outputs: dict[str, Value] = field(default_factory=dict)
    pts: float | None = None
    answer: dict[str, Any] | None = None
    extras: dict[str, list[int]] = field(default_factory=dict)
    look: Look | None = None


#: A request's outcome: every frame's result, in order, or the one error that answers it.
Outcome = list[FrameResult] | FrameError
