"""Encoded video segments (DESIGN section 4b) -> a Clip of decoded frames with their pts.

FFmpeg through PyAV (its wheels carry FFmpeg; the choice and its figures are in docs/video.md).
Limits come first, from the container and stream headers: the codec allow-list, then width and
height, then, for an MP4 that declares its frame count, the clip's length and pixels. While
decoding, every frame is checked before its RGB copy is made, and decoding stops at the first
frame over a limit: a request never holds more than `max_video_frames` frames and
`max_clip_pixels` pixels of decoded RGB. Nothing is truncated silently: over a limit is
`ClipTooLarge`/`FrameTooLarge`, a broken segment is `CorruptFrame`.

On a CUDA worker, NVDEC (FFmpeg's cuda hwaccel) decodes segments only once it has decoded a test
segment on that GPU into CUDA frames with software fallback off (`probe`); otherwise the CPU does,
and the log says why. Each clip names its decoder. With `resize: pad` NVDEC's pictures stay on
the GPU and are converted to RGB there (`handler.colour`); a letterbox engine resizes on the host,
so its pictures are downloaded.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from handler.clip import Clip, Frame, Look
from handler.colour import Matrix, nv12_to_rgb
from handler.config import HandlerConfig, Resize
from handler.device import worker_device
from handler.errors import ClipTooLarge, CorruptFrame, EmptyFrame, UnsupportedCodec
from handler.formats import GENERIC, MEDIA_TYPES, Format, media_type, sniff
from handler.limits import Limits
from handler.looks import SegmentLooks, Watch, crops, region_side
from handler.motion import luma

if TYPE_CHECKING:
    import av
    import torch
    from av.codec.hwaccel import HWAccel

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
#: `frame.color_range` of full-range (JPEG) pictures (FFmpeg's AVCOL_RANGE_JPEG).
_FULL_RANGE = 2
#: DLPack's device type for CUDA memory.
_DLPACK_CUDA = 2


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
                   config: HandlerConfig, watch: Watch | None = None) -> Clip:
    """Decodes one MP4, MPEG-TS or Annex-B H.264/H.265 segment into RGB frames and their pts.

    Args:
        body: the whole segment.
        fmt: its format (from the Content-Type or the first bytes).
        sample_fps: `X-Sample-Fps`, the rate of frames to keep by pts (None: every frame).
        config: the limits and the codec allow-list.
        watch: `X-Motion`: the frames are looked at where they moved (`handler.looks`).

    Returns:
        The kept frames (`[H, W, 3]` uint8 each) in presentation order, and their pts in seconds.

    Raises:
        FrameError: `UnsupportedCodec`, `FrameTooLarge`, `ClipTooLarge`, `EmptyFrame` or
            `CorruptFrame`; the message says which limit or what is broken.
    """
    import av  # FFmpeg loads only when video arrives

    hwaccel = _hwaccel(config)
    try:
        # max_pixels also for the frames FFmpeg decodes while probing the stream's parameters.
        with av.open(io.BytesIO(body), "r", format=DEMUXERS[fmt], hwaccel=hwaccel,
                     options={"max_pixels": _max_pixels(config)}) as container:
            stream = _open_stream(container, fmt, sample_fps, config)
            return _decode(_Reader(container, stream, fmt), PtsSampler(sample_fps), config, watch)
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


def _decode(reader: _Reader, sampler: PtsSampler, config: HandlerConfig, watch: Watch | None) -> Clip:
    """The kept frames; every frame is checked before its RGB copy is made."""
    limits = Limits.of(config)
    fmt = reader.fmt
    kept = _Kept(config.resize is Resize.PAD, None if watch is None else SegmentLooks(watch, region_side(config)))
    pixels = decoded = on_gpu = 0
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
        on_gpu += frame.format.name == "cuda"
        time = _pts(frame, decoded - 1, fmt)
        if not sampler.keep(time):
            continue
        pixels += frame.width * frame.height
        limits.segment(len(kept.pts) + 1, pixels, "holds at least")
        kept.add(frame, time)
    reader.check_complete(decoded)
    return kept.clip("nvdec" if on_gpu == decoded else "cpu")


@dataclass(slots=True)
class _Kept:
    """A segment's kept frames in RGB; with motion, only those looked at (a still frame is never
    converted), cut into their regions.

    Attributes:
        on_device: NVDEC's pictures stay on the GPU (`resize: pad`).
        looks: what decides each frame's look, with motion.
    """

    on_device: bool
    looks: SegmentLooks[av.VideoFrame] | None
    pts: list[float] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    decided: list[Look] = field(default_factory=list)
    originals: list[np.ndarray | torch.Tensor] = field(default_factory=list)

    def add(self, frame: av.VideoFrame, time: float) -> None:
        self.pts.append(time)
        if self.looks is None:
            self.frames.append(_rgb(frame, self.on_device))
        else:
            self._take(self.looks.add(frame, luma(frame), (frame.height, frame.width)))

    def _take(self, decided: list[tuple[Look, av.VideoFrame]]) -> None:
        for look, frame in decided:
            self.decided.append(look)
            if look.regions:
                rgb = _rgb(frame, self.on_device)
                self.originals.append(rgb)
                self.frames.extend(crops(rgb, look))

    def clip(self, decoder: str) -> Clip:
        if self.looks is None:
            return Clip(self.frames, self.pts, decoder=decoder)
        self._take(self.looks.finish())
        return Clip(self.frames, self.pts, decoder=decoder, looks=tuple(self.decided), originals=tuple(self.originals))


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


def _rgb(frame: av.VideoFrame, on_device: bool) -> np.ndarray | torch.Tensor:
    """`[H, W, 3]` uint8: NVDEC's NV12 pictures on their GPU when `on_device`; otherwise in host
    memory (a view of FFmpeg's converted picture, which it keeps alive; FFmpeg downloads a
    hardware picture first)."""
    sw_format = frame.sw_format
    if sw_format is not None and sw_format.name == "nv12":
        if on_device:
            import torch

            try:
                return _device_rgb(frame)
            except torch.cuda.OutOfMemoryError:
                logger.warning("no device memory to convert a %dx%d NVDEC frame: converted on the host",
                               frame.width, frame.height)
        # swscale interpolates NV12's chroma (up to 50 levels from the CPU decoder's RGB at colour
        # edges) but replicates yuv420p's, as for the CPU decoder's frames: same samples, same RGB.
        frame = frame.reformat(format="yuv420p")
    return frame.to_ndarray(format="rgb24")


def _device_rgb(frame: av.VideoFrame) -> torch.Tensor:
    """`[H, W, 3]` uint8 on the CUDA frame's GPU, converted there."""
    import torch

    device = frame.planes[0].__dlpack_device__()[1]
    # FFmpeg copies the picture out of NVDEC on the legacy default stream and PyAV's DLPack
    # export takes no consumer stream: the copy must be complete before the planes are read.
    torch.cuda.default_stream(device).synchronize()
    y, uv = _nv12_planes(frame)
    rgb = nv12_to_rgb(y, uv, Matrix.of(frame.colorspace), frame.color_range == _FULL_RANGE)
    # complete before the decode thread hands it over: any stream may read it next
    torch.cuda.current_stream(device).synchronize()
    return rgb


