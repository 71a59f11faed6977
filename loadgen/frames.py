"""Video-like frames: the photographs in `data/images`, scaled and panned per camera, encoded.

Camera `s` films photo `s % photos`, zoomed by its own factor, and pans across it frame by
frame, so consecutive frames differ the way a slowly moving camera's do. Encoded bodies are
rendered once per camera and size (a cycle of `distinct` frames) before the clock starts, so
encoding never delays a send. The video formats (`h264`, `mp4`) encode each request's frames as
one H.264 segment that starts with a key frame, as a camera's encoder would (PyAV's libx264).
"""

from __future__ import annotations

import enum
import io
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image

from loadgen.schedule import Resolution

IMAGES = Path(__file__).resolve().parents[1] / "data" / "images"
#: Frame rate written into video segments.
SEGMENT_FPS = 30


class Format(enum.Enum):
    """How a request carries its frames (README "Wire protocol")."""

    JPEG = "jpeg"
    PNG = "png"
    NPY = "npy"
    RAW = "raw"
    H264 = "h264"  # Annex-B H.264 segment
    MP4 = "mp4"  # H.264 segment in an MP4

    @property
    def content_type(self) -> str:
        return {Format.JPEG: "image/jpeg", Format.PNG: "image/png",
                Format.NPY: "application/x-npy", Format.RAW: "application/octet-stream",
                Format.H264: "video/h264", Format.MP4: "video/mp4"}[self]

    @property
    def is_video(self) -> bool:
        return self in (Format.H264, Format.MP4)

    @property
    def max_clip(self) -> int | None:
        """Most frames one request of this format can carry (None: no limit of its own)."""
        return 1 if self in (Format.JPEG, Format.PNG) else None


@dataclass(frozen=True, slots=True)
class Payload:
    """One request's body and the headers that describe it (besides stream/frame/time)."""

    body: bytes
    content_type: str
    headers: dict[str, str]
    frames: int


