"""Overload and a killed worker in a real TorchServe: fast rejections, then full service."""

import os
import signal
import time

from tests import support
from tests.e2e.load import run_clients, wait_for_200
from tsutil import properties

FRAME = support.jpeg(support.frame(720, 1280, 4))
BATCH_SIZE = properties.models(properties.read(properties.SHIPPED))["frame_quality"]["1.0"]["batchSize"]


def test_overload_is_rejected_fast_and_service_recovers(server):
    pid = server.worker_pids("frame_quality")
    # 160 clients keep far more requests in flight than job_queue_size (100) holds.
    outcome = run_clients(server, "frame_quality", FRAME, "image/jpeg", clients=160, seconds=8)
    statuses = [status for _, _, status in outcome.records]
    assert set(statuses) <= {200, 503}, set(statuses)
    assert statuses.count(503) > 0 and statuses.count(200) > 0
    rejected = sorted(latency for _, latency, status in outcome.records if status == 503)
    served = sorted(latency for _, latency, status in outcome.records if status == 200)
    # Reported, not asserted: timings on a shared machine are noise.
    print(f"overload: {len(served)} served (median {served[len(served) // 2]:.2f} s), "
          f"{len(rejected)} rejected with 503 (median {rejected[len(rejected) // 2]:.3f} s)")
    assert wait_for_200(server, "frame_quality", FRAME, "image/jpeg", timeout=30) < 30
    assert server.worker_pids("frame_quality") == pid, "the worker died under overload"
    assert server.get("/ping").json() == {"status": "Healthy"}


def test_a_killed_worker_fails_in_flight_frames_then_serves_again(server):
    [pid] = server.worker_pids("frame_quality")
    killed = []

    def kill():
        time.sleep(3)
        killed.append(time.monotonic())
        os.kill(pid, signal.SIGKILL)

    outcome = run_clients(server, "frame_quality", FRAME, "image/jpeg", clients=16, seconds=20,
                          during=kill, timeout=30)
    statuses = [status for _, _, status in outcome.records]
    assert {200} < set(statuses) and all(s in (0, 200) or s >= 500 for s in statuses), set(statuses)
    # TorchServe 0.12 drops the requests its batch aggregator was still gathering when the worker
    # died (BatchAggregator.cleanJobs clears them unanswered): at most one batch, and only as a
    # client timeout, never a refused or reset connection. docs/failures.md.
    assert statuses.count(0) <= BATCH_SIZE, outcome.errors
    assert all("ReadTimeout" in error for error in outcome.errors), outcome.errors
    # Serves again. Not always within the clients' window: when every client's request was in the
    # batch the worker died with (16 clients, batchSize 32), each waits out its 30 s timeout and
    # nothing is sent meanwhile (seen in a CI run: the next 200 was the next request sent). So
    # the next request sent after the kill is answered 200 once the worker is back.
    recovered = wait_for_200(server, "frame_quality", FRAME, "image/jpeg", timeout=60)
    after = [start - killed[0] for start, _, status in outcome.records if status == 200 and start > killed[0]]
    print(f"first 200 sent {min(after, default=float('nan')):.1f} s after the kill (within the window), "
          f"{recovered:.1f} s after the window; {statuses.count(0)} dropped unanswered; {sorted(set(statuses))}")
    assert server.worker_pids("frame_quality") != [pid]
    assert server.worker_status("frame_quality") == ["READY"]
