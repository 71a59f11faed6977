"""Per-camera rates, and the one-stream-per-camera client against a StreamPredictions2 servicer that
behaves as TorchServe 0.12 does (key checked at open, answers in order, no half-close before them)."""

from __future__ import annotations

import json
import threading
from concurrent import futures

import grpc
import pytest
import yaml

from loadgen import cli, grpc_stubs
from loadgen.frames import Format, FrameSource
from loadgen.metrics import calculate_metrics
from loadgen.schedule import Plan, Resolution, StreamRate, arrivals
from loadgen.stream import StreamTarget, grpc_input, run_streams
from tests.support import ROOT
from tskeys import Key


def test_a_camera_with_its_own_rate_floods_while_the_others_keep_theirs():
    plan = Plan(streams=3, fps=10, duration_s=2, burst_fps=40, burst_start_s=0.5, burst_duration_s=0.5,
                stream_rates=(StreamRate.parse("0:100"),))
    counts = {s: sum(1 for a in arrivals(plan) if a.stream == s) for s in range(3)}
    assert counts == {0: 200, 1: 10 * 1.5 + 40 * 0.5, 2: 10 * 1.5 + 40 * 0.5}
    args = cli.parser().parse_args(["--streams", "8", "--stream-fps", "0:300", "--stream-fps", "3:1.5"])
    assert cli.plan_from(args).stream_rates == (StreamRate(0, 300.0), StreamRate(3, 1.5))
    for bad in ("0", "x:3", "0:0", "-1:5"):
        with pytest.raises(ValueError, match="STREAM:FPS"):
            StreamRate.parse(bad)
    with pytest.raises(ValueError, match="only 2 cameras"):
        Plan(streams=2, fps=1, duration_s=1, stream_rates=(StreamRate(2, 5.0),))


def test_grpc_input_carries_the_headers_as_snake_case_keys():
    arrival = arrivals(Plan(streams=1, fps=1, duration_s=1))[0]
    assert grpc_input(b"x", "application/octet-stream", {"X-Frame-Width": "4", "X-Pixel-Format": "gray8"},
                      arrival, 12.5) == {
        "data": b"x", "content_type": b"application/octet-stream", "stream_id": b"cam-0", "frame_id": b"0",
        "capture_time": b"12.500000", "frame_width": b"4", "pixel_format": b"gray8"}


@pytest.fixture
def stream_server():
    """StreamPredictions2 with key `good`: echoes frame ids in order; a stream whose client
    half-closes with answers still due is recorded (TorchServe's worker would fail on it)."""
    pb2, pb2_grpc = grpc_stubs.load()
    seen = {"opened": [], "early_close": 0}

    class Servicer(pb2_grpc.InferenceAPIsServiceServicer):
        def StreamPredictions2(self, request_iterator, context):
            token = dict(context.invocation_metadata()).get("authorization")
            seen["opened"].append(token)
            if token != "Bearer good":
                context.abort(grpc.StatusCode.PERMISSION_DENIED, "Token Authorization failed. Token either "
                              "incorrect, expired, or not provided correctly")
            due = []
            lock = threading.Lock()
            done = threading.Event()

            def read():
                for request in request_iterator:
                    with lock:
                        due.append(request)
                with lock:
                    seen["early_close"] += bool(due)
                done.set()

            threading.Thread(target=read, daemon=True).start()
            while not (done.is_set() and not due):
                with lock:
                    request = due.pop(0) if due else None
                if request is None:
                    done.wait(0.005)
                    continue
                frame = request.input["frame_id"].decode()
                body = {"code": 200, "stream_id": request.sequence_id, "frame_id": frame}
                yield pb2.PredictionResponse(prediction=json.dumps(body).encode(), sequence_id=request.sequence_id)

    server = grpc.server(futures.ThreadPoolExecutor(16))
    pb2_grpc.add_InferenceAPIsServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", seen
    server.stop(None)


def test_each_camera_gets_its_answers_in_order_on_its_own_stream(stream_server, tmp_path):
    address, seen = stream_server
    keys = tmp_path / "key_file.json"
    keys.write_text(json.dumps({"inference": {"key": "old"}}))
    key = Key(keys)
    keys.write_text(json.dumps({"inference": {"key": "good"}}))  # renewed after the client read it
    plan = Plan(streams=3, fps=20, duration_s=1, resolutions=(Resolution(32, 24),))
    run, answers = run_streams(plan, StreamTarget(address, "m", timeout_s=30), FrameSource(Format.JPEG, distinct=1),
                               key=key)
    metrics = calculate_metrics(run.records, plan.duration_s, 60000)
    assert metrics.responses == {"200": 60}
    for camera, bodies in answers.items():
        assert [b["frame_id"] for b in bodies] == [str(i) for i in range(20)]
        assert {b["stream_id"] for b in bodies} == {f"cam-{camera}"}
    # Each stream was refused once with the old key, re-read the file and opened once more.
    assert sorted(seen["opened"]) == ["Bearer good"] * 3 + ["Bearer old"] * 3
    assert seen["early_close"] == 0


def test_a_stream_refused_twice_loses_its_frames_with_the_grpc_code(stream_server):
    address, _ = stream_server
    plan = Plan(streams=1, fps=10, duration_s=0.5, resolutions=(Resolution(32, 24),))
    run, _ = run_streams(plan, StreamTarget(address, "m", token="wrong", timeout_s=5),
                         FrameSource(Format.JPEG, distinct=1))
    assert [(r.status, r.error) for r in run.records] == [(None, "PERMISSION_DENIED")] * 5


def test_the_stream_lane_is_registered_with_the_same_values_as_its_yaml():
    text = (ROOT / "config.properties").read_text().replace("\\\n", "")
    props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    assert "frame_quality_stream.mar" in props["load_models"].split(",")
    registered = json.loads(props["models"])["frame_quality_stream"]["1.0"]
    lane = yaml.safe_load((ROOT / "handler" / "models" / "frame_quality_stream.yaml").read_text())
    for key in ("batchSize", "maxBatchDelay", "minWorkers", "maxWorkers", "responseTimeout"):
        assert lane[key] == registered[key], key
    assert lane["sequenceBatching"] is True
    assert lane["maxNumSequence"] >= lane["batchSize"]  # every camera of a full batch has a slot
    assert lane["maxSequenceJobQueueSize"] >= 1 and lane["sequenceMaxIdleMSec"] > 0
    assert "frame_quality_stream" in (ROOT / "archive.sh").read_text()
