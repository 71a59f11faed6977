"""NVDEC is proven per GPU on a test segment, or not claimed (`handler.video.probe`).

No GPU here: the GPU worker is torch's CUDA calls monkeypatched, and FFmpeg's hwaccel and `av.open`
faked to give what a decoder would (CUDA frames, or a software fallback). One test runs the real
FFmpeg, which cannot load the CUDA driver on this machine.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import dataclasses
import io
import logging
import threading
from types import SimpleNamespace

import av
import av.codec.hwaccel
import numpy as np
import pytest
import torch

from handler import device, video
from handler.config import HandlerConfig
from handler.formats import Format
from tests import videos

CONFIG = HandlerConfig()


class FakeAccel:
    """PyAV's HWAccel, as made: it records its settings."""

    def __init__(self, device_type, device=None, allow_software_fallback=True, options=None, flags=None,
                 is_hw_owned=False):
        self.device_type, self.device, self.fallback = device_type, device, allow_software_fallback
        self.options, self.is_hw_owned = options, is_hw_owned


@dataclasses.dataclass
class FakeDecoder:
    """`av.open` for the test segment: frames as a decoder with these properties gives them."""

    hwaccel: bool = True
    format: str = "cuda"
    dlpack_device: int | None = None  # None: the accel's own device
    opened: list = dataclasses.field(default_factory=list)

    def __call__(self, file, mode, format, hwaccel):
        self.opened.append(hwaccel)
        device = int(hwaccel.device) if self.dlpack_device is None else self.dlpack_device
        plane = SimpleNamespace(__dlpack_device__=lambda: (2, device))
        frames = [SimpleNamespace(format=SimpleNamespace(name=self.format), planes=[plane]) for _ in range(3)]
        stream = SimpleNamespace(codec_context=SimpleNamespace(is_hwaccel=self.hwaccel))
        container = SimpleNamespace(streams=SimpleNamespace(video=[stream]), decode=lambda s: iter(frames))
        return contextlib.nullcontext(container)


@pytest.fixture
def fresh_probe():
    video.probe.cache_clear()
    yield
    video.probe.cache_clear()


@pytest.fixture
def gpu_worker(monkeypatch, fresh_probe):
    """torch sees CUDA with a current device per thread; FFmpeg has the cuda hwaccel and decodes
    the test segment as the returned `FakeDecoder` says."""
    local = threading.local()
    monkeypatch.setattr(device, "_worker", [torch.device("cuda")])  # a CUDA worker, its index per thread
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: local.device)
    monkeypatch.setattr(av.codec.hwaccel, "HWAccel", FakeAccel)
    monkeypatch.setattr(av.codec.hwaccel, "hwdevices_available", lambda: ["cuda", "drm"])
    decoder = FakeDecoder()
    monkeypatch.setattr(av, "open", decoder)
    return local, decoder


def _accel_on(local, device):
    """`_hwaccel` called from a thread whose current CUDA device is `device`."""
    got = []

    def run():
        local.device = device
        got.append(video._hwaccel(CONFIG))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return got[0]


def test_each_thread_gets_the_accel_of_its_own_current_device_proven_once(gpu_worker):
    local, decoder = gpu_worker
    three, five = _accel_on(local, 3), _accel_on(local, 5)
    assert (three.device, five.device) == ("3", "5") and three is not five
    assert _accel_on(local, 3) is three
    # the proof ran once per device, software fallback off; segments then decode with it on
    assert [(a.device, a.fallback) for a in decoder.opened] == [("3", False), ("5", False)]
    for accel in (three, five, *decoder.opened):
        assert (accel.device_type, accel.is_hw_owned, accel.options) == ("cuda", True, {"primary_ctx": "1"})
    assert all(accel.fallback for accel in (three, five))


