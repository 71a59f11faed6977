"""Closed-loop clients for fault and soak tests: bounded in time, loopback only."""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field

import requests

from tests.e2e.server import TorchServe


@dataclass
class Outcome:
    """What the clients saw: (send time, latency s, status) per request; status 0 = no answer."""

    records: list[tuple[float, float, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # why each status 0 got no answer

    def statuses(self) -> set[int]:
        return {status for _, _, status in self.records}


def run_clients(server: TorchServe, model: str, body: bytes, content_type: str, clients: int,
                seconds: float, during=None, timeout: float = 120) -> Outcome:
    """`clients` threads post `body` back to back for `seconds`; `during()` runs meanwhile; a
    request unanswered after `timeout` seconds counts as status 0."""
    outcome, lock, stop = Outcome(), threading.Lock(), threading.Event()

    def client() -> None:
        with requests.Session() as session:
            while not stop.is_set():
                start = time.monotonic()
                try:
                    status = server.predict(model, body, content_type, session=session,
                                            timeout=timeout).status_code
                except requests.RequestException as error:
                    status = 0
                    with lock:
                        outcome.errors.append(f"{error!r} after {time.monotonic() - start:.1f} s")
                with lock:
                    outcome.records.append((start, time.monotonic() - start, status))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + seconds
    if during is not None:
        during()
    time.sleep(max(0.0, deadline - time.monotonic()))
    stop.set()
    for thread in threads:
        thread.join(timeout=timeout + 60)
    return outcome


def send_rounds(server: TorchServe, model: str, body: bytes, content_type: str, clients: int,
                per_client: int) -> list[int]:
    """`clients` threads each post `body` `per_client` times back to back; returns every status
    (0 = no answer) once all are answered."""
    statuses: list[int] = []
    lock = threading.Lock()

    def client() -> None:
        with requests.Session() as session:
            for _ in range(per_client):
                try:
                    status = server.predict(model, body, content_type, session=session).status_code
                except requests.RequestException:
                    status = 0
                with lock:
                    statuses.append(status)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def wait_for_200(server: TorchServe, model: str, body: bytes, content_type: str,
                 timeout: float = 60.0) -> float:
    """Seconds until `model` answers 200 again."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if server.predict(model, body, content_type).status_code == 200:
                return time.monotonic() - start
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{model} did not answer 200 within {timeout} s")


def idle_rss_mb(server: TorchServe, model: str, samples: int = 3) -> float:
    """The model's worker memory (MiB) between batches: the least of a few readings, taken when
    every request sent has been answered, so no batch's temporaries are counted."""
    readings = []
    for _ in range(samples):
        readings.append(server.worker_rss_mb(model))
        time.sleep(0.2)
    return min(readings)


def assert_bounded_growth(samples: list[float], limit_mb: float) -> None:
    """The memory floor of the last third may not exceed that of the middle third by `limit_mb`.

    `samples` are per-round readings (`idle_rss_mb`); the first third is warm-up. A leak raises
    the floor (what stays allocated between batches) round after round; allocator noise does not.
    A third's level is its median: one round whose reading dipped (the allocator handing memory
    back for a moment) or spiked does not set it (the minimum did: a run read 482-573 MiB with no
    trend and failed).
    """
    third = len(samples) // 3
    assert third >= 2, f"too few samples: {samples}"
    growth = statistics.median(samples[2 * third:]) - statistics.median(samples[third:2 * third])
    assert growth < limit_mb, f"worker memory grew {growth:.0f} MiB after warm-up: {samples}"
