"""The handler driven in-process through a real `ts.context.Context`, as TorchServe's worker does."""

import gc
import json
import logging

import numpy as np
import pytest
import torch
import yaml
from ts.context import Context, RequestProcessor
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl

from handler.errors import ConfigError
from handler.models.build import build_all
from handler.service import VideoFrameHandler
from tests import support, videos

MODELS = support.ROOT / "handler" / "models"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("models")
    build_all(out)
    return out


def _context(model_dir, name, serialized, handler_config=None, batch_size=32):
    raw = yaml.safe_load((MODELS / f"{name}.yaml").read_text())
    if handler_config is not None:
        raw["handler"] = handler_config
    metrics = MetricsCacheYamlImpl(str(support.ROOT / "handler" / "metrics.yaml"))
    metrics.initialize_cache()
    manifest = {"model": {"modelName": name, "serializedFile": serialized, "handler": "service.py"}}
    return Context(name, str(model_dir), manifest, batch_size, None, "0.12.0",
                   metrics=metrics, model_yaml_config=raw)


def _serve(handler, context, requests):
    """requests: (body, content_type, headers) as the TorchServe frontend forwards them."""
    context.request_processor = [
        RequestProcessor({"body": {"content-type": ct}, "Content-Type": ct, **headers})
        for _, ct, headers in requests]
    context.request_ids = {i: f"req-{i}" for i in range(len(requests))}
    context.metrics.set_request_ids(context.request_ids)
    data = [{"body": bytearray(body)} for body, _, _ in requests]
    return handler.handle(data, context)


@pytest.fixture(scope="module")
def quality(model_dir):
    context = _context(model_dir, "frame_quality", "frame_quality.pt")
    handler = VideoFrameHandler()
    handler.initialize(context)
    return handler, context


def test_each_request_gets_its_own_status_and_json(quality, caplog):
    handler, context = quality
    good = support.frame(720, 1280, 3)
    jpeg = support.jpeg(support.frame(480, 640, 4))
    requests = [
        (support.npy(good), "application/x-npy", {"X-Stream-Id": "cam-7", "X-Frame-Id": "1042"}),
        (jpeg[:-500], "image/jpeg", {"X-Stream-Id": "cam-8"}),
        (jpeg, "image/jpeg", {}),
        (good.tobytes(), "application/octet-stream", {"X-Frame-Width": "1280", "X-Frame-Height": "720"}),
    ]
    with caplog.at_level(logging.INFO):
        bodies = _serve(handler, context, requests)
    assert len(bodies) == 4
    assert [context.get_response_status(i)[0] for i in range(4)] == [200, 400, 200, 200]
    assert all(context.get_response_content_type(i) == "application/json" for i in range(4))
    first, bad, third, fourth = (json.loads(b) for b in bodies)
    assert (first["stream_id"], first["frame_id"]) == ("cam-7", "1042")
    support.assert_quality(first["frames"][0]["outputs"], good)
    support.assert_quality(third["frames"][0]["outputs"], support.decoded(jpeg))
    assert fourth["frames"] == first["frames"]
    assert (bad["code"], bad["type"], bad["stream_id"]) == (400, "CorruptFrame", "cam-8")
    metrics = "\n".join(r.getMessage() for r in caplog.records if "[METRICS]" in r.getMessage())
    assert "video_frames_total.Count:4|#ModelName:frame_quality,Level:Model" in metrics
    assert "video_frames_rejected_total.Count:1|#ModelName:frame_quality,Level:Model,Reason:bad_input" in metrics
    assert "video_batch_fill_ratio.Ratio:0.125|" in metrics