def _nv12_planes(frame: av.VideoFrame) -> tuple[torch.Tensor, torch.Tensor]:
    """An NV12 frame's planes as tensors on its device, without a copy (DLPack).

    Returns:
        `Tensor[H, W] uint8` luma and `Tensor[ceil(H/2), ceil(W/2), 2] uint8` chroma, strided
        by the frame's line sizes.
    """
    import torch

    # The capsule, not the plane: torch.from_dlpack(plane) would pass it torch's stream, which
    # PyAV refuses for CUDA frames.
    y, uv = (torch.utils.dlpack.from_dlpack(plane.__dlpack__()) for plane in frame.planes[:2])
    # PyAV exports floor(H/2) x floor(W/2) chroma; an odd side (MJPEG can have one; H.264 and
    # H.265 crop 4:2:0 pictures in steps of 2) repeats its last chroma sample.
    if uv.shape[0] < (frame.height + 1) // 2:
        uv = torch.cat([uv, uv[-1:]], dim=0)
    if uv.shape[1] < (frame.width + 1) // 2:
        uv = torch.cat([uv, uv[:, -1:]], dim=1)
    return y, uv


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
    return max(1, min(4, cpus // config.threads))


@dataclass(frozen=True, slots=True)
class Probe:
    """What decoding the test segment showed about one GPU's video decoder.

    Attributes:
        device: the CUDA device index.
        accel: the hwaccel segments decode with on it; None when NVDEC is not proven there.
        reason: why segments decode on the CPU ("" when `accel` is set).
    """

    device: int
    accel: HWAccel | None
    reason: str = ""


def describe_decoder(config: HandlerConfig, device: torch.device) -> str:
    """Where the worker's video segments decode, and why, for the startup log; proves NVDEC on
    `device` first (`probe`) when the worker has CUDA."""
    if not config.video_hw_decode:
        return "video segments decode on the CPU: handler.video_hw_decode is false"
    if device.type != "cuda":
        return "video segments decode on the CPU: the worker has no CUDA device"
    import torch

    found = probe(torch.cuda.current_device() if device.index is None else device.index)
    if found.accel is None:
        return f"video segments decode on the CPU: {found.reason}"
    return f"video segments decode on NVDEC (GPU {found.device}), proven on a test segment"


def _hwaccel(config: HandlerConfig) -> HWAccel | None:
    """NVDEC on the worker's GPU (`handler.device.bind`) once it is proven there, else None:
    the CPU decodes (also for a CPU worker on a GPU host)."""
    worker = worker_device()
    if not config.video_hw_decode or worker.type != "cuda":
        return None
    import torch

    return probe(torch.cuda.current_device() if worker.index is None else worker.index).accel


@functools.cache
def probe(device: int) -> Probe:
    """Proves NVDEC on CUDA device `device`, once per device: it decodes the test segment with
    FFmpeg's software fallback off, and the frames must be CUDA frames on that device.

    Returns:
        The hwaccel segments decode with (software fallback on, for streams NVDEC cannot take;
        each segment's frames say which decoder made them), or why the CPU decodes instead,
        which is also logged as a warning.
    """
    from av.codec.hwaccel import HWAccel, hwdevices_available

    if "cuda" not in hwdevices_available():
        reason = (f"this FFmpeg has no cuda hwaccel (it has {hwdevices_available()}): install PyAV from its "
                  "PyPI wheels, whose FFmpeg has it")
    else:
        reason = _not_on_gpu(device)
    if reason:
        logger.warning("GPU %d: video segments decode on the CPU: %s", device, reason)
        return Probe(device, None, reason)
    logger.info("GPU %d: video segments decode on NVDEC, proven on a test segment", device)
    return Probe(device, _nvdec(HWAccel, device, fallback=True))


def _nvdec(hwaccel: type[HWAccel], device: int, fallback: bool) -> HWAccel:
    # primary_ctx: FFmpeg's device context wraps the device's primary CUDA context, the one torch
    # uses, so a segment's decoder creates no CUDA context and its frames are torch's to read.
    return hwaccel("cuda", device=str(device), allow_software_fallback=fallback, is_hw_owned=True,
                   options={"primary_ctx": "1"})


def _not_on_gpu(device: int) -> str:
    """Why the test segment did not decode to CUDA frames on `device` ("" when it did)."""
    import av
    from av.codec.hwaccel import HWAccel

    from handler.probe_segment import SEGMENT

    accel = _nvdec(HWAccel, device, fallback=False)
    with _ffmpeg_errors() as logs:
        try:
            with av.open(io.BytesIO(SEGMENT), "r", format="h264", hwaccel=accel) as container:
                stream = container.streams.video[0]
                frames = list(container.decode(stream))
                hwaccel = stream.codec_context.is_hwaccel
        except (av.FFmpegError, NotImplementedError, RuntimeError, ValueError) as err:
            said = "; ".join(message.strip() for _, _, message in logs[-3:]) or f"{type(err).__name__}: {err}"
            return (f"NVDEC could not decode a test H.264 segment (FFmpeg: {said}): the container needs "
                    "the NVIDIA driver's libcuda and libnvcuvid (NVIDIA_DRIVER_CAPABILITIES=compute,utility,video)")
    return _hardware_frames(frames, hwaccel, device)


def _hardware_frames(frames: list[av.VideoFrame], hwaccel: bool, device: int) -> str:
    """Why the test segment's decode is not NVDEC's on `device` ("" when it is)."""
    if not hwaccel:
        return "FFmpeg opened the test segment's H.264 decoder without the cuda hwaccel"
    if not frames:
        return "NVDEC gave no frame of the test segment"
    kinds = sorted({frame.format.name for frame in frames})
    if kinds != ["cuda"]:
        return f"the test segment decoded to {kinds} frames, not CUDA frames: FFmpeg's software decoder ran"
    where = {frame.planes[0].__dlpack_device__() for frame in frames}
    if where != {(_DLPACK_CUDA, device)}:
        return f"the test segment's CUDA frames are on DLPack devices {sorted(where)}, not GPU {device}"
    return ""


@contextlib.contextmanager
def _ffmpeg_errors() -> Iterator[list[tuple[int, str, str]]]:
    """FFmpeg's error lines while the block runs, in this thread (PyAV drops them otherwise)."""
    import av.logging

    level = av.logging.get_level()
    av.logging.set_level(av.logging.ERROR)
    try:
        with av.logging.Capture() as logs:
            yield logs
    finally:
        av.logging.set_level(level)
