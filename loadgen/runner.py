"""Sends a schedule open loop: each request leaves on its time, whatever earlier answers did."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from loadgen.frames import FrameSource
from loadgen.metrics import Record
from loadgen.schedule import Arrival, Plan, arrivals
from loadgen.stream import run_target
from loadgen.target import Run, Target
from loadgen.transport import Door, sender
from tskeys.keyfile import Key

__all__ = ["Run", "Target", "run"]  # Run and Target live in loadgen.target; callers import them from here too

_DROPPED = object()


def run(plan: Plan, target: Target, source: FrameSource, concurrency: int = 128,
        on_record: Callable[[Record | None], None] | None = None, max_lag_s: float | None = None) -> Run:
    """Sends every request of `plan` and waits for all answers.

    At most `concurrency` requests are in flight; a request due while all are busy leaves late,
    which shows up in its `sent - scheduled` and, since latency counts from the schedule, in its
    latency. With `max_lag_s`, a request that could not leave within that time of its schedule is
    dropped unsent (as a camera drops frames its uplink cannot take), so a run far above the
    server's capacity ends soon after its duration. Each worker thread keeps one connection.

    Returns:
        the run; `on_record` also gets each record as it completes (None for a dropped request).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency = {concurrency}: use 1 or more")
    if target.protocol is Door.GRPC_STREAM:  # one stream per camera, not one call per request
        return run_target(plan, target, source, on_record)
    schedule = arrivals(plan)
    for a in schedule:  # render every body before the clock starts
        source.prepare(a.stream, a.resolution)
    transport = sender(target.protocol, target.url, target.key or Key(token=target.token),
                       target.timeout_s, target.grpc_address)
    records: list[Record | object | None] = [None] * len(schedule)

    def send(index: int, arrival: Arrival, start: float, wall_start: float) -> None:
        if max_lag_s is not None and time.perf_counter() - start - arrival.t > max_lag_s:
            records[index] = _DROPPED
            if on_record is not None:
                on_record(None)
            return
        payload = source.payload(arrival.stream, arrival.frame_id, arrival.resolution)
        headers = {**payload.headers, "X-Stream-Id": f"cam-{arrival.stream}", "X-Frame-Id": str(arrival.frame_id),
                   "X-Capture-Time": f"{wall_start + arrival.t:.6f}"}
        sent = round(time.perf_counter() - start, 6)
        answer = transport.send(target.model_for(arrival.stream), payload.body, payload.content_type, headers)
        status, error = answer.status, answer.error
        record = Record(arrival.stream, arrival.frame_id, payload.frames, str(arrival.resolution),
                        round(arrival.t, 6), sent, round(time.perf_counter() - start, 6), status, error)
        records[index] = record
        if on_record is not None:
            on_record(record)

    with ThreadPoolExecutor(concurrency, thread_name_prefix="camera") as pool:
        start = time.perf_counter()
        wall_start = time.time()
        for index, arrival in enumerate(schedule):
            delay = start + arrival.t - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            pool.submit(send, index, arrival, start, wall_start)
    transport.close()
    missing = [i for i, r in enumerate(records) if r is None]
    if missing:
        raise RuntimeError(f"{len(missing)} of {len(records)} requests left no record")
    return Run(schedule, [r for r in records if isinstance(r, Record)],
               [a for a, r in zip(schedule, records) if r is _DROPPED])

