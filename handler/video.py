"""Encoded video segments (DESIGN section 4b) -> a Clip of decoded frames with their pts.

FFmpeg through PyAV (its wheels carry FFmpeg; the choice and its figures are in docs/video.md).
Limits come first, from the container and stream headers: the codec allow-list, then width and
height, then, for an MP4 that declares its frame count, the clip's length and pixels. While
decoding, every frame is checked before its RGB copy is made, and decoding stops at the first
frame over a limit: a request never holds more than `max_video_frames` frames and
`max_clip_pixels` pixels of decoded RGB. Nothing is truncated silently: over a limit is
`ClipTooLarge`/`FrameTooLarge`, a broken segment is `CorruptFrame`.
"""

from __future__ import annotations

import functools
import io
import logging
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from handler.clip import Clip
from handler.config import HandlerConfig
from handler.errors import ClipTooLarge, CorruptFrame, EmptyFrame, UnsupportedCodec
from handler.formats import GENERIC, MEDIA_TYPES, Format, media_type, sniff
from handler.limits import Limits

if TYPE_CHECKING:
    import av

logger = logging.getLogger(__name__)

#: FFmpeg demuxer per format: forced, so a body is never probed as some other container.
DEMUXERS: Mapping[Format, str] = {
    Format.MP4: "mp4",
    Format.MPEGTS: "mpegts",
    Format.H264: "h264",
    Format.H265: "hevc",
}
#: Annex-B elementary streams carry no timing: frame i is at i / RAW_FPS seconds (DESIGN 4b).
RAW_FPS = 30.0
#: Frames decoded before sampling, per frame a request may keep: bounds the work a segment of
#: thousands of tiny frames (or an X-Sample-Fps far below the stream's rate) can cause.
DECODE_HEADROOM = 8
# A pts this close below a sampling slot's start counts as inside it (30 fps pts in a 1/90000 or
# 1/15360 time base are not exact multiples of 1/30).
_SLOT_EPSILON = 1e-6
_CODED_SLACK = 64


@dataclass(slots=True)
class PtsSampler:
    """Keeps the first frame of every `1 / fps` seconds, by pts (`X-Sample-Fps`).

    Attributes:
        fps: the rate to keep; None keeps every frame.
    """

    fps: float | None
    _start: float | None = None
    _last_slot: int = -1

    def keep(self, pts: float) -> bool:
        """Whether the frame at `pts` seconds is kept (call in presentation order)."""
        if self.fps is None:
            return True
        if self._start is None:
            self._start = pts
        slot = math.floor((pts - self._start) * self.fps + _SLOT_EPSILON)
        if slot <= self._last_slot:
            return False
        self._last_slot = slot
        return True


def is_segment(body: object, content_type: str | None = None) -> bool:
    """Whether a body (or a multipart part, or an OIP BYTES element) is a video segment, by its
    Content-Type, or by its first bytes when it has none or a generic one (cheap: nothing is
    decoded). Clips built from several bodies take encoded images only (`handler.requests`,
    `handler.oip`): a segment comes alone, so its frames keep their pts and its own limits."""
    if not isinstance(body, (bytes, bytearray, memoryview)):
        return False
    media = media_type(content_type)
    fmt = sniff(body) if media in GENERIC else MEDIA_TYPES.get(media)
    return fmt is not None and fmt.is_video


def decode_segment(body: bytes | bytearray, fmt: Format, sample_fps: float | None,
                   config: HandlerConfig) -> Clip:
    """Decodes one MP4, MPEG-TS or Annex-B H.264/H.265 segment into RGB frames and their pts.

    Args:
        body: the whole segment.
        fmt: its format (from the Content-Type or the first bytes).
        sample_fps: `X-Sample-Fps`, the rate of frames to keep by pts (None: every frame).
        config: the limits and the codec allow-list.

    Returns:
        The kept frames (`[H, W, 3]` uint8 each) in presentation order, and their pts in seconds.

    Raises:
        FrameError: `UnsupportedCodec`, `FrameTooLarge`, `ClipTooLarge`, `EmptyFrame` or
            `CorruptFrame`; the message says which limit or what is broken.
    """
    import av  # FFmpeg loads only when video arrives

    hwaccel = _hwaccel() if config.video_hw_decode else None
    try:
        # max_pixels also for the frames FFmpeg decodes while probing the stream's parameters.
        with av.open(io.BytesIO(body), "r", format=DEMUXERS[fmt], hwaccel=hwaccel,
                     options={"max_pixels": _max_pixels(config)}) as container:
            stream = _open_stream(container, fmt, sample_fps, config)
            return _decode(_Reader(container, stream, fmt), PtsSampler(sample_fps), config)
    except (av.FFmpegError, ValueError, IndexError) as err:
        raise CorruptFrame(f"cannot decode the {fmt.value} segment: {err}") from None


def _open_stream(container: av.container.InputContainer, fmt: Format, sample_fps: float | None,
                 config: HandlerConfig) -> av.video.stream.VideoStream:
    """The segment's video stream, checked from its headers, its decoder set up."""
    if not container.streams.video:
        raise EmptyFrame(f"the {fmt.value} segment holds no video stream")
    stream = container.streams.video[0]
    context = stream.codec_context
    if context.name not in config.video_codecs:
        raise UnsupportedCodec(
            f"the {fmt.value} segment's video codec is {context.name}; allowed codecs are "
            f"{list(config.video_codecs)} (handler.video_codecs)"
        )
    limits = Limits.of(config)
    limits.size(context.width, context.height, "the segment declares frames of", ",")
    if stream.frames and sample_fps is None:  # MP4 sample tables count their frames; 0 when unknown
        limits.segment(stream.frames, context.width * context.height * stream.frames, "declares")
    # explode: stop at the first damaged slice instead of concealing it (truncated or corrupt
    # data is CorruptFrame, not a made-up picture); max_pixels: the decoder itself refuses a
    # mid-stream size change far above the limit before allocating it (the slack covers coded
    # sizes rounded up to macroblocks, 1080 -> 1088; the exact limit is checked per frame).
    context.options = {"err_detect": "explode", "max_pixels": _max_pixels(config)}
    context.thread_type = "AUTO"
    context.thread_count = _codec_threads(config)
    return stream