@lru_cache(maxsize=4)
def _photos(folder: Path) -> tuple[Image.Image, ...]:
    paths = sorted(folder.glob("*.png")) + sorted(folder.glob("*.jpg"))
    if not paths:  # still video-like: a smooth colour field with texture
        y, x = np.mgrid[0:480, 0:640]
        synthetic = np.stack([x * 255 // 639, y * 255 // 479, (x ^ y) & 255], axis=-1).astype(np.uint8)
        return (Image.fromarray(synthetic),)
    return tuple(Image.open(p).convert("RGB") for p in paths)


def frame(stream: int, index: int, size: Resolution, images: Path = IMAGES) -> np.ndarray:
    """Camera `stream`'s frame `index` at `size`: `[H, W, 3]` uint8."""
    return _Camera(stream, size, images).frame(index)


class _Camera:
    """One camera's view: its photo zoomed once, then a moving crop window."""

    def __init__(self, stream: int, size: Resolution, images: Path) -> None:
        photos = _photos(images)
        photo = photos[stream % len(photos)]
        zoom = 1.15 + 0.1 * (stream % 5)  # room to pan; each camera its own zoom
        scale = max(size.height / photo.height, size.width / photo.width) * zoom
        width = max(size.width, round(photo.width * scale))
        height = max(size.height, round(photo.height * scale))
        self._scene = np.asarray(photo.resize((width, height), Image.BILINEAR))
        self._size = size
        self._stream = stream

    def frame(self, index: int) -> np.ndarray:
        room_x = self._scene.shape[1] - self._size.width
        room_y = self._scene.shape[0] - self._size.height
        # A back-and-forth pan, a few pixels per frame, each camera starting elsewhere.
        step = index * 4 + self._stream * 97
        left = _bounce(step, room_x)
        top = _bounce(step // 2, room_y)
        return self._scene[top:top + self._size.height, left:left + self._size.width]


def _bounce(position: int, room: int) -> int:
    if room <= 0:
        return 0
    position %= 2 * room
    return position if position <= room else 2 * room - position


def encode(frames: Sequence[np.ndarray], fmt: Format, jpeg_quality: int = 85) -> Payload:
    """Frames `[H, W, 3]` uint8 (all one size) -> one request's body.

    Raises:
        ValueError: several frames for a single-image format, or frames of different sizes.
    """
    if not frames:
        raise ValueError("encode needs at least one frame")
    if fmt.max_clip is not None and len(frames) > fmt.max_clip:
        raise ValueError(f"{fmt.value} carries one frame per request; use npy or raw for clips of {len(frames)}")
    if len({f.shape for f in frames}) != 1:
        raise ValueError(f"one request's frames must share a size, got {sorted({f.shape for f in frames})}")
    height, width = frames[0].shape[:2]
    if fmt.is_video:
        return Payload(encode_segment(frames, fmt), fmt.content_type, {}, len(frames))
    out = io.BytesIO()
    headers: dict[str, str] = {}
    if fmt is Format.JPEG:
        Image.fromarray(frames[0]).save(out, format="JPEG", quality=jpeg_quality)
    elif fmt is Format.PNG:
        Image.fromarray(frames[0]).save(out, format="PNG", compress_level=1)
    elif fmt is Format.NPY:
        np.save(out, frames[0] if len(frames) == 1 else np.stack(frames), allow_pickle=False)
    else:
        for f in frames:
            out.write(np.ascontiguousarray(f).tobytes())
        headers = {"X-Frame-Width": str(width), "X-Frame-Height": str(height), "X-Pixel-Format": "rgb24"}
    return Payload(out.getvalue(), fmt.content_type, headers, len(frames))


def encode_segment(frames: Sequence[np.ndarray], fmt: Format, fps: int = SEGMENT_FPS) -> bytes:
    """Frames `[H, W, 3]` uint8 (one size, even width and height) -> one H.264 segment.

    One key frame first and no other (the whole segment is one group of pictures), no B-frames
    (as live cameras send), x264 `veryfast` at its default quality (CRF 23), `fps` frames/s.

    Raises:
        ValueError: an odd width or height (4:2:0 chroma needs even sizes).
    """
    import av  # only the video formats need FFmpeg

    height, width = frames[0].shape[:2]
    if width % 2 or height % 2:
        raise ValueError(f"H.264 4:2:0 needs an even width and height, got {width}x{height}")
    out = io.BytesIO()
    with av.open(out, "w", format="mp4" if fmt is Format.MP4 else "h264") as container:
        stream = container.add_stream("libx264", rate=fps, options={"preset": "veryfast", "bf": "0"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.gop_size = len(frames)
        for index, pixels in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels), format="rgb24")
            frame.pts = index
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return out.getvalue()


class FrameSource:
    """Pre-rendered request bodies per camera and size, cycled through during the run.

    Args:
        fmt: the wire format.
        clip: frames per request.
        distinct: requests rendered per camera and size before they repeat.
        images: folder of photographs.
    """

    def __init__(self, fmt: Format, clip: int = 1, distinct: int = 8, images: Path = IMAGES) -> None:
        if fmt.max_clip is not None and clip > fmt.max_clip:
            raise ValueError(f"--clip {clip} needs --format npy or raw; {fmt.value} carries one frame")
        if distinct < 1:
            raise ValueError(f"distinct = {distinct}: use 1 or more")
        self.fmt, self.clip, self.distinct, self.images = fmt, clip, distinct, images
        self._cache: dict[tuple[int, Resolution], list[Payload]] = {}

    def prepare(self, stream: int, size: Resolution) -> None:
        """Renders camera `stream`'s cycle at `size` (call before the clock starts)."""
        key = (stream, size)
        if key in self._cache:
            return
        camera = _Camera(stream, size, self.images)
        self._cache[key] = [
            encode([np.ascontiguousarray(camera.frame(r * self.clip + k)) for k in range(self.clip)], self.fmt)
            for r in range(self.distinct)]

    def payload(self, stream: int, frame_id: int, size: Resolution) -> Payload:
        """The body for the request whose first frame is `frame_id`."""
        self.prepare(stream, size)
        cycle = self._cache[(stream, size)]
        return cycle[(frame_id // self.clip) % len(cycle)]
