"""Video segments through every door a producer uses (DESIGN sections 4a and 4b), against the
shipped config: HTTP without a Content-Type, a multipart file part, gRPC `Predictions` with
`input["data"]`, and the Open Inference Protocol from the real `tritonclient.http` (BYTES [1])."""

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from loadgen import grpc_stubs
from tests import support, videos
from tsutil import prom

MODEL = "frame_quality"
NAMES = ("brightness", "contrast", "sharpness")
FRAMES = 12
SEGMENTS = {  # container -> the same zoom, 12 frames
    "h264": videos.segment("h264", width=160, height=96, frames=FRAMES, photo="coffee.png"),
    "mp4": videos.segment("mp4", width=160, height=96, frames=FRAMES, photo="coffee.png"),
}
CORRUPT = {
    "h264": videos.damage_slices(SEGMENTS["h264"], "h264"),
    "mp4": videos.cut_inside_last_key_frame(SEGMENTS["mp4"], "mp4"),
}


def _http(server, body, fps=None):
    headers = {**server.auth(), **({"X-Sample-Fps": fps} if fps else {})}
    answer = requests.post(f"{server.inference_url}/predictions/{MODEL}", data=body, headers=headers,
                           timeout=120)
    assert "content-type" not in {k.lower() for k in answer.request.headers}
    return answer.status_code, answer.json()


def _multipart(server, body, fps=None):
    answer = requests.post(f"{server.inference_url}/predictions/{MODEL}", headers=server.auth(), timeout=120,
                           files={"data": ("segment", body)}, data={"sample_fps": fps} if fps else {})
    return answer.status_code, answer.json()


def _grpc(server, body, fps=None):
    pb2, pb2_grpc = grpc_stubs.load()
    port = server.properties.get("grpc_inference_port", "7070")
    inputs = {"data": body, **({"sample_fps": fps.encode()} if fps else {})}
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = pb2_grpc.InferenceAPIsServiceStub(channel).Predictions(
            pb2.PredictionsRequest(model_name=MODEL, input=inputs), timeout=120,
            metadata=[("authorization", f"Bearer {server.key('inference')}")])
    answer = json.loads(reply.prediction)
    return answer["code"], answer


def _oip(server, elements, fps=None):
    """`tritonclient.http`, BYTES of shape [len(elements)]: (status, the answer's JSON or error)."""
    tensor = httpclient.InferInput("segment", [len(elements)], "BYTES")
    tensor.set_data_from_numpy(np.array(elements, dtype=np.object_), binary_data=True)
    headers = {**server.auth(), **({"X-Sample-Fps": fps} if fps else {})}
    url = server.inference_url.removeprefix("http://")
    try:
        with httpclient.InferenceServerClient(url, network_timeout=120, connection_timeout=120) as client:
            result = client.infer(MODEL, [tensor], headers=headers)
    except InferenceServerException as err:
        return int(err.status()), {"error": err.message()}
    return 200, result.get_response()


NATIVE = {"http": _http, "multipart": _multipart, "grpc": _grpc}
DOORS = [*NATIVE, "oip"]


def _send(server, door, body, fps=None):
    if door == "oip":
        return _oip(server, [body], fps)
    return NATIVE[door](server, body, fps)


def _per_frame(door, answer):
    """Each frame's outputs and pts, in order."""
    if door == "oip":
        outputs = {o["name"]: o for o in answer["outputs"]}
        count = outputs["brightness"]["shape"][0]
        for name in NAMES:
            assert (outputs[name]["datatype"], outputs[name]["shape"]) == ("FP32", [count])
        pts = outputs.get("pts")
        assert pts is None or (pts["datatype"], pts["shape"]) == ("FP64", [count])
        return ([{name: outputs[name]["data"][i] for name in NAMES} for i in range(count)],
                pts and pts["data"])
    assert answer["code"] == 200, answer
    return ([entry["outputs"] for entry in answer["frames"]], [entry["pts"] for entry in answer["frames"]])


@pytest.mark.parametrize("container", list(SEGMENTS))
def test_a_segment_answers_the_same_frames_on_every_door(server, container):
    body = SEGMENTS[container]
    reference = videos.reference_frames(body, container)
    assert len(reference) == FRAMES
    answers = {}
    for door in DOORS:
        status, answer = _send(server, door, body)
        assert status == 200, (door, answer)
        answers[door] = _per_frame(door, answer)
    outputs, pts = answers["http"]
    assert len(outputs) == FRAMES
    for values, want in zip(outputs, reference):
        support.assert_quality(values, want, rel=0.02)
    for door in DOORS:  # the same decoded frames: the very same numbers, whatever the door
        assert answers[door][0] == outputs, door
        assert answers[door][1] == pts, door
    assert [t - pts[0] for t in pts] == pytest.approx([i / 30 for i in range(FRAMES)])


@pytest.mark.parametrize(("container", "fps", "kept"), [
    ("h264", "10", [0, 3, 6, 9]),
    ("mp4", "7.5", [0, 4, 8]),
])
def test_sampling_keeps_the_same_frames_by_header_form_field_and_grpc_key(server, container, fps, kept):
    body = SEGMENTS[container]
    reference = videos.reference_frames(body, container)
    answers = {}
    for door in DOORS:
        status, answer = _send(server, door, body, fps)
        assert status == 200, (door, answer)
        answers[door] = _per_frame(door, answer)
    outputs, pts = answers["grpc"]
    assert len(outputs) == len(kept)
    for values, index in zip(outputs, kept):
        support.assert_quality(values, reference[index], rel=0.02)
    assert [t - pts[0] for t in pts] == pytest.approx([i / 30 for i in kept])
    for door in DOORS:
        assert answers[door][0] == outputs, door
        assert answers[door][1] == pts, door


