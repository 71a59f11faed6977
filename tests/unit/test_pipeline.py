import gc
import json
import math
import weakref

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handler.clip import Clip, Request
from handler.config import HandlerConfig
from handler.errors import CorruptFrame
from handler.metrics import BatchStats, Kind, Sample, samples
from handler.models import fixed_batch_cnn, frame_quality
from tests import support, videos
from tests.support import Answering

QUALITY = HandlerConfig.from_mapping({"model_max_batch": 16, "pass_sizes": True})


@pytest.fixture(scope="module")
def quality_model():
    return frame_quality.build()


def _npy_request(pixels, frame_id):
    return support.request(support.npy(pixels), "application/x-npy", {"x-frame-id": str(frame_id)})


def _noise(h, w, seed):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


side = st.one_of(st.integers(16, 200), st.integers(16, 2000))
batches = st.lists(st.tuples(side, side), min_size=1, max_size=64).filter(
    lambda sizes: sum(h * w for h, w in sizes) <= 12_000_000)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches, st.data())
def test_any_batch_size_and_resolution_mix_is_answered_in_order_with_exact_values(
        quality_model, sizes, data):
    frames = [_noise(h, w, i) for i, (h, w) in enumerate(sizes)]
    requests = [_npy_request(f, i) for i, f in enumerate(frames)]
    bad = data.draw(st.integers(-1, len(requests) - 1), label="bad index")
    if bad >= 0:
        requests[bad] = support.request(b"\x93NUMPY broken", "application/x-npy", {"x-frame-id": str(bad)})
    responses, stats = Answering(quality_model, QUALITY).run(requests)
    assert len(responses) == len(requests)
    for i, (response, pixels) in enumerate(zip(responses, frames)):
        body = json.loads(response.body)
        assert body["frame_id"] == str(i)
        if i == bad:
            assert (response.status, body["type"]) == (400, "CorruptFrame")
            continue
        assert response.status == 200
        [result] = body["frames"]
        assert (result["height"], result["width"]) == pixels.shape[:2]
        support.assert_quality(result["outputs"], pixels)
    assert stats.frames == len(requests)
    assert stats.rejected == ({"bad_input": 1} if bad >= 0 else {})


class CountingModel:
    """Counts forward calls and the largest batch seen; optionally raises OOM above a batch."""

    def __init__(self, model, oom_above=None):
        self.model, self.oom_above, self.calls, self.batches = model, oom_above, 0, []

    def __call__(self, x, *rest):
        self.calls += 1
        self.batches.append(x.shape[0])
        if self.oom_above is not None and x.shape[0] > self.oom_above:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return self.model(x, *rest)


def test_a_burst_larger_than_the_model_batch_runs_in_chunks(quality_model):
    model = CountingModel(quality_model)
    frames = [support.frame(72, 128, i) for i in range(32)]
    responses, _ = Answering(model, QUALITY).run([_npy_request(f, i) for i, f in enumerate(frames)])
    assert [r.status for r in responses] == [200] * 32
    assert model.batches == [16, 16]


def test_mixed_resolutions_are_grouped_by_bucket(quality_model):
    model = CountingModel(quality_model)
    shapes = [(480, 640), (720, 1280), (481, 641), (720, 1280), (97, 33)]
    frames = [support.frame(h, w, i) for i, (h, w) in enumerate(shapes)]
    responses, stats = Answering(model, QUALITY).run([_npy_request(f, i) for i, f in enumerate(frames)])
    assert [r.status for r in responses] == [200] * 5
    assert sorted(model.batches) == [1, 1, 1, 2]  # 480x640 and 481x641 differ in the 32-bucket
    for response, pixels in zip(responses, frames):
        support.assert_quality(json.loads(response.body)["frames"][0]["outputs"], pixels)
    assert 0 < stats.padding_ratio < 0.1


