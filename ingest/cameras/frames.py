"""Frames mode: decode, keep `sample_fps` frames a second by pts, send each as JPEG.

MJPEG packets are JPEGs already: the kept ones are sent as they came, without decoding.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ingest.cameras.clock import CaptureClock
from ingest.cameras.looking import Looking
from ingest.cameras.segments import pts_seconds
from ingest.cameras.units import Unit

if TYPE_CHECKING:
    import av

JPEG_QUALITY = 85
_SLOT_EPSILON = 1e-6
_JPEG_START = b"\xff\xd8\xff"


class Sampler:
    """Keeps the first frame of each `1 / fps` seconds of stream time; restarts when pts go back."""

    def __init__(self, fps: float) -> None:
        self._fps = fps
        self._start: float | None = None
        self._last = float("-inf")
        self._slot = -1

    def keep(self, pts: float) -> bool:
        if self._start is None or pts < self._last:
            self._start, self._slot = pts, -1
        self._last = pts
        slot = math.floor((pts - self._start) * self._fps + _SLOT_EPSILON)
        if slot <= self._slot:
            return False
        self._slot = slot
        return True


def encode_jpeg(frame: av.VideoFrame) -> bytes:
    """The frame as JPEG by libjpeg-turbo (simplejpeg), from its YUV planes when it has 4:2:0."""
    import simplejpeg  # type: ignore[import-untyped]

    if frame.format.name in ("yuv420p", "yuvj420p") and frame.width % 2 == 0 and frame.height % 2 == 0:
        planes = [np.frombuffer(memoryview(p), np.uint8).reshape(p.height, p.line_size)[:, :p.width] for p in frame.planes]
        return bytes(simplejpeg.encode_jpeg_yuv_planes(*planes, quality=JPEG_QUALITY))
    return bytes(simplejpeg.encode_jpeg(frame.to_ndarray(format="rgb24"), quality=JPEG_QUALITY, colorspace="RGB"))


class FrameSender:
    """Turns one connection's packets into JPEG units.

    Args:
        stream: the input's video stream (its decoder is used).
        fps: frames kept per second of stream time.
        clock: the camera's capture clock.
        issue: hands out the camera's next sequence number.
        corrupt: called for each packet that does not decode, with how many did in a row.
        timing: a packet's time in seconds (default its pts; HTTP MJPEG: its arrival, see
            `arrival_timing`).
        looking: the camera's motion (a frame where nothing moved is not sent, nor encoded unless
            `preview` says someone watches the camera), or None.
        preview: whether the web view shows the camera now.
    """

    def __init__(self, stream: av.VideoStream, fps: float, clock: CaptureClock, issue: Callable[[], int],
                 corrupt: Callable[[int], None] = lambda n: None,
                 timing: Callable[[av.Packet[Any]], float | None] = pts_seconds,
                 looking: Looking | None = None, preview: Callable[[], bool] = lambda: False) -> None:
        self._stream = stream
        self._timing = timing
        self._sampler = Sampler(fps)
        self._clock = clock
        self._issue = issue
        self._corrupt = corrupt
        self._passthrough = stream.codec_context.name == "mjpeg"
        self._failures = 0
        self._looking = looking
        self._preview = preview

    def push(self, packet: av.Packet[Any]) -> list[Unit]:
        """Takes one packet; returns the frames kept from it, encoded."""
        import av

        pts = self._timing(packet)
        if pts is None or packet.size == 0:
            return []
        arrived = self._clock.observe(pts)
        if self._passthrough and bytes(packet)[:3] == _JPEG_START:
            return [self._unit(bytes(packet), pts, arrived)] if self._sampler.keep(pts) else []
        try:
            frames = self._stream.codec_context.decode(packet)
        except av.error.FFmpegError:
            self._failures += 1
            self._corrupt(self._failures)
            return []
        self._failures = 0
        units = []
        for frame in frames:
            at = float(frame.time) if frame.time is not None and self._timing is pts_seconds else pts
            if self._sampler.keep(at):
                units.append(self._frame(frame, at, arrived))
        return units

    def _frame(self, frame: av.VideoFrame, pts: float, arrived: float) -> Unit:
        if self._looking is None:
            return self._unit(encode_jpeg(frame), pts, arrived)
        look = self._looking.frame(frame, pts)
        if look.header is None:  # not sent: its picture only for the web view, when watched
            body = encode_jpeg(frame) if self._preview() else b""
            return replace(self._unit(body, pts, arrived), still=(frame.width, frame.height, look.boxes, look.lighting))
        return replace(self._unit(encode_jpeg(frame), pts, arrived), motion=look.header)

    def flush(self) -> list[Unit]:
        """Nothing is held back between packets (the decoder's delayed frames are not waited for)."""
        return []

    def _unit(self, body: bytes, pts: float, arrived: float) -> Unit:
        return Unit(self._issue(), body, "image/jpeg", self._clock.capture(pts, arrived), pts, 1)


def arrival_timing() -> Callable[[av.Packet[Any]], float]:
    """Packet times from their arrival (seconds since the first): for HTTP MJPEG, whose demuxer
    makes up a 25 fps pts whatever the camera's real rate."""
    start = time.monotonic()
    return lambda _packet: time.monotonic() - start