def test_the_workers_own_gpu_decodes_and_a_cpu_worker_on_a_gpu_host_never_does(gpu_worker, monkeypatch):
    local, decoder = gpu_worker
    monkeypatch.setattr(device, "_worker", [torch.device("cuda", 4)])
    assert _accel_on(local, 0).device == "4"  # the worker's gpu_id, whatever the thread's device
    monkeypatch.setattr(device, "_worker", [torch.device("cpu")])
    assert _accel_on(local, 0) is None
    assert [a.device for a in decoder.opened] == ["4"]


def test_a_proven_gpu_is_named_at_startup(gpu_worker):
    assert video.describe_decoder(CONFIG, torch.device("cuda:2")) == (
        "video segments decode on NVDEC (GPU 2), proven on a test segment")
    assert video.probe(2).accel is not None


@pytest.mark.parametrize(("decoder", "reason"), [
    (FakeDecoder(hwaccel=False, format="yuv420p"),
     "FFmpeg opened the test segment's H.264 decoder without the cuda hwaccel"),
    (FakeDecoder(format="yuv420p"),
     "the test segment decoded to ['yuv420p'] frames, not CUDA frames: FFmpeg's software decoder ran"),
    (FakeDecoder(dlpack_device=0), "the test segment's CUDA frames are on DLPack devices [(2, 0)], not GPU 1"),
])
def test_a_decode_that_is_not_nvdec_on_that_gpu_is_reported_as_cpu(gpu_worker, monkeypatch, caplog, decoder,
                                                                     reason):
    local, _ = gpu_worker
    monkeypatch.setattr(av, "open", decoder)
    with caplog.at_level(logging.WARNING, logger="handler.video"):
        assert _accel_on(local, 1) is None
    assert video.probe(1) == video.Probe(1, None, reason)
    assert caplog.messages == [f"GPU 1: video segments decode on the CPU: {reason}"]
    assert video.describe_decoder(CONFIG, torch.device("cuda:1")) == f"video segments decode on the CPU: {reason}"


def test_an_ffmpeg_without_the_cuda_hwaccel_is_cpu(gpu_worker, monkeypatch):
    monkeypatch.setattr(av.codec.hwaccel, "hwdevices_available", lambda: ["vaapi"])
    assert video.probe(0).reason == ("this FFmpeg has no cuda hwaccel (it has ['vaapi']): install PyAV from its "
                                     "PyPI wheels, whose FFmpeg has it")


def test_without_cuda_or_with_hw_decode_off_the_cpu_decodes_and_nothing_is_probed(fresh_probe):
    assert video.describe_decoder(CONFIG, torch.device("cpu")) == (
        "video segments decode on the CPU: the worker has no CUDA device")
    off = dataclasses.replace(CONFIG, video_hw_decode=False)
    assert video.describe_decoder(off, torch.device("cuda:0")) == (
        "video segments decode on the CPU: handler.video_hw_decode is false")
    assert video._hwaccel(off) is None
    assert video.probe.cache_info().currsize == 0


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="this machine has the CUDA driver")
def test_real_ffmpeg_without_the_driver_says_why_and_segments_decode_on_the_cpu(monkeypatch, fresh_probe):
    monkeypatch.setattr(device, "_worker", [torch.device("cuda", 0)])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    reason = video.probe(0).reason
    assert reason.startswith("NVDEC could not decode a test H.264 segment (FFmpeg: Cannot load libcuda.so.1")
    assert reason.endswith("the container needs the NVIDIA driver's libcuda and libnvcuvid "
                           "(NVIDIA_DRIVER_CAPABILITIES=compute,utility,video)")
    body = videos.segment("mp4", frames=4)
    clip = video.decode_segment(body, Format.MP4, None, CONFIG)
    plain = video.decode_segment(body, Format.MP4, None, dataclasses.replace(CONFIG, video_hw_decode=False))
    assert clip.decoder == plain.decoder == "cpu"
    assert all(np.array_equal(a, b) for a, b in zip(clip.frames, plain.frames)) and len(clip.frames) == 4


@dataclasses.dataclass
class FakeReader:
    """`video._Reader` over made-up frames."""

    decoded: list
    fmt: Format = Format.MP4

    def frames(self):
        return iter(self.decoded)

    def check_complete(self, decoded):
        assert decoded == len(self.decoded)