def test_out_of_memory_halves_the_chunk_and_remembers(quality_model):
    model = CountingModel(quality_model, oom_above=4)
    pipeline = Answering(model, QUALITY)
    frames = [support.frame(64, 64, i) for i in range(16)]
    responses, stats = pipeline.run([_npy_request(f, i) for i, f in enumerate(frames)])
    assert [r.status for r in responses] == [200] * 16
    assert stats.oom_splits == 1 + 1  # 16 -> 8 + 8; the first 8 -> 4 + 4; the second 8 goes in 4s, learned
    for response, pixels in zip(responses, frames):
        support.assert_quality(json.loads(response.body)["frames"][0]["outputs"], pixels)
    model.batches.clear()
    _, stats = pipeline.run([_npy_request(f, i) for i, f in enumerate(frames)])
    assert stats.oom_splits == 0 and model.batches == [4, 4, 4, 4]


def test_a_frame_that_never_fits_gets_507_alone(quality_model):
    model = CountingModel(quality_model, oom_above=0)
    requests = [_npy_request(support.frame(32, 32, i), i) for i in range(3)]
    requests.append(support.request(b"", "image/png"))
    responses, stats = Answering(model, QUALITY).run(requests)
    assert [r.status for r in responses] == [507, 507, 507, 400]
    assert json.loads(responses[0].body)["type"] == "DeviceOutOfMemory"
    assert stats.rejected == {"oom": 3, "bad_input": 1}
    clip = np.stack([support.frame(32, 32, i) for i in range(3)])
    [response], stats = Answering(model, QUALITY).run([support.request(support.npy(clip), "application/x-npy")])
    assert response.status == 507 and stats.frames == 3 and stats.rejected == {"oom": 3}


def test_memory_budget_caps_the_chunk(quality_model):
    model = CountingModel(quality_model)
    config = HandlerConfig.from_mapping(
        {"pass_sizes": True, "memory_budget_bytes": 3 * 64 * 64 * 64, "bytes_per_pixel": 64})
    frames = [support.frame(64, 64, i) for i in range(7)]
    responses, _ = Answering(model, config).run([_npy_request(f, i) for i, f in enumerate(frames)])
    assert [r.status for r in responses] == [200] * 7
    assert model.batches == [3, 3, 1]


def test_a_batch_of_large_clips_is_served_in_waves_under_max_batch_pixels(quality_model):
    model = CountingModel(quality_model)
    config = HandlerConfig.from_mapping({"pass_sizes": True, "max_width": 64, "max_height": 64,
                                         "max_clip_pixels": 2 * 64 * 64, "max_batch_pixels": 3 * 64 * 64})
    clips = [np.stack([support.frame(64, 64, 2 * i), support.frame(64, 64, 2 * i + 1)]) for i in range(3)]
    requests = [support.request(support.npy(clip), "application/x-npy") for clip in clips]
    requests.insert(1, support.request(b"", "image/png"))  # an error holds no pixels and keeps its place
    responses, stats = Answering(model, config).run(requests)
    assert [r.status for r in responses] == [200, 400, 200, 200]
    # Two clips of 2 frames exceed 3 frames' worth: each clip is its own wave and forward.
    assert model.batches == [2, 2, 2] and stats.frames == 7 and stats.chunks == 3
    for response, clip in zip([responses[0], *responses[2:]], clips):
        for frame, pixels in zip(json.loads(response.body)["frames"], clip):
            support.assert_quality(frame["outputs"], pixels)
    # Without the bound the same batch is one forward.
    wide = HandlerConfig.from_mapping({"pass_sizes": True, "max_width": 64, "max_height": 64,
                                       "max_clip_pixels": 2 * 64 * 64})
    model.batches = []
    Answering(model, wide).run(requests)
    assert model.batches == [6]


def test_a_served_wave_is_released_before_more_clips_are_decoded(quality_model):
    config = HandlerConfig.from_mapping({"pass_sizes": True, "max_width": 64, "max_height": 64,
                                         "max_clip_pixels": 2 * 64 * 64, "max_batch_pixels": 3 * 64 * 64})
    clips = [np.stack([support.frame(64, 64, 2 * i), support.frame(64, 64, 2 * i + 1)]) for i in range(5)]
    requests = [support.request(support.npy(clip), "application/x-npy") for clip in clips]
    decoded, alive_at_submit = {}, {}  # by request position

    pipeline = Answering(quality_model, config)
    waves = pipeline._waves
    decode, submit = waves._decode, waves._pool.submit

    def watched_decode(request, started):
        clip = decode(request, started)
        decoded[requests.index(request)] = [weakref.ref(f) for f in clip.frames]
        return clip

    def watched_submit(fn, *args):  # runs on the batch's thread, where the waves are held
        if args and isinstance(args[0], Request):
            gc.collect()
            alive_at_submit[requests.index(args[0])] = {
                p for p, refs in decoded.items() if any(r() is not None for r in refs)}
        return submit(fn, *args)

    waves._decode = watched_decode
    waves._pool.submit = watched_submit
    responses, _ = pipeline.run(requests)
    assert [r.status for r in responses] == [200] * 5
    # Each clip is its own wave; decoding runs decode_threads (2) ahead. The last clip is
    # submitted once the first wave was served: its frames are gone, the second clip's held.
    assert 0 not in alive_at_submit[4] and 1 in alive_at_submit[4]


