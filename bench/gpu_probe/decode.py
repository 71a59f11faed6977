"""The decode sections: 720p JPEG and 1080p H.264, on the CPU and on the GPU's decoders.

- `jpeg`: decode + collate + upload frames/s through the handler's own path (`frames.decode(...,
  lazy=True)` -> `DeferredJpeg`, `collate.collate` into a pinned uint8 staging buffer, one
  non-blocking upload per chunk of 16) with 2, 8 and all CPU threads; then nvJPEG
  (`torchvision.io.decode_jpeg` on a batch, on the device) written into a device uint8 batch.
- `nvdec`: H.264 segments (2 s at 30 fps, one key frame a second) decoded by NVDEC through
  PyAV's cuda hwaccel with the frames kept on the device (DLPack, NV12), 1 segment alone and 7
  in flight; a decoder that fell back to the CPU is a failure, not a speed. The CPU decoder on
  the same segments is the baseline (and the reference NVDEC's frames must equal).

Frames are the photographs in `data/images`, panned like a camera's view, encoded at probe start
(JPEG with Pillow, H.264 with the libx264 that PyAV's wheel carries).
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from bench.gpu_probe.probe import Deadline, Probe, Rate, Row, Section, attempt, fmt, throughput

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "data" / "images"
CHUNK = 16
JPEG_QUALITY = 90
JPEG_TARGET = 5000.0  # frames/s, nvJPEG, 720p, on the H200
NVDEC_TARGET = 2000.0  # frames/s, 1080p H.264, 7 segments in flight, on the H200
NVDEC_IN_FLIGHT = 7
SEGMENT_FPS = 30
SEGMENT_SECONDS = 2
#: A 1080p30 camera's bit rate; the panned photographs get a little sensor grain so the encoder
#: has something to spend it on (smooth upscaled photos alone code to a quarter of it).
SEGMENT_BITRATE = 4_000_000
GRAIN = 3
#: H.264 encoders tried in turn for the test segments (the first this FFmpeg has and can open).
H264_ENCODERS = ("libx264", "libopenh264", "h264_nvenc")


def cpus() -> int:
    return len(os.sched_getaffinity(0))


@functools.cache
def _scenes(height: int, width: int) -> tuple[np.ndarray, ...]:
    """Each photograph scaled to cover `height` x `width` with room to pan."""
    scenes = []
    for path in sorted(IMAGES.glob("*.png")):
        photo = Image.open(path).convert("RGB")
        scale = max(height / photo.height, width / photo.width) * 1.25
        size = (max(width, round(photo.width * scale)), max(height, round(photo.height * scale)))
        scenes.append(np.asarray(photo.resize(size, Image.BILINEAR)))
    if not scenes:
        raise FileNotFoundError(f"no photographs (*.png) in {IMAGES}")
    return tuple(scenes)


def camera_frames(count: int, height: int, width: int, scene: int | None = None,
                  grain: int = 0) -> list[np.ndarray]:
    """`count` frames `[height, width, 3]` uint8: a window panning across a photograph, a few
    pixels a frame (one photograph when `scene` is given, else each frame the next one), with
    uniform noise of +-`grain` levels when asked."""
    scenes = _scenes(height, width)
    rng = np.random.default_rng(0)
    frames = []
    for i in range(count):
        picture = scenes[(scene if scene is not None else i) % len(scenes)]
        room_y, room_x = picture.shape[0] - height, picture.shape[1] - width
        left, top = _bounce(i * 4, room_x), _bounce(i * 2, room_y)
        pixels = picture[top:top + height, left:left + width]
        if grain:
            noise = rng.integers(-grain, grain + 1, pixels.shape, dtype=np.int16)
            pixels = np.clip(pixels + noise, 0, 255).astype(np.uint8)
        frames.append(np.ascontiguousarray(pixels))
    return frames


def _bounce(position: int, room: int) -> int:
    if room <= 0:
        return 0
    position %= 2 * room
    return position if position <= room else 2 * room - position


def jpeg_bodies(count: int, height: int, width: int, quality: int = JPEG_QUALITY) -> list[bytes]:
    """`count` camera frames as JPEG (Pillow: encoding needs no simplejpeg)."""
    bodies = []
    for pixels in camera_frames(count, height, width):
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, format="JPEG", quality=quality)
        bodies.append(out.getvalue())
    return bodies


def _verdict(probe: Probe, value: float, target: float) -> bool | None:
    """Compared with the target only where the target speaks: on CUDA, not in a dry run."""
    return None if probe.dry_run or not probe.cuda else value >= target


# --- JPEG -------------------------------------------------------------------------------------


class _Staging:
    """Two pinned uint8 buffers used in turn (pinned on CUDA only): each waits until its last
    upload has left it before it is refilled, so collating chunk k+1 overlaps uploading chunk k."""

    def __init__(self, shape: tuple[int, ...], device: torch.device) -> None:
        pinned = device.type == "cuda"
        self.device = device
        self.buffers = [torch.empty(shape, dtype=torch.uint8, pin_memory=pinned) for _ in range(2)]
        self.pinned = all(b.is_pinned() for b in self.buffers) if pinned else False
        self._copied: list[torch.cuda.Event | None] = [None, None]
        self._turn = 0

    def take(self) -> tuple[int, torch.Tensor]:
        turn, self._turn = self._turn, self._turn ^ 1
        event = self._copied[turn]
        if event is not None:
            event.synchronize()
        return turn, self.buffers[turn]

    def upload(self, turn: int, tensor: torch.Tensor) -> torch.Tensor:
        moved = tensor.to(self.device, non_blocking=True)
        if self.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
            self._copied[turn] = event
        return moved


def cpu_jpeg_step(bodies: Sequence[bytes], device: torch.device,
                  parallel: Callable) -> tuple[Callable[[], int], dict[str, object]]:
    """One chunk per call through the handler's path: `frames.decode(lazy=True)`, the layout's
    placement, `collate.collate` into pinned staging, a non-blocking upload. Returns the step and
    what it found (whether the frames were deferred, i.e. decoded straight into staging)."""
    from handler.clip import Meta
    from handler.collate import collate
    from handler.config import HandlerConfig
    from handler.frames import DeferredJpeg, decode
    from handler.layout import layout_for

    config = HandlerConfig()
    layout = layout_for(config)
    meta = Meta()
    starts = itertools.cycle(range(0, len(bodies) - CHUNK + 1, CHUNK))
    found: dict[str, object] = {}
    staging: list[_Staging] = []

    def step() -> int:
        chunk = bodies[next(starts):][:CHUNK]
        frames = [decode(body, "image/jpeg", meta, config, lazy=True).frames[0] for body in chunk]
        sizes = [(f.shape[0], f.shape[1]) for f in frames]
        placement = layout.place(layout.slot(*sizes[0]), sizes)
        if not staging:
            staging.append(_Staging((placement.rows, *placement.slot, 3), device))
            found.update(deferred=all(isinstance(f, DeferredJpeg) for f in frames),
                         pinned=staging[0].pinned, slot=placement.slot)
        turn, buffer = staging[0].take()
        batch = collate(frames, placement, buffer[:placement.rows], parallel)
        if batch.failed:
            raise RuntimeError(f"{len(batch.failed)} frames failed to decode: {next(iter(batch.failed.values()))}")
        staging[0].upload(turn, batch.tensor)
        return len(frames)

    return step, found


def nvjpeg_step(bodies: Sequence[bytes], device: torch.device) -> Callable[[], int]:
    """One chunk per call: `torchvision.io.decode_jpeg` on the batch's bodies on `device`,
    each image written into its slot of a device uint8 batch `[16, H, W, 3]`."""
    from torchvision.io import ImageReadMode, decode_jpeg

    from handler.config import HandlerConfig
    from handler.layout import layout_for

    tensors = [torch.frombuffer(bytearray(body), dtype=torch.uint8) for body in bodies]
    starts = itertools.cycle(range(0, len(tensors) - CHUNK + 1, CHUNK))
    batches: list[torch.Tensor] = []
    layout = layout_for(HandlerConfig())

    def step() -> int:
        chunk = tensors[next(starts):][:CHUNK]
        images = decode_jpeg(chunk, mode=ImageReadMode.RGB, device=device)
        if not batches:
            h, w = images[0].shape[1:]
            batches.append(torch.zeros((CHUNK, *layout.slot(h, w), 3), dtype=torch.uint8, device=device))
        batch = batches[0]
        for i, image in enumerate(images):
            batch[i, : image.shape[1], : image.shape[2]].copy_(image.permute(1, 2, 0))
        return len(chunk)

    return step


def jpeg_section(probe: Probe) -> list[Row]:
    """720p JPEG decode + collate + upload frames/s: CPU at 2, 8 and all threads, and nvJPEG."""
    height, width = (72, 128) if probe.dry_run else (720, 1280)
    bodies = jpeg_bodies(2 * CHUNK, height, width)
    label = f"{height}p JPEG decode + collate + upload"
    counts = sorted({2, 8, cpus()})
    rows: list[Row] = []
    measurements = len(counts) + 1

    for index, threads in enumerate(counts):
        def cpu(threads: int = threads, index: int = index) -> list[Row]:
            with ThreadPoolExecutor(threads, thread_name_prefix="collate") as pool:
                step, found = cpu_jpeg_step(bodies, probe.device, pool.map)
                rate = throughput(step, probe.deadline(1 / (measurements - index)), probe.sync)
            how = ("simplejpeg straight into the staging slot" if found.get("deferred")
                   else "Pillow, then copied (simplejpeg missing)")
            staging = "pinned" if found.get("pinned") else "pageable (no CUDA)" if not probe.cuda else "NOT pinned"
            return [Row(f"{label}, CPU {threads} threads{' (all)' if threads == cpus() else ''}",
                        fmt(rate.per_second, "frames/s"), rate.per_second, "frames/s", "", None,
                        f"chunks of {CHUNK} into {staging} uint8 staging {found.get('slot')}; {how}; "
                        f"{rate.units} frames in {rate.seconds:.1f} s")]
        rows += attempt(f"{label}, CPU {threads} threads", cpu)
    rows += attempt(f"{label}, nvJPEG", lambda: _nvjpeg_rows(probe, bodies, label), cuda_only=True)
    return rows


def _nvjpeg_rows(probe: Probe, bodies: list[bytes], label: str) -> list[Row]:
    check, target = f"{label}, nvJPEG (batches of {CHUNK})", f"≥ {JPEG_TARGET:,.0f} frames/s"
    try:
        import torchvision.io  # noqa: F401
    except Exception as exc:  # torchvision missing or built for another torch
        return [Row(check, "not applicable", None, "frames/s", target, None,
                    f"torchvision does not import: {type(exc).__name__}: {str(exc)[:120]}", True)]
    rate = throughput(nvjpeg_step(bodies, probe.device), probe.deadline(), probe.sync)
    if not probe.cuda:
        return [Row(check, f"not applicable ({fmt(rate.per_second, 'frames/s')} on the CPU)", rate.per_second,
                    "frames/s", target, None, "no CUDA: torchvision's CPU decoder ran the same batched call", True)]
    return [Row(check, fmt(rate.per_second, "frames/s"), rate.per_second, "frames/s", target,
                _verdict(probe, rate.per_second, JPEG_TARGET),
                f"torchvision.io.decode_jpeg(list, device={probe.device}) into a device uint8 batch; "
                f"{rate.units} frames in {rate.seconds:.1f} s", True)]


# --- NVDEC ------------------------------------------------------------------------------------


class NotOnDevice(RuntimeError):
    """The hardware decoder was asked for but the frames were decoded on the CPU."""


def encode_segment(frames: Sequence[np.ndarray], fps: int = SEGMENT_FPS, gop: int = SEGMENT_FPS,
                   bitrate: int = SEGMENT_BITRATE) -> tuple[bytes, str]:
    """`[H, W, 3]` uint8 frames -> an MPEG-TS H.264 segment (no B-frames, a key frame every
    `gop` frames, about `bitrate` bits/s) and the encoder's name: the first of `H264_ENCODERS`
    this FFmpeg can run.

    Raises:
        RuntimeError: no H.264 encoder works here (each one's error named).
    """
    import av

    errors = []
    for name in H264_ENCODERS:
        try:
            av.codec.Codec(name, "w")
        except Exception as exc:  # not in this FFmpeg build
            errors.append(f"{name}: {type(exc).__name__}")
            continue
        try:
            return _encode_with(name, frames, fps, gop, bitrate), name
        except Exception as exc:  # present but cannot run (h264_nvenc without a GPU)
            errors.append(f"{name}: {type(exc).__name__}: {str(exc)[:80]}")
    raise RuntimeError(f"no H.264 encoder works in PyAV's FFmpeg: {'; '.join(errors)}")


def _encode_with(name: str, frames: Sequence[np.ndarray], fps: int, gop: int, bitrate: int) -> bytes:
    import av

    height, width = frames[0].shape[:2]
    out = io.BytesIO()
    with av.open(out, "w", format="mpegts") as container:
        options = {"preset": "veryfast", "bf": "0"} if name == "libx264" else {}
        stream = container.add_stream(name, rate=fps, options=options)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.gop_size = gop
        stream.codec_context.bit_rate = bitrate
        for index, pixels in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts = index
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return out.getvalue()


def cpu_decode(segment: bytes, threads: int, keep_luma: bool = False) -> tuple[int, list[np.ndarray]]:
    """Decodes a segment with FFmpeg's software decoder (`threads` threads, frame and slice
    threading); returns the frame count and, with `keep_luma`, each frame's Y plane."""
    import av

    lumas = []
    frames = 0
    with av.open(io.BytesIO(segment), "r", format="mpegts") as container:
        stream = container.streams.video[0]
        stream.codec_context.thread_type = "AUTO"
        stream.codec_context.thread_count = threads
        for frame in container.decode(stream):
            frames += 1
            if keep_luma:  # the Y plane as decoded (no conversion that could rescale it)
                plane = frame.planes[0]
                rows = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)
                lumas.append(rows[: frame.height, : frame.width].copy())
    return frames, lumas


