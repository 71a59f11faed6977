"""The sender against a slow local HTTP server: frames leave on schedule whatever the answers do."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from loadgen.frames import Format, FrameSource
from loadgen.metrics import calculate_metrics
from loadgen.runner import Target, run
from loadgen.schedule import Plan, Resolution


@pytest.fixture
def slow_server():
    seen = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((time.perf_counter(), dict(self.headers), len(body)))
            time.sleep(0.3)
            status = 200 if self.headers.get("X-Stream-Id") != "cam-1" else 400
            payload = b"{}" if status == 200 else b'{"type": "CorruptFrame"}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_open_loop_sends_on_schedule_while_answers_are_slow(slow_server):
    url, seen = slow_server
    plan = Plan(streams=2, fps=20, duration_s=1, resolutions=(Resolution(64, 48),))
    result = run(plan, Target(url, "m", token="k"), FrameSource(Format.JPEG, distinct=2), concurrency=32)
    assert len(result.records) == len(seen) == 40 and not result.dropped
    arrived = np.array(sorted(t for t, _, _ in seen))
    # 40 requests spread over ~1 s although each answer takes 0.3 s: not closed loop
    assert arrived[-1] - arrived[0] == pytest.approx(0.975, abs=0.15)
    assert max(r.sent - r.scheduled for r in result.records) < 0.1
    assert all(r.latency_ms >= 300 for r in result.records)
    headers = seen[0][1]
    assert headers["Authorization"] == "Bearer k" and headers["Content-Type"] == "image/jpeg"
    assert {"X-Stream-Id", "X-Frame-Id", "X-Capture-Time"} <= set(headers)
    assert abs(float(headers["X-Capture-Time"]) - time.time()) < 10
    metrics = calculate_metrics(result.records, plan.duration_s, sla_ms=1000)
    assert metrics.responses == {"200": 20, "400": 20} and not metrics.sla_met
    assert {r.error for r in result.records if r.status == 400} == {"CorruptFrame"}


def test_a_saturated_client_drops_what_it_cannot_send_in_time(slow_server):
    url, seen = slow_server
    plan = Plan(streams=1, fps=20, duration_s=1, resolutions=(Resolution(32, 32),))
    result = run(plan, Target(url, "m"), FrameSource(Format.NPY, distinct=1), concurrency=1, max_lag_s=0.2)
    assert len(result.records) == len(seen) and result.dropped
    assert len(result.records) + len(result.dropped) == 20
    metrics = calculate_metrics(result.records, 1.0, 10_000, frames_dropped=len(result.dropped))
    assert metrics.frames_dropped == len(result.dropped) and not metrics.all_ok


def test_an_unreachable_server_is_an_error_not_a_crash():
    plan = Plan(streams=1, fps=10, duration_s=0.3, resolutions=(Resolution(16, 16),))
    result = run(plan, Target("http://127.0.0.1:9", "m", timeout_s=2), FrameSource(Format.RAW, distinct=1))
    assert {r.status for r in result.records} == {None}
    assert calculate_metrics(result.records, 0.3, 100).responses == {"error": 3}