def test_stale_frames_get_504_without_model_time(quality_model):
    model = CountingModel(quality_model)
    config = HandlerConfig.from_mapping({"pass_sizes": True, "max_frame_age_ms": 200})
    pipeline = Answering(model, config, clock=lambda: 1000.0)
    body = support.npy(support.frame(16, 16))
    requests = [
        support.request(body, "application/x-npy", {"x-capture-time": "999.5"}),
        support.request(body, "application/x-npy", {"x-capture-time": "999.9"}),
        support.request(body, "application/x-npy", {"x-capture-time": "yesterday"}),
        support.request(body, "application/x-npy"),
    ]
    responses, stats = pipeline.run(requests)
    assert [r.status for r in responses] == [504, 200, 400, 200]
    assert json.loads(responses[0].body)["type"] == "StaleFrame"
    assert model.batches == [2]
    stale_only, _ = pipeline.run(requests[:1])
    assert stale_only[0].status == 504 and model.calls == 1


def test_a_model_error_fails_only_its_chunk(quality_model):
    def model(x, sizes):
        if x.shape[2] > 64:
            raise RuntimeError("boom")
        return quality_model(x, sizes)

    requests = [_npy_request(support.frame(64, 64), 0), _npy_request(support.frame(128, 128), 1)]
    responses, stats = Answering(model, QUALITY).run(requests)
    assert [r.status for r in responses] == [200, 500]
    assert stats.rejected == {"internal": 1}


@pytest.fixture(scope="module")
def static_engine():
    return fixed_batch_cnn.build().module()


def test_the_static_engine_refuses_other_batches(static_engine):
    with pytest.raises(AssertionError, match=r"^Guard failed: x\.size\(\)\[0\] == 16$"):
        static_engine(torch.zeros(32, 3, 128, 128))


def test_static_batch_pads_chunks_and_drops_padded_rows(static_engine):
    config = HandlerConfig.from_mapping({
        "static_batch": 16, "resize": "letterbox", "input_size": [128, 128], "output_names": ["scores"]})
    model = CountingModel(static_engine)
    pipeline = Answering(model, config)
    clip = np.stack([support.frame(240, 320, i) for i in range(20)])
    [response], stats = pipeline.run([support.request(support.npy(clip), "application/x-npy")])
    assert response.status == 200 and model.batches == [16, 16]
    together = json.loads(response.body)["frames"]
    assert len(together) == 20 and all(len(f["outputs"]["scores"]) == 10 for f in together)
    alone = [json.loads(pipeline.run([_npy_request(f, 0)])[0][0].body)["frames"][0] for f in clip[:3]]
    for a, b in zip(together, alone):
        np.testing.assert_allclose(a["outputs"]["scores"], b["outputs"]["scores"], rtol=1e-5, atol=1e-6)
    mixed = [_npy_request(support.frame(h, w, 1), 0) for h, w in [(480, 640), (1080, 1920), (33, 97)]]
    assert [r.status for r in pipeline.run(mixed)[0]] == [200, 200, 200]


