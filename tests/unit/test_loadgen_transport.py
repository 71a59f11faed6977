"""The senders against local servers: gRPC stubs from the wheel's proto, options as input keys,
the body's `code` as the status, and the retry-once rule for a refused key on every door."""

import json
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest

from loadgen import grpc_stubs
from loadgen.frames import Format, FrameSource
from loadgen.metrics import calculate_metrics
from loadgen.runner import Target, run
from loadgen.schedule import Plan, Resolution
from loadgen.transport import Answer, Door, GrpcSender, HttpSender, OipSender, answer_of
from tskeys.keyfile import Key


def _key_file(tmp_path, key):
    path = tmp_path / "key_file.json"
    path.write_text(json.dumps({"inference": {"key": key}}))
    return path


@pytest.fixture
def grpc_server():
    """A Predictions servicer that accepts key `good` and answers code 400 for stream `cam-1`."""
    pb2, pb2_grpc = grpc_stubs.load()
    seen = []

    class Servicer(pb2_grpc.InferenceAPIsServiceServicer):
        def Predictions(self, request, context):
            token = dict(context.invocation_metadata()).get("authorization")
            seen.append((token, dict(request.input)))
            if token != "Bearer good":
                context.abort(grpc.StatusCode.PERMISSION_DENIED, "Token Authorization failed. Token either incorrect, expired, or not provided correctly")
            code = 400 if request.input.get("stream_id") == b"cam-1" else 200
            body = {"code": code} if code == 200 else {"code": code, "type": "CorruptFrame"}
            return pb2.PredictionResponse(prediction=json.dumps(body).encode())

    server = grpc.server(futures.ThreadPoolExecutor(8))
    pb2_grpc.add_InferenceAPIsServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", seen
    server.stop(None)


def test_grpc_sender_maps_headers_to_input_keys_and_reads_code(grpc_server):
    address, seen = grpc_server
    sender = GrpcSender(address, Key(token="good"))
    answers = [sender.send("m", b"\xff\xd8\xff", "image/jpeg", {"X-Stream-Id": f"cam-{i}", "X-Frame-Id": "7",
                                                                "X-Capture-Time": "1.5", "X-Other": "x"})
               for i in (0, 1)]
    sender.close()
    assert answers == [Answer(200), Answer(400, "CorruptFrame")]
    assert seen[0][1] == {"data": b"\xff\xd8\xff", "content_type": b"image/jpeg", "stream_id": b"cam-0",
                          "frame_id": b"7", "capture_time": b"1.5"}


def test_grpc_sender_rereads_the_key_file_once_when_refused(grpc_server, tmp_path):
    address, seen = grpc_server
    path = _key_file(tmp_path, "old")
    key = Key(path)
    path.write_text(json.dumps({"inference": {"key": "good"}}))  # rotated after the sender read it
    sender = GrpcSender(address, key)
    assert sender.send("m", b"x", "image/jpeg", {}) == Answer(200)
    assert [token for token, _ in seen] == ["Bearer old", "Bearer good"]
    path.write_text(json.dumps({"inference": {"key": "wrong"}}))
    key.refresh()
    assert sender.send("m", b"x", "image/jpeg", {}) == Answer(None, "PERMISSION_DENIED")
    assert len(seen) == 4  # one retry, not more
    sender.close()


def test_a_grpc_body_without_code_is_unreadable():
    assert answer_of(b"not json") == Answer(None, "UnreadableBody")
    assert answer_of(b'{"frames": []}') == Answer(None, "UnreadableBody")


@pytest.fixture
def http_server():
    """Accepts key `good` (else 400 InvalidKeyException); records path, headers and body."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.path, dict(self.headers), body))
            if self.headers.get("Authorization") != "Bearer good":
                status, payload = 400, {"code": 400, "type": "InvalidKeyException", "message": "Token ..."}
            elif self.path.startswith("/v2/") and body.endswith(b"bad"):
                status, payload = 400, {"error": "CorruptFrame: cannot decode"}
            else:
                status, payload = 200, {"code": 200}
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_http_sender_retries_once_with_the_rotated_key(http_server, tmp_path):
    url, seen = http_server
    path = _key_file(tmp_path, "old")
    key = Key(path)
    path.write_text(json.dumps({"inference": {"key": "good"}}))
    sender = HttpSender(url, key)
    assert sender.send("m", b"x", "image/jpeg", {"X-Frame-Id": "1"}) == Answer(200)
    assert [h["Authorization"] for _, h, _ in seen] == ["Bearer old", "Bearer good"]
    assert seen[-1][0] == "/predictions/m" and seen[-1][1]["Content-Type"] == "image/jpeg"
    sender.close()


def test_oip_sender_frames_the_body_as_one_bytes_element(http_server):
    url, seen = http_server
    sender = OipSender(url, Key(token="good"))
    assert sender.send("m", b"\xff\xd8\xffjpeg", "image/jpeg", {}) == Answer(200)
    assert sender.send("m", b"bad", "image/jpeg", {}) == Answer(400, "CorruptFrame")
    path, headers, body = seen[0]
    length = int(headers["Inference-Header-Content-Length"])
    header = json.loads(body[:length])
    assert path == "/v2/models/m/infer"
    assert header["inputs"] == [{"name": "frames", "shape": [1], "datatype": "BYTES",
                                 "parameters": {"binary_data_size": 11}}]
    assert body[length:] == (7).to_bytes(4, "little") + b"\xff\xd8\xffjpeg"
    sender.close()


def test_runner_over_grpc_reports_the_body_code_as_the_status(grpc_server):
    address, _ = grpc_server
    plan = Plan(streams=2, fps=10, duration_s=1, resolutions=(Resolution(64, 48),))
    target = Target("http://unused", "m", protocol=Door.GRPC, grpc_address=address, key=Key(token="good"))
    result = run(plan, target, FrameSource(Format.JPEG, distinct=2), concurrency=8)
    statuses = sorted((r.stream, r.status, r.error) for r in result.records)
    assert statuses == [(0, 200, None)] * 10 + [(1, 400, "CorruptFrame")] * 10
    metrics = calculate_metrics(result.records, plan.duration_s, sla_ms=1000)
    assert metrics.responses == {"200": 10, "400": 10}
