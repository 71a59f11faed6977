"""Our archives in a real TorchServe with the shipped config.properties (DESIGN sections 3-5)."""


import numpy as np
import requests

from tests import support
from tsutil import prom


def _jpeg_payloads(shapes, seed=0):
    bodies = [support.jpeg(support.frame(h, w, seed + i)) for i, (h, w) in enumerate(shapes)]
    return [(b, "image/jpeg", {"X-Stream-Id": f"cam-{i}", "X-Frame-Id": str(i)}) for i, b in enumerate(bodies)]


def _check_quality(responses, payloads):
    for i, (response, (body, _, _)) in enumerate(zip(responses, payloads)):
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["frame_id"] == str(i)
        [result] = answer["frames"]
        pixels = support.decoded(body)
        assert (result["height"], result["width"]) == pixels.shape[:2]
        support.assert_quality(result["outputs"], pixels)


def test_a_burst_of_32_720p_frames_is_served_in_batches_above_the_model_batch(server):
    payloads = _jpeg_payloads([(720, 1280)] * 32)
    for _ in range(3):
        before = len(server.batch_frames())
        responses = server.burst("frame_quality", payloads)
        _check_quality(responses, payloads)
        if max(server.batch_frames()[before:]) > 16:
            break
    assert max(server.batch_frames()) > 16, server.batch_frames()
    assert server.worker_status("frame_quality") == ["READY"]


def test_a_burst_mixing_resolutions_gets_exact_values(server):
    shapes = [(480, 640), (720, 1280), (1080, 1920), (481, 639), (1080, 607), (33, 2000), (17, 19),
              (720, 1280), (480, 640), (999, 777)] * 2
    payloads = _jpeg_payloads(shapes, seed=5)
    payloads[3] = (support.png(support.frame(481, 639, 8)), "image/png", payloads[3][2])
    _check_quality(server.burst("frame_quality", payloads), payloads)


def test_npy_and_raw_frames_and_clips(server):
    clip = np.stack([support.frame(360, 640, i) for i in range(4)])
    npy = server.predict("frame_quality", support.npy(clip), "application/x-npy")
    raw = server.predict("frame_quality", clip[..., ::-1].tobytes(), "application/octet-stream",
                         {"X-Frame-Width": "640", "X-Frame-Height": "360", "X-Pixel-Format": "bgr24"})
    assert npy.status_code == raw.status_code == 200
    assert npy.json()["frames"] == raw.json()["frames"]
    for result, pixels in zip(npy.json()["frames"], clip):
        support.assert_quality(result["outputs"], pixels)


def test_a_truncated_jpeg_fails_alone(server):
    payloads = _jpeg_payloads([(720, 1280)] * 8, seed=11)
    truncated = payloads[4][0][: len(payloads[4][0]) // 3]
    payloads[4] = (truncated, "image/jpeg", {"X-Stream-Id": "cam-4", "X-Frame-Id": "4"})
    responses = server.burst("frame_quality", payloads)
    assert [r.status_code for r in responses] == [200] * 4 + [400] + [200] * 3
    error = responses[4].json()
    assert responses[4].headers["content-type"] == "application/json"
    assert (error["code"], error["type"], error["frame_id"]) == (400, "CorruptFrame", "4")
    _check_quality(responses[:4], payloads[:4])


def test_a_32_frame_clip_on_the_fixed_batch_engine_equals_frame_by_frame(server):
    clip = np.stack([support.frame(720, 1280, i) for i in range(32)])
    together = server.predict("fixed_batch_cnn", support.npy(clip), "application/x-npy")
    assert together.status_code == 200, together.text
    frames = together.json()["frames"]
    assert len(frames) == 32
    for pixels, result in zip(clip, frames):
        alone = server.predict("fixed_batch_cnn", support.npy(pixels), "application/x-npy")
        assert alone.status_code == 200
        [expected] = alone.json()["frames"]
        assert (result["width"], result["height"]) == (1280, 720)
        np.testing.assert_allclose(result["outputs"]["scores"], expected["outputs"]["scores"],
                                   rtol=1e-5, atol=1e-6)


def test_secure_defaults(server):
    body = support.jpeg(support.frame(32, 32))
    url = f"{server.inference_url}/predictions/frame_quality"
    assert requests.post(url, data=body, headers={"Content-Type": "image/jpeg"}).status_code == 400
    wrong = {"Content-Type": "image/jpeg", "Authorization": "Bearer wrong"}
    assert requests.post(url, data=body, headers=wrong).status_code == 400
    register = requests.post(f"{server.management_url}/models?url=frame_quality.mar",
                             headers=server.auth("management"))
    assert register.status_code == 405
    for address in (server.inference_url, server.management_url, server.metrics_url):
        assert address.startswith("http://127.0.0.1:")


def test_metrics_account_for_every_frame(server):
    def counter(text, name, **labels):
        return prom.total(text, name, "frame_quality", **labels)

    before = server.metrics()
    payloads = _jpeg_payloads([(240, 320)] * 5, seed=3)
    payloads.append((b"garbage", "image/jpeg", {}))
    clip = np.stack([support.frame(24, 32, i) for i in range(3)])
    payloads.append((support.npy(clip), "application/x-npy", {}))
    responses = server.burst("frame_quality", payloads)
    assert [r.status_code for r in responses] == [200] * 5 + [400, 200]
    after = server.metrics()
    assert counter(after, "video_frames_total") - counter(before, "video_frames_total") == 9
    rejected = "video_frames_rejected_total"
    assert counter(after, rejected, Reason="bad_input") - counter(before, rejected, Reason="bad_input") == 1


def test_the_low_latency_lane_serves_one_request_per_batch_with_the_same_values(server):
    payloads = _jpeg_payloads([(480, 640)] * 6, seed=21)
    batched = server.burst("frame_quality", payloads)
    realtime = server.burst("frame_quality_realtime", payloads)
    _check_quality(realtime, payloads)
    assert [r.json()["frames"] for r in realtime] == [r.json()["frames"] for r in batched]
    assert set(server.batch_requests("frame_quality_realtime")) == {1}
    assert len(server.batch_requests("frame_quality_realtime")) >= 6


def test_a_stale_frame_gets_504_and_its_batch_mates_200(server):
    import time

    body = support.jpeg(support.frame(120, 160, 5))
    now = time.time()
    payloads = [(body, "image/jpeg", {"X-Frame-Id": str(i), "X-Capture-Time": f"{now - age:.3f}"})
                for i, age in enumerate([0.0, 60.0, 1.0, 3600.0])]
    responses = server.burst("frame_quality", payloads)
    assert [r.status_code for r in responses] == [200, 504, 200, 504]
    assert responses[1].json()["type"] == "StaleFrame" and responses[1].json()["frame_id"] == "1"
