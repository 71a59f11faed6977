"""The sender against a local HTTP server that holds its answers: frames leave on schedule whatever
the answers do. The server decides when to answer by counting requests, never by a clock."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loadgen.frames import Format, FrameSource
from loadgen.metrics import calculate_metrics
from loadgen.runner import Target, run
from loadgen.schedule import Plan, Resolution


class HeldServer:
    """Records every request and answers none until `release` is set (or 120 s pass: a failure).

    `release_after`: set `release` by itself once that many requests have arrived.
    """

    def __init__(self, release_after: int | None = None) -> None:
        self.seen: list[dict[str, str]] = []
        self.held_until_release: list[bool] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                with owner._lock:
                    owner.seen.append(dict(self.headers))
                    if release_after is not None and len(owner.seen) >= release_after:
                        owner.release.set()
                owner.held_until_release.append(owner.release.wait(timeout=120))
                status = 200 if self.headers.get("X-Stream-Id") != "cam-1" else 400
                payload = b"{}" if status == 200 else b'{"type": "CorruptFrame"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def held():
    servers = []

    def make(release_after=None):
        servers.append(HeldServer(release_after))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def test_open_loop_sends_every_frame_before_any_answer(held):
    server = held(release_after=40)  # answers only once all 40 requests are in
    plan = Plan(streams=2, fps=20, duration_s=1, resolutions=(Resolution(64, 48),))
    result = run(plan, Target(server.url, "m", token="k"), FrameSource(Format.JPEG, distinct=2), concurrency=64)
    assert len(result.records) == len(server.seen) == 40 and not result.dropped
    # Every request was held until the 40th arrived: none waited for an earlier answer.
    assert server.held_until_release == [True] * 40
    assert max(r.sent for r in result.records) <= min(r.done for r in result.records)
    assert sorted((r.stream, r.frame_id) for r in result.records) == sorted((a.stream, a.frame_id)
                                                                           for a in result.schedule)
    headers = server.seen[0]
    assert headers["Authorization"] == "Bearer k" and headers["Content-Type"] == "image/jpeg"
    assert {"X-Stream-Id", "X-Frame-Id", "X-Capture-Time"} <= set(headers)
    assert abs(float(headers["X-Capture-Time"]) - time.time()) < 600  # wall-clock seconds, not a counter
    metrics = calculate_metrics(result.records, plan.duration_s, sla_ms=60_000)
    assert metrics.responses == {"200": 20, "400": 20}
    assert {r.error for r in result.records if r.status == 400} == {"CorruptFrame"}


MAX_LAG_S = 1.0


def test_a_saturated_client_drops_what_it_cannot_send_in_time(held):
    server = held()  # holds the first request until the whole schedule is overdue
    plan = Plan(streams=1, fps=20, duration_s=1, resolutions=(Resolution(32, 32),))
    done = threading.Event()
    outcome = []

    def send():
        outcome.append(run(plan, Target(server.url, "m"), FrameSource(Format.NPY, distinct=1), concurrency=1,
                           max_lag_s=MAX_LAG_S))
        done.set()

    sender = threading.Thread(target=send)
    sender.start()
    # The one connection is busy with the first frame; the other 19 wait behind it. Release it only
    # after the last frame is due plus max_lag_s (a sleep's lower bound, not a measured window):
    # then every waiting frame is overdue. MAX_LAG_S is long so the first frame always leaves.
    deadline = time.monotonic() + 60
    while not server.seen and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(plan.duration_s + MAX_LAG_S + 0.5)
    server.release.set()
    sender.join(timeout=60)
    [result] = outcome
    assert (len(result.records), len(result.dropped), len(server.seen)) == (1, 19, 1)
    metrics = calculate_metrics(result.records, 1.0, 10_000, frames_dropped=len(result.dropped))
    assert metrics.frames_dropped == 19 and not metrics.all_ok


def test_an_unreachable_server_is_an_error_not_a_crash():
    plan = Plan(streams=1, fps=10, duration_s=0.3, resolutions=(Resolution(16, 16),))
    result = run(plan, Target("http://127.0.0.1:9", "m", timeout_s=2), FrameSource(Format.RAW, distinct=1))
    assert {r.status for r in result.records} == {None}
    assert calculate_metrics(result.records, 0.3, 100).responses == {"error": 3}