def _frame(index, kind):
    """A decoded 4x2 frame: a 10-bit NVDEC picture (downloaded even for `resize: pad`) or a CPU one."""
    return SimpleNamespace(is_corrupt=False, width=4, height=2, time=index / 30, format=SimpleNamespace(name=kind),
                           sw_format=SimpleNamespace(name="p010le") if kind == "cuda" else None,
                           to_ndarray=lambda format: np.full((2, 4, 3), index, np.uint8))


@pytest.mark.parametrize(("kinds", "decoder"), [(["cuda"] * 3, "nvdec"), (["cuda", "yuv420p", "cuda"], "cpu"),
                                                (["yuv420p"] * 3, "cpu")])
def test_a_segment_is_nvdec_only_when_every_frame_came_from_it(kinds, decoder):
    reader = FakeReader([_frame(i, kind) for i, kind in enumerate(kinds)])
    clip = video._decode(reader, video.PtsSampler(None), CONFIG, None)
    assert clip.decoder == decoder and [int(f[0, 0, 0]) for f in clip.frames] == [0, 1, 2]


def test_an_odd_frames_dlpack_planes_repeat_its_last_chroma_sample():
    """PyAV exports floor(H/2) x floor(W/2) chroma; the picture needs ceil (97x61: 49x31)."""
    rgb = np.random.default_rng(7).integers(0, 256, (97, 61, 3), dtype=np.uint8)
    nv12 = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="nv12")
    y, uv = video._nv12_planes(nv12)
    pitch = nv12.planes[1].line_size
    chroma = np.frombuffer(nv12.planes[1], np.uint8).reshape(-1, pitch)[:49, :62].reshape(49, 31, 2)
    luma = np.frombuffer(nv12.planes[0], np.uint8).reshape(-1, nv12.planes[0].line_size)[:97, :61]
    assert y.shape == (97, 61) and uv.shape == (49, 31, 2) and np.array_equal(y.numpy(), luma)
    assert np.array_equal(uv[:48, :30].numpy(), chroma[:48, :30])
    assert torch.equal(uv[48], uv[47]) and torch.equal(uv[:, 30], uv[:, 29])


def test_the_test_segment_is_three_baseline_frames_the_cpu_decodes():
    from handler.probe_segment import SEGMENT

    with av.open(io.BytesIO(SEGMENT), "r", format="h264") as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        assert (stream.codec_context.profile, len(frames)) == ("Constrained Baseline", 3)
    assert {(f.width, f.height, f.format.name) for f in frames} == {(128, 128, "yuv420p")}


class DownloadedNv12:
    """A CPU NV12 frame that says it is a CUDA frame of NV12 (what NVDEC gives a letterbox engine)."""

    def __init__(self, frame):
        self.frame, self.sw_format = frame, frame.format

    def reformat(self, **kwargs):
        return self.frame.reformat(**kwargs)

    def to_ndarray(self, **kwargs):
        return self.frame.to_ndarray(**kwargs)


@pytest.mark.parametrize("codec", ["libx264", "libx264-bt709", "libx264-full"])
def test_a_downloaded_nvdec_picture_gives_the_cpu_decoders_rgb_exactly(codec):
    """swscale's NV12 -> RGB interpolates chroma; through yuv420p it matches the CPU decoder's."""
    body = videos.segment("mp4", width=320, height=240, frames=2, codec=codec, photo="coffee.png")
    with av.open(io.BytesIO(body), "r", format="mp4") as container:
        cpu = next(container.decode(video=0))
    nv12 = cpu.reformat(format="nv12")
    assert np.array_equal(video._rgb(DownloadedNv12(nv12), on_device=False), cpu.to_ndarray(format="rgb24"))
    assert np.abs(nv12.to_ndarray(format="rgb24").astype(int) - cpu.to_ndarray(format="rgb24")).max() > 20