@pytest.mark.parametrize(("raw", "names", "expected"), [
    (lambda x: x.mean(dim=(1, 2, 3)), None, {"output": 2.0}),
    (lambda x: x.mean(dim=(1, 2, 3)), ["score"], {"score": 2.0}),
    (lambda x: (x.mean(dim=(1, 2, 3)), x.amax(dim=(2, 3))), None,
     {"output_0": 2.0, "output_1": [1.0, 2.0, 3.0]}),
    (lambda x: (x.mean(dim=(1, 2, 3)), x.amax(dim=(2, 3))), ["mean", "peak"],
     {"mean": 2.0, "peak": [1.0, 2.0, 3.0]}),
    (lambda x: {"b": x.amin(dim=(1, 2, 3)), "a": x[:, 0, 0, 0].long()}, ["ignored"], {"b": 1.0, "a": 1}),
])
def test_output_naming(raw, names, expected):
    config = HandlerConfig.from_mapping({"size_divisor": 4, **({} if names is None else {"output_names": names})})
    pixels = np.broadcast_to(np.array([1, 2, 3], np.uint8), (4, 4, 3)).copy()
    [response], _ = Answering(raw, config).run([_npy_request(pixels, 0)])
    assert response.status == 200
    assert json.loads(response.body)["frames"][0]["outputs"] == expected


def test_output_names_that_do_not_match_the_model_fail_its_chunk_only():
    config = HandlerConfig.from_mapping({"output_names": ["a", "b", "c"]})
    responses, stats = Answering(lambda x: (x.mean(), x.sum()), config).run([_npy_request(support.frame(8, 8), 0)])
    assert [r.status for r in responses] == [500] and stats.rejected == {"internal": 1}


def test_dense_outputs_lists_the_maps_to_crop_and_keeps_the_rest_whole():
    def model(x):  # a map at stride 2 and a [N, 2, 2] vector output (two corners)
        n = x.shape[0]
        return {"mask": x[:, 0, ::2, ::2], "corners": torch.tensor([[[1.0, 2.0], [3.0, 4.0]]] * n),
                "rgb": x[:, :, 0, 0]}

    pixels = np.arange(6 * 6 * 3, dtype=np.uint8).reshape(6, 6, 3)  # in an 8x8 slot
    config = HandlerConfig.from_mapping({"size_divisor": 8, "dense_outputs": ["mask"]})
    [response], _ = Answering(model, config).run([_npy_request(pixels, 0)])
    outputs = json.loads(response.body)["frames"][0]["outputs"]
    assert outputs["mask"] == pixels[::2, ::2, 0].astype(float).tolist()  # 3x3 of the 4x4 map
    assert outputs["corners"] == [[1.0, 2.0], [3.0, 4.0]]
    [response], _ = Answering(model, HandlerConfig.from_mapping({"size_divisor": 8})).run([_npy_request(pixels, 0)])
    assert json.loads(response.body)["frames"][0]["outputs"]["corners"] == [[1.0, 2.0], [3.0, 4.0]]
    small = support.frame(2, 2, 1)  # `auto` takes the corners for a stride-4 map and cuts them to [[1.0]]
    [response], _ = Answering(model, HandlerConfig.from_mapping({"size_divisor": 8})).run([_npy_request(small, 0)])
    assert json.loads(response.body)["frames"][0]["outputs"]["corners"] == [[1.0]]
    listed = HandlerConfig.from_mapping({"size_divisor": 8, "dense_outputs": ["mask", "rgb"]})  # [N, 3]
    responses, stats = Answering(model, listed).run([_npy_request(pixels, 0)])
    assert [r.status for r in responses] == [500] and stats.rejected == {"internal": 1}


def test_a_model_returning_nan_or_inf_answers_valid_json_with_null():
    def model(x):
        n = x.shape[0]
        nan = torch.full((n,), math.nan)
        return {"nan": nan, "inf": torch.full((n,), math.inf), "mixed": torch.tensor([[1.0, -math.inf]] * n),
                "fine": torch.ones(n)}

    [response], _ = Answering(model, HandlerConfig()).run([_npy_request(support.frame(8, 8), 0)])
    assert response.status == 200
    assert "NaN" not in response.body and "Infinity" not in response.body
    outputs = json.loads(response.body)["frames"][0]["outputs"]
    assert outputs == {"nan": None, "inf": None, "mixed": [1.0, None], "fine": 1.0}


# Each luma path: channels-last four pixels at a time (width % 4 == 0), channels-last one pixel
# at a time, and planes (the NCHW input a stock-style handler stacks).
@pytest.mark.parametrize(("width", "memory_format"), [(160, torch.channels_last), (162, torch.channels_last),
                                                     (160, torch.contiguous_format)])