def test_refused_requests_leave_no_reference_cycles(quality):
    """A refused request's error holds no traceback: the frames that raised it (its body, its
    pixels, its FFmpeg decoder) are freed when it is answered, not when the cyclic collector
    next runs. Before, a worker answering hostile segments grew by megabytes a batch."""
    handler, context = quality
    mp4 = videos.segment("mp4", width=160, height=96, frames=12)
    jpeg = support.jpeg(support.frame(96, 160, 4))
    requests = [
        (videos.cut_inside_last_key_frame(mp4, "mp4"), "video/mp4", {}),  # FFmpeg fails in a decode thread
        (videos.damage_slices(mp4, "mp4"), "video/mp4", {}),
        (mp4, "video/mp4", {"X-Sample-Fps": "-3"}),  # a bad header
        (jpeg[:-500], "image/jpeg", {}),  # fails in a collating thread
        (b"x", "image/png", {}),
        (b'{"inputs": [', "application/json", {}),  # the OIP door refuses it
        (mp4, "video/mp4", {}),
    ]
    _serve(handler, context, requests)  # first calls may build caches
    gc.collect()
    gc.disable()
    try:
        _serve(handler, context, requests)
        statuses = [context.get_response_status(i)[0] for i in range(len(requests))]
        assert gc.collect() == 0
    finally:
        gc.enable()
    assert statuses == [400] * 6 + [200]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the worker here has no CUDA device")
def test_the_decoder_is_logged_at_startup_and_segments_are_counted_by_it(model_dir, caplog):
    context = _context(model_dir, "frame_quality", "frame_quality.pt")
    handler = VideoFrameHandler()
    with caplog.at_level(logging.INFO):
        handler.initialize(context)
        _serve(handler, context, [(videos.segment("mp4", frames=3), "video/mp4", {})] * 2)
    messages = [r.getMessage() for r in caplog.records]
    assert "video segments decode on the CPU: the worker has no CUDA device" in messages
    metrics = "\n".join(m for m in messages if "[METRICS]" in m)
    assert "video_segments_total.Count:2|#ModelName:frame_quality,Level:Model,Decoder:cpu" in metrics


def test_a_32_request_burst_exceeds_the_model_batch(quality):
    handler, context = quality
    frames = [support.frame(720, 1280, i) for i in range(32)]
    bodies = _serve(handler, context, [(support.npy(f), "application/x-npy", {}) for f in frames])
    assert [context.get_response_status(i)[0] for i in range(32)] == [200] * 32
    for body, pixels in zip(bodies, frames):
        support.assert_quality(json.loads(body)["frames"][0]["outputs"], pixels)


def test_a_multipart_form_is_a_clip_and_a_bad_form_fails_alone(quality):
    """Items and headers as TorchServe 0.12 hands a multipart form over (docs/clients.md)."""
    handler, context = quality
    form = {"Content-Type": "multipart/form-data; boundary=b", "url_path": ""}
    context.request_processor = [
        RequestProcessor({"f0": {"content-type": "image/jpeg"}, "f1": {"content-type": "image/png"},
                          "stream_id": {"content-type": ""}, **form}),
        RequestProcessor({"file": {"content-type": "image/jpeg"}, **form})]
    jpeg, png = support.jpeg(support.frame(40, 60, 1)), support.png(support.frame(20, 20, 2))
    data = [{"f0": bytearray(jpeg), "f1": bytearray(png), "stream_id": bytearray(b"cam-3")},
            {"file": bytearray(b"x")}]
    bodies = handler.handle(data, context)
    assert [context.get_response_status(i)[0] for i in range(2)] == [200, 400]
    clip, bad = (json.loads(b) for b in bodies)
    assert clip["stream_id"] == "cam-3" and len(clip["frames"]) == 2
    support.assert_quality(clip["frames"][0]["outputs"], support.decoded(jpeg))
    support.assert_quality(clip["frames"][1]["outputs"], support.decoded(png))
    assert bad["type"] == "CorruptFrame" and "part 'file'" in bad["message"]


def test_the_fixed_batch_engine_serves_a_32_frame_clip(model_dir):
    context = _context(model_dir, "fixed_batch_cnn", "fixed_batch_cnn.pt2")
    handler = VideoFrameHandler()
    handler.initialize(context)
    clip = np.stack([support.frame(360, 640, i) for i in range(32)])
    [body] = _serve(handler, context, [(support.npy(clip), "application/x-npy", {})])
    assert context.get_response_status(0)[0] == 200
    assert len(json.loads(body)["frames"]) == 32