def _is_error(door, status, answer, kind):
    if door == "oip":
        return status == 400 and answer["error"].startswith(f"{kind}: ")
    return (status, answer["code"], answer["type"]) == (400, 400, kind)


def test_a_corrupt_segment_on_each_door_fails_alone_while_batch_mates_get_200(server):
    reference = videos.reference_frames(SEGMENTS["h264"], "h264")
    # Every door sends a corrupt H.264 and a corrupt MP4 segment while the next door sends a good
    # segment, all released at once, so broken and good requests share batches.
    jobs = [(door, CORRUPT[c], c) for door in DOORS for c in CORRUPT]
    jobs += [(DOORS[(i + 1) % len(DOORS)], SEGMENTS["h264"], None) for i in range(len(DOORS))]
    before = len(server.batch_requests(MODEL))
    for _ in range(3):
        barrier = threading.Barrier(len(jobs))

        def send(job, barrier=barrier):
            door, body, _ = job
            barrier.wait(timeout=60)
            return _send(server, door, body)

        with ThreadPoolExecutor(len(jobs)) as pool:
            answers = list(pool.map(send, jobs))
        for (door, _, corrupt), (status, answer) in zip(jobs, answers):
            if corrupt:
                assert _is_error(door, status, answer, "CorruptFrame"), (door, corrupt, status, answer)
                continue
            assert status == 200, (door, answer)
            outputs, _ = _per_frame(door, answer)
            assert len(outputs) == FRAMES
            for values, want in zip(outputs, reference):
                support.assert_quality(values, want, rel=0.02)
        if max(server.batch_requests(MODEL)[before:]) > 1:
            break
    assert max(server.batch_requests(MODEL)[before:]) > 1, "no batch held two requests"
    assert server.worker_status(MODEL) == ["READY"]


def test_oip_bytes_take_one_segment_alone_or_encoded_images_and_refuse_a_mix(server):
    jpeg = support.jpeg(support.frame(96, 160, 5))
    png = support.png(support.frame(48, 64, 6))
    segment = SEGMENTS["h264"]
    status, answer = _oip(server, [jpeg, png])
    assert status == 200, answer
    outputs, _ = _per_frame("oip", answer)
    for values, pixels in zip(outputs, [support.decoded(jpeg), support.decoded(png)], strict=True):
        support.assert_quality(values, pixels)
    for elements, index in (([jpeg, segment], 1), ([segment, SEGMENTS["mp4"]], 0), ([segment, png], 0)):
        status, answer = _oip(server, elements)
        assert status == 400, answer
        assert answer["error"].startswith(f"BadInferenceRequest: BYTES input of 2 elements holds a video "
                                          f"segment (element {index}): send a segment alone"), answer


def test_multipart_takes_a_segment_as_the_only_file_part(server):
    jpeg = support.jpeg(support.frame(96, 160, 7))
    answer = requests.post(f"{server.inference_url}/predictions/{MODEL}", headers=server.auth(), timeout=120,
                           files=[("frame0", jpeg), ("clip", ("seg.mp4", SEGMENTS["mp4"], "video/mp4"))])
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert (body["code"], body["type"]) == (400, "BadForm")
    assert body["message"].startswith("the form's part 'clip' is a video segment among 2 file parts")


def _counters(server):
    text = server.metrics()
    return prom.total(text, "ts_inference_requests_total", MODEL), prom.total(text, "video_frames_total", MODEL)


@pytest.mark.parametrize(("protocol", "fmt"), [("grpc", "h264"), ("oip", "h264"), ("grpc", "mp4"), ("oip", "mp4")])
def test_video_loadgen_sends_segments_over_grpc_and_oip(server, tmp_path, protocol, fmt):
    from loadgen import cli

    before = _counters(server)
    port = server.properties.get("grpc_inference_port", "7070")
    report_path = tmp_path / "report.json"
    status = cli.main(["--url", server.inference_url, "--model", MODEL, "--protocol", protocol,
                       "--grpc-address", f"127.0.0.1:{port}", "--format", fmt, "--segment-frames", "4",
                       "--token-file", str(server.workdir / "key_file.json"), "--streams", "2", "--fps", "8",
                       "--duration", "2", "--resolution", "160x96", "--sla-ms", "60000", "--no-progress",
                       "--report", str(report_path)])
    report = json.loads(report_path.read_text())
    assert (report["config"]["protocol"], report["config"]["format"], report["config"]["clip"]) == (protocol, fmt, 4)
    assert (report["requests_sent"], report["frames_sent"]) == (8, 32)
    assert report["responses"] == {"200": 8} and status == 0
    deadline = time.monotonic() + 10  # handler metrics reach the frontend through the worker log
    while (delta := tuple(a - b for a, b in zip(_counters(server), before))) != (8, 32):
        assert time.monotonic() < deadline, delta
        time.sleep(0.25)