def test_frame_quality_reads_only_each_frames_own_area(quality_model, width, memory_format):
    frames = [support.frame(97, 131, 1), support.frame(2, 5, 2), support.frame(64, 160, 3)]
    x = torch.full((4, 3, 128, width), 77.0)  # padding full of garbage, and a padded row
    for i, f in enumerate(frames):
        x[i, :, : f.shape[0], : f.shape[1]] = torch.from_numpy(f.copy()).permute(2, 0, 1).float()
    sizes = torch.tensor([[97, 131], [2, 5], [64, 160], [0, 0]])
    out = quality_model(x.contiguous(memory_format=memory_format), sizes)
    for i, f in enumerate(frames):
        support.assert_quality({k: float(v[i]) for k, v in out.items()}, f)
    assert out["sharpness"][1].item() == 0.0  # 2 rows: no interior
    assert [out[k][3].item() for k in ("brightness", "contrast", "sharpness")] == [0.0, 0.0, 0.0]


def test_with_uint8_staging_jpeg_is_decoded_in_its_slot_and_a_broken_one_fails_alone(quality_model):
    pipeline = Answering(quality_model, QUALITY)
    pipeline._chunks._staging.dtype = torch.uint8  # as on CUDA: frames travel to the device as uint8
    full = support.jpeg(support.frame(72, 128, 1))  # as wide as its 96x128 slot: decoded in place
    narrow = support.jpeg(support.frame(72, 100, 2))  # narrower than the slot: decoded, then copied
    broken = full[: len(full) // 2]  # its header is fine: the damage shows while collating
    responses, stats = pipeline.run([support.request(b, "image/jpeg", {}) for b in (full, broken, narrow)])
    assert [r.status for r in responses] == [200, 400, 200]
    assert json.loads(responses[1].body)["type"] == "CorruptFrame"
    assert stats.chunks == 1 and stats.rejected == {"bad_input": 1}
    for response, body in ((responses[0], full), (responses[2], narrow)):
        support.assert_quality(json.loads(response.body)["frames"][0]["outputs"], support.decoded(body))


def test_frame_quality_values_do_not_depend_on_the_batch_mates(quality_model):
    frames = [support.frame(480, 640, 21 + i) for i in range(6)]
    x = torch.stack([torch.from_numpy(f.copy()).permute(2, 0, 1).float() for f in frames])
    x = x.contiguous(memory_format=torch.channels_last)
    sizes = torch.tensor([[480, 640]] * 6)
    together = quality_model(x, sizes)
    for i in range(6):
        alone = quality_model(x[i:i + 1], sizes[i:i + 1])
        assert {k: v[i].item() for k, v in together.items()} == {k: v[0].item() for k, v in alone.items()}


def test_segments_are_counted_by_their_decoder_and_sampled_with_a_decoder_dimension():
    stats = BatchStats()
    stats.count_segments([Clip([], [], decoder="nvdec"), CorruptFrame("broken"), Clip([]), Clip([], [], decoder="cpu")])
    stats.count_segments([Clip([], [], decoder="nvdec")])
    assert stats.segments == {"nvdec": 2, "cpu": 1}
    assert [s for s in samples(stats, 8) if s.name == "video_segments_total"] == [
        Sample("video_segments_total", Kind.COUNTER, 1, (("Decoder", "cpu"),)),
        Sample("video_segments_total", Kind.COUNTER, 2, (("Decoder", "nvdec"),))]


def test_video_segments_are_counted_by_decoder_and_images_are_not(quality_model):
    """On this machine (no CUDA) every segment says the CPU decoded it; a broken one counts nothing."""
    segment = videos.segment("mp4", frames=3)
    requests = [support.request(segment, "video/mp4"), _npy_request(support.frame(32, 48), 1),
                support.request(segment, "video/mp4"), support.request(segment[:200], "video/mp4")]
    responses, stats = Answering(quality_model, QUALITY).run(requests)
    assert [r.status for r in responses] == [200, 200, 200, 400]
    assert stats.segments == {"cpu": 2}
    assert Sample("video_segments_total", Kind.COUNTER, 2, (("Decoder", "cpu"),)) in samples(stats, 8)
    assert Sample("video_frames_rejected_total", Kind.COUNTER, 1, (("Reason", "bad_input"),)) in samples(stats, 8)