def test_a_wrong_setting_fails_initialize_with_the_fix(model_dir):
    context = _context(model_dir, "frame_quality", "frame_quality.pt", {"model_max_batch": 0})
    with pytest.raises(ConfigError, match="handler.model_max_batch = 0"):
        VideoFrameHandler().initialize(context)


def test_metrics_that_fail_to_emit_never_fail_a_request(quality, caplog):
    handler, context = quality

    class Broken:
        def set_request_ids(self, ids):
            pass

        def get_metric(self, *args, **kwargs):
            raise RuntimeError("metrics backend down")

    working, context.metrics = context.metrics, Broken()
    try:
        bodies = _serve(handler, context, [(support.png(support.frame(20, 20)), "image/png", {})])
    finally:
        context.metrics = working
    assert context.get_response_status(0)[0] == 200 and json.loads(bodies[0])["frames"]
    assert "emitting batch metrics failed" in caplog.text


def test_peak_device_memory_is_zero_on_cpu(quality, caplog):
    handler, context = quality
    with caplog.at_level(logging.INFO):
        _serve(handler, context, [(support.png(support.frame(20, 20)), "image/png", {})])
    assert "video_device_memory_peak_bytes.Bytes:0|#ModelName:frame_quality,Level:Model" in caplog.text


class _NanModel(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = x.mean(dim=(1, 2, 3))
        return mean * float("nan"), torch.stack([mean, mean * float("inf")], dim=1)


def test_a_model_returning_nan_and_inf_answers_json_null(model_dir):
    torch.jit.script(_NanModel()).save(str(model_dir / "nan_model.pt"))
    context = _context(model_dir, "frame_quality", "nan_model.pt",
                       {"size_divisor": 4, "output_names": ["score", "pair"]})
    handler = VideoFrameHandler()
    handler.initialize(context)
    pixels = np.full((4, 4, 3), 9, np.uint8)
    [body] = _serve(handler, context, [(support.npy(pixels), "application/x-npy", {})])
    assert context.get_response_status(0)[0] == 200
    assert json.loads(body)["frames"] == [
        {"width": 4, "height": 4, "outputs": {"score": None, "pair": [9.0, None]}}]


def test_padding_and_chunks_come_from_the_layout(quality, caplog):
    handler, context = quality
    frames = [support.frame(720, 1280, i) for i in range(3)]
    with caplog.at_level(logging.INFO):
        _serve(handler, context, [(support.jpeg(f), "image/jpeg", {}) for f in frames])
    assert [context.get_response_status(i)[0] for i in range(3)] == [200] * 3
    # 720 rows in a 736-row slot (size_divisor 32): 16 / 736 of every tensor is padding
    assert f"video_padding_ratio.Ratio:{16 / 736}|" in caplog.text
    assert "batch: 3 requests, 3 frames in 1 chunks" in caplog.text


def test_the_fixed_batch_engine_letterboxes_a_1080p_jpeg_decoded_small(model_dir):
    context = _context(model_dir, "fixed_batch_cnn", "fixed_batch_cnn.pt2")
    handler = VideoFrameHandler()
    handler.initialize(context)
    body = support.jpeg(support.frame(1080, 1920, 5))
    bodies = _serve(handler, context, [(body, "image/jpeg", {}), (support.png(support.frame(50, 60)), "image/png", {})])
    assert [context.get_response_status(i)[0] for i in range(2)] == [200, 200]
    first = json.loads(bodies[0])["frames"][0]
    assert (first["width"], first["height"]) == (1920, 1080) and len(first["outputs"]["scores"]) == 10
    # the pipeline's own slot for this engine is 16 x 128 x 128, whatever the source size
    assert handler.pipeline._chunks._staging.allocated_bytes == 16 * 128 * 128 * 3 * 4  # float32 on the CPU
