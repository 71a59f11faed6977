"""The stream lane: one gRPC StreamPredictions2 stream per camera (sequence_id = stream id), answered
in order on that stream with exact values, with at most one frame per camera in a batch."""

from __future__ import annotations

import json
import threading

import grpc

from loadgen import grpc_stubs
from tests import support

LANE = "frame_quality_stream"
CAMERAS = 3
FRAMES = 6  # below maxSequenceJobQueueSize: a camera's burst is queued, not refused


def _camera(server, stub, pb2, camera: int, bodies: list[bytes], out: dict) -> None:
    """Sends all frames at once, keeps its side open until every answer came (TorchServe 0.12
    completes the call when the client half-closes, and fails the worker on answers still due)."""
    answered = threading.Event()

    def requests():
        for i, body in enumerate(bodies):
            yield pb2.PredictionsRequest(model_name=LANE, sequence_id=f"cam-{camera}",
                                         input={"data": body, "stream_id": f"cam-{camera}".encode(),
                                                "frame_id": str(i).encode()})
        answered.wait(120)

    answers = []
    call = stub.StreamPredictions2(requests(), metadata=[("authorization", f"Bearer {server.key('inference')}")],
                                   timeout=180)
    for response in call:
        if response.HasField("status") and response.status.code:
            answers.append((response.status.code, {"message": response.status.message}))
        else:
            answers.append((False, json.loads(response.prediction)))
        if len(answers) == len(bodies):
            answered.set()
    out[camera] = answers


def test_each_camera_is_answered_in_order_on_its_own_stream_one_frame_per_batch(server):
    pb2, pb2_grpc = grpc_stubs.load()
    address = f"127.0.0.1:{server.properties.get('grpc_inference_port', '7070')}"
    shapes = [(96 + 8 * i, 160 - 8 * i) for i in range(FRAMES)]
    bodies = {c: [support.png(support.frame(h, w, seed=10 * c + i)) for i, (h, w) in enumerate(shapes)]
              for c in range(CAMERAS)}
    before = len(server.batch_requests(LANE))
    out: dict[int, list] = {}
    with grpc.insecure_channel(address) as channel:
        stub = pb2_grpc.InferenceAPIsServiceStub(channel)
        threads = [threading.Thread(target=_camera, args=(server, stub, pb2, c, bodies[c], out))
                   for c in range(CAMERAS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(240)
    assert sorted(out) == list(range(CAMERAS))
    for camera, answers in out.items():
        assert [status for status, _ in answers] == [False] * FRAMES  # no in-stream error status
        assert [body["frame_id"] for _, body in answers] == [str(i) for i in range(FRAMES)]
        assert {(body["code"], body["stream_id"]) for _, body in answers} == {(200, f"cam-{camera}")}
        for (_, body), png in zip(answers, bodies[camera]):
            pixels = support.decoded(png)
            [result] = body["frames"]
            assert (result["height"], result["width"]) == pixels.shape[:2]
            support.assert_quality(result["outputs"], pixels)
    # Sequence batching takes at most one pending frame per camera into a batch, although each
    # camera had all its frames pending at once (the batched lane would take up to 32).
    batches = server.batch_requests(LANE)[before:]
    assert sum(batches) == CAMERAS * FRAMES
    assert max(batches) <= CAMERAS and len(batches) >= FRAMES
