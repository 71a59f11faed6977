"""Polls the metrics port in the background."""

from __future__ import annotations

import logging
import threading
import time

import requests

from autotune.prom import Snapshot, snapshot

logger = logging.getLogger(__name__)


def scrape(metrics_url: str, model: str, session: requests.Session | None = None) -> Snapshot:
    """One scrape of `model`'s series (`t` on time.monotonic())."""
    text = (session or requests).get(metrics_url.rstrip("/") + "/metrics", timeout=10).text
    return snapshot(text, model, time.monotonic())


class Poller:
    """Scrapes every `interval_s` on a thread between `start()` and `stop()`; fast polling lets
    single batches be read from the last-batch gauges (`prom.batch_samples`)."""

    def __init__(self, metrics_url: str, model: str, interval_s: float = 0.05) -> None:
        self.metrics_url, self.model, self.interval_s = metrics_url, model, interval_s
        self.snapshots: list[Snapshot] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autotune-scrape", daemon=True)

    def _run(self) -> None:
        with requests.Session() as session:
            while not self._stop.is_set():
                try:
                    self.snapshots.append(scrape(self.metrics_url, self.model, session))
                except requests.RequestException as exc:
                    logger.warning("scrape failed: %r", exc)
                self._stop.wait(self.interval_s)

    def start(self) -> Poller:
        self._thread.start()
        return self

    def stop(self) -> list[Snapshot]:
        self._stop.set()
        self._thread.join()
        return self.snapshots
