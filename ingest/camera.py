"""One camera at work: its reader, its bounded queue, its senders, its results in order.

Sending policy: at most `max_in_flight` requests at once; `max_in_flight` more units wait unsent,
and when the queue is full the oldest unsent one is dropped (`latest`) or the reader waits
(`every`). A 503, a refused connection, a missing model (a TorchServe restart) are retried with a
backoff from 0.2 to 2 s: under `every` until answered, under `latest` until a newer unit waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ingest.analytics.analyse import Analytics
from ingest.cameras.client import Answer, Client
from ingest.cameras.queue import Closed, SendQueue, Sequencer
from ingest.cameras.reader import Reader
from ingest.cameras.units import Unit
from ingest.config import Camera, Mode, Policy
from ingest.shared import Shared
from ingest.sinks.results import result_lines, unlooked_line

logger = logging.getLogger(__name__)

RETRY_FIRST_S = 0.2
RETRY_CAP_S = 2.0
#: Segments in a row the server cannot decode before the camera is connected again.
CORRUPT_SEGMENTS_IN_A_ROW = 3


@dataclass(frozen=True, slots=True)
class _Ended:
    """A connection ended: its tracks end, after the lines of its units (the sequencer's order)."""


Released = tuple[Unit | None, list[dict[str, Any]]] | _Ended


class CameraWorker:
    """Runs one camera: `start()`, later `stop()` then `drain(deadline)`."""

    def __init__(self, camera: Camera, shared: Shared) -> None:
        self.camera = camera
        self._shared = shared
        self._analytics = Analytics(camera.name, camera.scene, shared.metrics, shared.snapshots)
        self._sequencer: Sequencer[Released] = Sequencer(self._release)
        self._queue = SendQueue(camera.max_in_flight, camera.effective_policy, self._dropped_unit)
        self._reader = Reader(camera, shared, self._sequencer.issue, self._emit, self._dropped_early,
                              lambda: self._sequencer.after_all(_Ended()))
        self._abandon = threading.Event()
        self._lock = threading.Lock()
        self._in_flight: dict[int, Unit] = {}
        self.counts: Counter[str] = Counter()
        self.drops: Counter[str] = Counter()
        self._corrupt_in_a_row = 0
        self._threads = [threading.Thread(target=self._read, name=f"read-{camera.name}", daemon=True)]
        self._threads += [threading.Thread(target=self._send_loop, name=f"send-{camera.name}-{i}", daemon=True)
                          for i in range(camera.max_in_flight)]

    def start(self) -> CameraWorker:
        self._shared.metrics.add(self.camera.name)
        self._shared.lines.event(self.camera.name, "started", url=self.camera.display_url,
                                 mode=self.camera.mode.value, policy=self.camera.effective_policy.value)
        for thread in self._threads:
            thread.start()
        return self

    def reconfigure(self, camera: Camera) -> None:
        """The same camera with a new scene (zones, lines, tracking): applied to the next answers."""
        self._shared.lines.write(self._analytics.reconfigure(camera.scene, self._shared.now()))
        self.camera = camera

    def _release(self, item: Released) -> None:
        if isinstance(item, _Ended):
            self._shared.lines.write(self._analytics.end(self._shared.now()))
            return
        unit, lines = item
        out = self._analytics.release(unit, lines, self._shared.now())
        self._shared.lines.write(out)
        if self._shared.view is not None:
            shown = None if unit is not None and unit.still is not None and not unit.body else unit  # no picture
            self._shared.view.released(self.camera.name, shown, out)

    @property
    def finished(self) -> bool:
        """Whether everything is done: a file that ended, every unit answered or dropped."""
        return not any(t.is_alive() for t in self._threads)

    def stop(self) -> None:
        """Stops reading; what is queued or in flight is still sent (see `drain`)."""
        with self._lock:
            self.counts["in_flight_at_stop"] = len(self._in_flight)
            self.counts["queued_at_stop"] = self._queue.waiting()
        self._reader.stop.set()

    def drain(self, deadline: float) -> None:
        """Waits (until the monotonic `deadline`) for the units left to be answered; then drops the
        unsent ones and gives up on those in flight, each counted, and writes the `stopped` event."""
        self._reader.stop.set()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._abandon.set()
        for unit in self._queue.close():
            self._drop(unit, "shutdown")
        with self._lock:
            left, self._in_flight = dict(self._in_flight), {}
        self.counts["abandoned"] += len(left)
        for unit in left.values():
            self._shared.metrics.dropped(self.camera.name, "shutdown")
            self._sequencer.done(unit.seq, (None, [self._line("dropped", segment=unit.seq, reason="shutdown",
                                                               in_flight=True)]))
        # Every unit is written now: the camera's tracks end, its members leave, before `stopped`.
        self._shared.lines.write(self._analytics.end(self._shared.now(), close=True))
        counts = {k: self.counts[k] for k in ("sent", "answered", "abandoned", "in_flight_at_stop", "queued_at_stop")}
        self._shared.lines.event(self.camera.name, "stopped", **counts, dropped=dict(sorted(self.drops.items())))
        self._shared.metrics.remove(self.camera.name)

    def _read(self) -> None:
        try:
            self._reader.run()
        finally:
            self._queue.finish()

    def _emit(self, unit: Unit) -> None:
        if unit.still is not None:  # frames mode, nothing to look at: answered here, in its turn
            width, height, boxes, lighting = unit.still
            line = unlooked_line(self.camera.name, unit, width, height, boxes, self._shared.now())
            if lighting:
                line["lighting"] = True
            self._sequencer.done(unit.seq, (unit, [line]))
            return
        if not self._queue.put(unit, self._reader.stop):
            self._drop(unit, "shutdown")

    def _line(self, event: str, **fields: Any) -> dict[str, Any]:
        return {"camera": self.camera.name, "event": event, "time": round(self._shared.now(), 6), **fields}

    def _drop(self, unit: Unit, reason: str) -> None:
        self._dropped_early(reason)
        self._sequencer.done(unit.seq, (None, [self._line("dropped", segment=unit.seq, reason=reason)]))

    def _dropped_unit(self, unit: Unit) -> None:
        self._drop(unit, "behind")

    def _dropped_early(self, reason: str) -> None:
        with self._lock:
            self.drops[reason] += 1
        self._shared.metrics.dropped(self.camera.name, reason)

    def _send_loop(self) -> None:
        client = Client(self._shared.url, self._shared.model, self._shared.keys)
        try:
            while True:
                try:
                    unit = self._queue.get()
                except Closed:
                    return
                with self._lock:
                    self._in_flight[unit.seq] = unit
                    self.counts["sent"] += 1
                lines = self._deliver(client, unit)
                with self._lock:
                    mine = self._in_flight.pop(unit.seq, None) is not None
                if mine and lines is not None:  # else given up at the drain deadline: already written
                    self._sequencer.done(unit.seq, (unit, lines))
        finally:
            client.close()

    def _deliver(self, client: Client, unit: Unit) -> list[dict[str, Any]] | None:
        """Sends `unit` until answered within the policy; its lines (None: abandoned at shutdown)."""
        delay, warned = RETRY_FIRST_S, False
        while True:
            answer = client.post(unit.body, unit.headers(self.camera.name))
            if not answer.retryable:
                return self._answered(unit, answer)
            if not warned:
                logger.warning("camera %s: TorchServe %s; retrying", self.camera.name, _why(answer))
                warned = True
            if self.camera.effective_policy is Policy.LATEST and self._queue.waiting() > 0:
                with self._lock:
                    mine = self._in_flight.pop(unit.seq, None) is not None
                if mine:
                    self._drop(unit, "unavailable")
                return None
            if self._abandon.wait(delay):
                return None
            delay = min(RETRY_CAP_S, delay * 2)

    def _answered(self, unit: Unit, answer: Answer) -> list[dict[str, Any]]:
        now = self._shared.now()
        lines = result_lines(self.camera.name, unit, answer, now)
        bad = answer.status == 200 and lines[0].get("type") == "BadAnswer"  # a 200 the bridge refused (NaN)
        good = answer.status == 200 and not bad
        frames = len(lines) if good else unit.frames
        status = "bad_answer" if bad else str(answer.status or 0)
        self._shared.metrics.answered(self.camera.name, status, frames, self.camera.mode is Mode.SEGMENTS)
        if good:
            self._shared.metrics.lag(self.camera.name, now - lines[-1]["capture_time"])
        self._watch_decoding(unit, answer)
        with self._lock:
            self.counts["answered"] += 1
        return lines

    def _watch_decoding(self, unit: Unit, answer: Answer) -> None:
        """Segments the server cannot decode, several in a row: the stream changed under the
        connection (codec, profile): connect again, which reads the stream's new description."""
        if unit.content_type != "video/mp2t":
            return
        corrupt = answer.status == 400 and (answer.body or {}).get("type") in ("CorruptFrame", "UnsupportedCodec")
        with self._lock:
            self._corrupt_in_a_row = self._corrupt_in_a_row + 1 if corrupt else 0
            renew = self._corrupt_in_a_row >= CORRUPT_SEGMENTS_IN_A_ROW
            if renew:
                self._corrupt_in_a_row = 0
        if renew:
            self._reader.renew(f"reconnect: {CORRUPT_SEGMENTS_IN_A_ROW} segments in a row answered "
                               f"{(answer.body or {}).get('type')}")


def _why(answer: Answer) -> str:
    if answer.status is None:
        return f"did not answer ({answer.error})"
    return f"answered {answer.status} {(answer.body or {}).get('type', '')}".rstrip()