def nvdec_decode(segment: bytes, index: int, out: torch.Tensor) -> int:
    """Decodes a segment on GPU `index`'s NVDEC, frames kept on the device: each NV12 frame is
    copied into `out[i]` (`Tensor[N, 3H/2, W] uint8` on that GPU: Y rows, then interleaved UV).

    Raises:
        NotOnDevice: the codec context is not hardware-accelerated, or a frame came back in
            host memory.
    """
    import av
    from av.codec.hwaccel import HWAccel

    accel = HWAccel("cuda", device=str(index), allow_software_fallback=False, is_hw_owned=True,
                    options={"primary_ctx": "1"})
    frames = 0
    with av.open(io.BytesIO(segment), "r", format="mpegts", hwaccel=accel) as container:
        stream = container.streams.video[0]
        if not stream.codec_context.is_hwaccel:
            raise NotOnDevice("decoded on the CPU (no NVDEC): the codec context is not hardware-accelerated")
        for frame in container.decode(stream):
            if frame.format.name != "cuda":
                raise NotOnDevice(f"decoded on the CPU (no NVDEC): a frame came back as {frame.format.name}")
            # FFmpeg copies the frame out of the decoder on its own stream, and PyAV's DLPack
            # export takes no stream (av/video/plane.py): wait for it, then hand over the
            # capsule itself (torch.from_dlpack(plane) would pass a stream and be refused).
            torch.cuda.synchronize(index)
            luma = torch.from_dlpack(frame.planes[0].__dlpack__())
            chroma = torch.from_dlpack(frame.planes[1].__dlpack__())
            height, width = luma.shape
            slot = out[frames % out.shape[0]]
            slot[:height].copy_(luma)
            slot[height:].copy_(chroma.reshape(height // 2, width))
            frames += 1
    return frames


def nvdec_in_flight(segment: bytes, frames: int, size: tuple[int, int], index: int, streams: int,
                    until: Deadline) -> Rate:
    """`streams` threads, each decoding the segment on NVDEC again and again until `until`."""
    height, width = size
    counts = [0] * streams
    errors: list[BaseException] = []
    start = threading.Barrier(streams + 1)

    def worker(slot: int) -> None:
        try:
            with torch.cuda.device(index):
                out = torch.empty((frames, height * 3 // 2, width), dtype=torch.uint8, device=f"cuda:{index}")
                nvdec_decode(segment, index, out)  # warm-up: the decoder's first open
                start.wait()
                while not until.passed() and not errors:
                    counts[slot] += nvdec_decode(segment, index, out)
                torch.cuda.synchronize(index)
        except BaseException as exc:  # re-raised on the calling thread
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=worker, args=(i,), name=f"nvdec-{i}") for i in range(streams)]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a worker failed: its error is raised below
        start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    return Rate(sum(counts), elapsed, streams)


def nvdec_section(probe: Probe) -> list[Row]:
    """1080p H.264: NVDEC frames/s with 1 and 7 segments in flight, frames on the device, against
    the CPU decoder (all threads) on the same segments."""
    height, width = (96, 160) if probe.dry_run else (1080, 1920)
    frames = SEGMENT_SECONDS * SEGMENT_FPS if not probe.dry_run else 10
    gop = SEGMENT_FPS if not probe.dry_run else 5
    label = f"{height}p H.264"
    segment, encoder = encode_segment(camera_frames(frames, height, width, scene=0, grain=GRAIN),
                                      gop=gop)
    made = (f"{frames}-frame MPEG-TS segment ({len(segment) * 8 / 1e6 / (frames / SEGMENT_FPS):.1f} Mbit/s, "
            f"{encoder}, a key frame every {gop})")
    decoded, reference = cpu_decode(segment, cpus(), keep_luma=True)
    if decoded != frames:
        raise RuntimeError(f"the CPU decoder gave {decoded} frames of the {frames} encoded")
    nvdec = [f"{label} NVDEC: frames decoded on the device, equal to the CPU decoder's",
             f"{label} NVDEC, 1 segment", f"{label} NVDEC, {NVDEC_IN_FLIGHT} segments in flight"]
    targets = ["Y planes equal", "", f"≥ {NVDEC_TARGET:,.0f} frames/s"]
    rows: list[Row] = []
    if probe.dry_run or not probe.cuda:
        why = "dry run" if probe.dry_run else "no CUDA"
        rows += [Row(check, "not applicable", None, "", target, None, why, True)
                 for check, target in zip(nvdec, targets)]
    else:
        rows += attempt(nvdec[0], lambda: _nvdec_matches(probe, segment, reference, nvdec[0]), cuda_only=True)
        if rows[-1].ok:
            for streams, check, target, left in ((1, nvdec[1], None, 3), (NVDEC_IN_FLIGHT, nvdec[2], NVDEC_TARGET, 2)):
                def measure(streams: int = streams, check: str = check, target: float | None = target,
                            left: int = left) -> list[Row]:
                    rate = nvdec_in_flight(segment, frames, (height, width), probe.index, streams,
                                           probe.deadline(1 / left))
                    return [Row(check, fmt(rate.per_second, "frames/s"), rate.per_second, "frames/s",
                                f"≥ {target:,.0f} frames/s" if target else "",
                                None if target is None else _verdict(probe, rate.per_second, target),
                                f"{rate.units} frames in {rate.seconds:.1f} s, each segment opened anew "
                                f"(NV12 copied into a device buffer per thread)", True)]
                rows += attempt(check, measure, cuda_only=True)
        else:
            rows += [Row(check, "not measured", None, "", target, False,
                         "NVDEC did not decode on the device (see the first NVDEC row)", True)
                     for check, target in zip(nvdec[1:], targets[1:])]

    def baseline() -> list[Row]:
        threads = cpus()
        rate = throughput(lambda: cpu_decode(segment, threads)[0], probe.deadline(), lambda: None)
        return [Row(f"{label} CPU decode (FFmpeg, all {threads} threads), 1 segment at a time",
                    fmt(rate.per_second, "frames/s"), rate.per_second, "frames/s", "", None,
                    f"{made}; decode only (yuv420p in host memory, no RGB); "
                    f"{rate.units} frames in {rate.seconds:.1f} s")]
    rows += attempt(f"{label} CPU decode", baseline)
    return rows


def _nvdec_matches(probe: Probe, segment: bytes, reference: list[np.ndarray], check: str) -> list[Row]:
    """Decodes the segment once on NVDEC: every frame in CUDA memory, Y planes equal to the CPU's."""
    height, width = reference[0].shape
    out = torch.empty((len(reference), height * 3 // 2, width), dtype=torch.uint8, device=probe.device)
    try:
        count = nvdec_decode(segment, probe.index, out)
    except NotOnDevice as exc:
        return [Row(check, "decoded on the CPU (no NVDEC)", None, "", "Y planes equal", False, str(exc), True)]
    probe.sync()
    lumas = torch.from_numpy(np.stack(reference)).to(probe.device)
    diff = int((out[:count, :height].int() - lumas[:count].int()).abs().max()) if count else -1
    ok = count == len(reference) and diff == 0
    return [Row(check, f"{count}/{len(reference)} frames on {out.device}, max |Y diff| {diff}", float(diff), "",
                "Y planes equal", ok, "HWAccel('cuda', is_hw_owned=True, no software fallback); "
                "H.264 decoding is bit-exact, so NVDEC's Y plane must equal FFmpeg's", True)]


SECTIONS: list[Section] = [Section("jpeg", jpeg_section), Section("nvdec", nvdec_section)]
