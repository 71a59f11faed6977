"""The CUDA path's logic, proven on the CPU (DESIGN section 10): out of memory recognised by the
allocator's count, every thread bound to the worker's GPU, two staging buffers in turn with chunk
k+1 collated before chunk k is waited for, learned limits that recover, and JPEG decoded on the
device with a per-frame CPU fallback. What only a GPU can show is `python -m bench.gpu_probe`'s.
"""

import json
import threading

import numpy as np
import pytest
import simplejpeg
import torch

from handler import chunks as chunks_module
from handler import device
from handler import outputs as outputs_module
from handler.collate import collate
from handler.config import HandlerConfig, JpegDecoder
from handler.errors import ConfigError
from handler.fills import DeviceFill
from handler.layout import layout_for
from handler.memory import RECOVER_AFTER, ChunkPlanner, Staging
from handler.pipeline import Pipeline, decode_pool
from tests import support
from tests.support import Answering

MEAN = HandlerConfig.from_mapping({"model_max_batch": 16, "output_names": ["mean"]})


class ScriptedOom(torch.nn.Module):
    """Above `limit` frames it "runs out of memory" the way a scripted model does on CUDA: the
    allocator counts one (`ooms`, read as `num_ooms` would be) and TorchScript re-raises a plain
    RuntimeError."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.register_buffer("ooms", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > self.limit:
            self.ooms.add_(1)
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return x.mean(dim=(1, 2, 3))


def _npy(pixels, i):
    return support.request(support.npy(pixels), "application/x-npy", {"x-frame-id": str(i)})


def _means(responses):
    return [json.loads(r.body)["frames"][0]["outputs"]["mean"] for r in responses]


def test_an_oom_inside_a_torchscript_model_is_split_by_the_allocators_count_not_its_type():
    model = torch.jit.script(ScriptedOom(limit=4))
    frames = [support.frame(64, 64, i) for i in range(16)]  # 64 = 2 x 32: no padding
    with pytest.raises(torch.jit.Error) as raised:  # TorchScript wraps whatever was raised
        model(torch.zeros(8, 3, 64, 64))
    assert not isinstance(raised.value, torch.cuda.OutOfMemoryError)  # what the old code caught

    pipeline = Answering(model, MEAN, ooms=lambda: int(model.ooms))
    responses, stats = pipeline.run([_npy(f, i) for i, f in enumerate(frames)])
    assert [r.status for r in responses] == [200] * 16
    assert stats.oom_splits == 2 and stats.chunks == 4  # 16 -> 8 + 8; the first 8 -> 4 + 4, the second goes as 4 + 4
    assert _means(responses) == pytest.approx([float(f.mean()) for f in frames], rel=1e-6)

    # The same error with the count unchanged is the model's own failure: its chunk alone, 500.
    responses, stats = Answering(model, MEAN, ooms=lambda: 0).run([_npy(f, i) for i, f in enumerate(frames)])
    assert [r.status for r in responses] == [500] * 16 and stats.oom_splits == 0


def test_a_frame_alone_that_the_allocator_cannot_fit_gets_507():
    model = torch.jit.script(ScriptedOom(limit=0))
    responses, stats = Answering(model, MEAN, ooms=lambda: int(model.ooms)).run(
        [_npy(support.frame(32, 32, i), i) for i in range(2)])
    assert [r.status for r in responses] == [507, 507]
    assert stats.rejected == {"oom": 2}


def test_the_worker_thread_and_every_decode_thread_are_bound_to_the_workers_gpu(monkeypatch):
    bound = []
    monkeypatch.setattr(device, "_worker", [torch.device("cpu")])  # restored after the test
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: bound.append(
        (threading.current_thread().name, torch.device(d))))
    gpu = torch.device("cuda", 3)
    config = HandlerConfig.from_mapping({"decode_threads": 3})
    Pipeline(lambda x: x, config, gpu)
    assert bound == [(threading.current_thread().name, gpu)] and device.worker_device() == gpu

    bound.clear()
    pool = decode_pool(config, gpu)
    started = threading.Barrier(3)
    names = list(pool.map(lambda _: started.wait() is not None and threading.current_thread().name, range(3)))
    pool.shutdown()
    assert sorted(bound) == sorted((name, gpu) for name in names) and len(set(names)) == 3


def test_two_staging_buffers_are_used_in_turn_each_allocated_once_at_capacity():
    staging = Staging(torch.device("cpu"), capacity=2 * 32 * 32 * 3, depth=2)
    first = staging.take((2, 32, 32, 3))
    second = staging.take((1, 16, 16, 3))
    third = staging.take((1, 32, 32, 3))
    assert first.data_ptr() != second.data_ptr() and third.data_ptr() == first.data_ptr()
    for _ in range(10):
        staging.take((2, 32, 32, 3))
    assert staging.allocated_bytes == 2 * (2 * 32 * 32 * 3) * 4
    assert Staging(torch.device("cuda", 1)).depth == 2 and Staging(torch.device("cpu")).depth == 1


def test_the_planned_capacity_covers_the_largest_chunk_the_planner_makes():
    config = HandlerConfig.from_mapping({"model_max_batch": 8, "max_width": 1280, "max_height": 720})
    planner = ChunkPlanner(config, layout_for(config))
    assert planner.capacity() == 8 * 736 * 1280 * 3  # 720 rounds up to 736 (size_divisor 32)
    budget = HandlerConfig.from_mapping({"model_max_batch": 8, "max_width": 1280, "max_height": 720,
                                         "memory_budget_bytes": 3 * 736 * 1280 * 64})
    assert ChunkPlanner(budget, layout_for(budget)).capacity() == 3 * 736 * 1280 * 3


def test_chunk_k_plus_1_is_collated_before_chunk_k_is_waited_for(monkeypatch):
    events = []
    real_collate, real_wait = chunks_module.collate, outputs_module.HostOutputs.wait
    monkeypatch.setattr(chunks_module, "collate", lambda *a, **k: events.append("collate") or real_collate(*a, **k))
    monkeypatch.setattr(outputs_module.HostOutputs, "wait",
                        lambda self: events.append("wait") or real_wait(self))
    config = HandlerConfig.from_mapping({"model_max_batch": 4, "output_names": ["mean"]})
    pipeline = Answering(lambda x: x.mean(dim=(1, 2, 3)), config)
    pipeline._chunks._staging = Staging(torch.device("cpu"), depth=2)  # CUDA's two buffers
    frames = [support.frame(32, 32, i) for i in range(12)]
    responses, stats = pipeline.run([_npy(f, i) for i, f in enumerate(frames)])
    assert events == ["collate", "collate", "wait", "collate", "wait", "wait"]
    assert _means(responses) == pytest.approx([float(f.mean()) for f in frames], rel=1e-6)
    assert stats.chunks == 3


class TransientOom:
    """Runs out of memory on chunks above `limit` frames while `failing` is set."""

    def __init__(self, limit):
        self.limit, self.failing, self.batches = limit, True, []

    def __call__(self, x):
        self.batches.append(x.shape[0])
        if self.failing and x.shape[0] > self.limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (transient)")
        return x.mean(dim=(1, 2, 3))


def test_a_transient_oom_does_not_halve_the_chunk_forever():
    model = TransientOom(limit=8)
    pipeline = Answering(model, MEAN)
    burst = [_npy(support.frame(32, 32, i), i) for i in range(16)]
    pipeline.run(burst)
    assert model.batches == [16, 8, 8]  # the halves count as two successes at the learned 8
    model.failing = False
    model.batches.clear()
    for _ in range((RECOVER_AFTER - 2) // 2):
        pipeline.run(burst)
    assert model.batches == [8, 8] * ((RECOVER_AFTER - 2) // 2)
    model.batches.clear()
    pipeline.run(burst)
    assert model.batches == [16]


def test_after_a_split_the_rest_of_the_wave_starts_at_the_learned_size():
    model = TransientOom(limit=4)
    _, stats = Answering(model, MEAN).run([_npy(support.frame(32, 32, i), i) for i in range(32)])
    # 16 -> 8 + 8; the first 8 -> 4 + 4; the second 8 and the next planned 16 go in 4s
    assert model.batches == [16, 8, 4, 4, 4, 4] + [4] * 4 and stats.oom_splits == 2


def test_a_limit_raised_too_soon_needs_twice_the_successes_next_time():
    planner = ChunkPlanner(MEAN, layout_for(MEAN))
    slot = (32, 32)
    planner.learn(slot, 8)
    for _ in range(RECOVER_AFTER):
        assert planner.limit(slot) == 8
        planner.succeeded(slot, 8)
    assert planner.limit(slot) == 16
    planner.learn(slot, 8)  # out of memory again at 16
    for _ in range(2 * RECOVER_AFTER - 1):
        planner.succeeded(slot, 8)
        planner.succeeded(slot, 3)  # a partial chunk proves nothing
    assert planner.limit(slot) == 8
    planner.succeeded(slot, 8)
    assert planner.limit(slot) == 16


class FakeNvjpeg:
    """A batched device JPEG decoder (torchvision's contract: `[3, h, w]` uint8 per body) that
    refuses a batch holding a body it cannot decode, as nvJPEG does; records each call's size."""

    def __init__(self, refuse=()):
        self.calls, self.refuse = [], set(refuse)

    def __call__(self, bodies):
        self.calls.append(len(bodies))
        decoded = []
        for body in bodies:
            data = body.numpy().tobytes()
            if data in self.refuse:
                raise RuntimeError("nvjpeg: unsupported JPEG")
            try:
                decoded.append(torch.from_numpy(simplejpeg.decode_jpeg(data, "RGB")).permute(2, 0, 1))
            except ValueError as err:
                raise RuntimeError(f"nvjpeg: {err}") from None
        return decoded


def test_device_jpeg_decodes_a_chunk_in_one_batch_and_falls_back_per_frame():
    config = HandlerConfig.from_mapping({"model_max_batch": 8, "pass_sizes": True})
    pixels = [support.frame(72, 96, i) for i in range(4)]
    bodies = [support.jpeg(p) for p in pixels]
    odd = bodies[1]  # the device refuses it; the CPU decodes it
    broken = bodies[2][:len(bodies[2]) // 2]  # header fine, data cut: no decoder can
    requests = [support.request(b, "image/jpeg") for b in (bodies[0], odd, broken, bodies[3])]
    from handler.models import frame_quality

    model = frame_quality.build()
    on_cpu, _ = Answering(model, config).run(requests)
    device = FakeNvjpeg(refuse=[odd])
    pipeline = Answering(model, config)
    pipeline._chunks._fill = DeviceFill(device)
    on_device, stats = pipeline.run(requests)
    assert [r.status for r in on_device] == [200, 200, 400, 200]
    assert json.loads(on_device[2].body)["type"] == "CorruptFrame"
    assert [r.body for r in on_device] == [r.body for r in on_cpu]
    assert device.calls == [4, 1, 1, 1, 1]  # the batch, then each frame once
    assert stats.rejected == {"bad_input": 1}


def test_frames_already_on_the_device_are_placed_after_the_upload_with_zero_padding():
    config = HandlerConfig.from_mapping({})
    layout = layout_for(config)
    frames = [torch.arange(20 * 30 * 3, dtype=torch.uint8).view(20, 30, 3), support.frame(32, 32, 1)]
    placement = layout.place((32, 32), [(20, 30), (32, 32)])
    fill = DeviceFill(None)
    later = fill.rows(frames)
    assert later == frozenset({0})
    batch = collate(frames, placement, torch.full((2, 32, 32, 3), 7, dtype=torch.uint8), later=later)
    assert not batch.tensor[0].any()
    assert fill.fill(batch.tensor, frames, later) == {}
    assert torch.equal(batch.tensor[0, :20, :30], frames[0]) and not batch.tensor[0, 20:].any()
    assert not batch.tensor[0, :, 30:].any()
    assert np.array_equal(batch.tensor[1].numpy(), frames[1])


def test_decode_threads_auto_and_jpeg_decoder_settings(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(6)))
    auto = HandlerConfig.from_mapping({"decode_threads": "auto"})
    assert auto == HandlerConfig.from_mapping({}) and auto.decode_threads is None
    assert auto.resolved(cuda=True).threads == 6  # the host only decodes and collates
    assert auto.resolved(cuda=False).threads == 2 == auto.threads  # the forward's threads get the rest
    assert HandlerConfig.from_mapping({"decode_threads": 3}).resolved(cuda=True).threads == 3
    assert HandlerConfig.from_mapping({"jpeg_decoder": "nvjpeg"}).jpeg_decoder is JpegDecoder.NVJPEG
    with pytest.raises(ConfigError, match="decode_threads = 0: use auto"):
        HandlerConfig.from_mapping({"decode_threads": 0})
    with pytest.raises(ConfigError, match=r"jpeg_decoder = 'gpu': use one of \['cpu', 'nvjpeg'\]"):
        HandlerConfig.from_mapping({"jpeg_decoder": "gpu"})