def _decode(reader: _Reader, sampler: PtsSampler, config: HandlerConfig) -> Clip:
    """The kept frames; every frame is checked before its RGB copy is made."""
    limits = Limits.of(config)
    fmt = reader.fmt
    frames: list[np.ndarray] = []
    pts: list[float] = []
    pixels = decoded = 0
    budget = config.max_video_frames * DECODE_HEADROOM
    for frame in reader.frames():
        decoded += 1
        if frame.is_corrupt:  # the decoder concealed damage (err_detect alone does not refuse it)
            raise CorruptFrame(f"the {fmt.value} segment's frame {decoded - 1} is damaged "
                               "(the decoder had to conceal errors)")
        if decoded > budget:
            raise ClipTooLarge(
                f"the segment holds more than {budget} frames before sampling "
                f"({DECODE_HEADROOM} x max_video_frames = {config.max_video_frames})"
            )
        limits.size(frame.width, frame.height, "the segment holds frames of", ",")
        time = _pts(frame, decoded - 1, fmt)
        if not sampler.keep(time):
            continue
        pixels += frame.width * frame.height
        limits.segment(len(frames) + 1, pixels, "holds at least")
        frames.append(_rgb(frame))
        pts.append(time)
    reader.check_complete(decoded)
    return Clip(frames, pts)


@dataclass(slots=True)
class _Reader:
    """Demuxes and decodes one stream, counting the packets that carry data."""

    container: av.container.InputContainer
    stream: av.video.stream.VideoStream
    fmt: Format
    packets: int = 0

    def frames(self) -> Iterator[av.VideoFrame]:
        """Decoded frames in presentation order (the decoder is flushed at the end).

        Raises:
            CorruptFrame: the first packet is not a key frame.
        """
        for packet in self.container.demux(self.stream):
            if packet.size:
                if not self.packets and not packet.is_keyframe:
                    raise CorruptFrame(f"the {self.fmt.value} segment does not start with a key frame")
                self.packets += 1
            yield from packet.decode()

    def check_complete(self, decoded: int) -> None:
        """After the last frame: the segment held every frame it declares, and some.

        Raises:
            CorruptFrame: truncated, or nothing decodable. EmptyFrame: no video frame at all.
        """
        declared = self.stream.frames
        if declared and self.packets < declared:
            raise CorruptFrame(f"the {self.fmt.value} segment is truncated: it declares {declared} "
                               f"frames and holds {self.packets}")
        if decoded == 0:
            if self.packets == 0:
                raise EmptyFrame(f"the {self.fmt.value} segment holds no video frames")
            raise CorruptFrame(f"no frame of the {self.fmt.value} segment could be decoded")


def _rgb(frame: av.VideoFrame) -> np.ndarray:
    """`[H, W, 3]` uint8 (a view of FFmpeg's converted picture, which it keeps alive)."""
    return frame.to_ndarray(format="rgb24")


def _pts(frame: av.VideoFrame, index: int, fmt: Format) -> float:
    if fmt in (Format.H264, Format.H265) or frame.time is None:
        return index / RAW_FPS
    return float(frame.time)


def _max_pixels(config: HandlerConfig) -> str:
    return str((config.max_width + _CODED_SLACK) * (config.max_height + _CODED_SLACK))


def _codec_threads(config: HandlerConfig) -> int:
    # The handler already decodes `decode_threads` requests at once: split the CPUs between them
    # rather than oversubscribe (measured on 2 shared cores, 2 threads per decoder won at 1080p
    # and lost at 720p; docs/video.md). More than 4 threads only adds frames in flight.
    cpus = len(os.sched_getaffinity(0))
    return max(1, min(4, cpus // config.decode_threads))


@functools.lru_cache(maxsize=1)
def _hwaccel() -> av.codec.hwaccel.HWAccel | None:
    """NVDEC through FFmpeg's CUDA hwaccel when the worker has CUDA and the device opens."""
    import av
    import torch

    if not torch.cuda.is_available():
        return None
    from av.codec.hwaccel import HWAccel, hwdevices_available

    if "cuda" not in hwdevices_available():
        logger.warning("CUDA is available but this FFmpeg build has no cuda hwaccel: CPU decode")
        return None
    # The CUDA device torch uses in this worker, and its primary context (the one torch uses):
    # no CUDA context is created per segment, and decoding shares the worker's device memory.
    accel = HWAccel("cuda", device=str(torch.cuda.current_device()), allow_software_fallback=True,
                    options={"primary_ctx": "1"})
    try:
        accel.create(av.codec.Codec("h264", "r"))
    except (av.FFmpegError, OSError, NotImplementedError, RuntimeError) as err:
        logger.warning("the GPU's video decoder cannot be opened (%s): CPU decode", err)
        return None
    logger.info("video segments decode on the GPU (NVDEC through FFmpeg's cuda hwaccel)")
    return accel
