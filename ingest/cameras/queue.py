"""The per-camera send queue (bounded: memory stays flat whatever the camera or the server does)
and the sequencer that writes each camera's results in its own order."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from ingest.cameras.units import Unit
from ingest.config import Policy


class Closed(Exception):
    """The queue was closed: no more units will come."""


class SendQueue:
    """At most `capacity` unsent units; `put` drops the oldest (`latest`) or waits (`every`).

    Args:
        capacity: unsent units kept.
        policy: what `put` does when the queue is full.
        dropped: called with each unit dropped to make room (outside the lock).
    """

    def __init__(self, capacity: int, policy: Policy, dropped: Callable[[Unit], None]) -> None:
        if capacity < 1:
            raise ValueError(f"queue capacity {capacity}: use 1 or more")
        self._units: deque[Unit] = deque()
        self._capacity = capacity
        self._policy = policy
        self._dropped = dropped
        self._changed = threading.Condition()
        self._closed = False

    def put(self, unit: Unit, stop: threading.Event) -> bool:
        """Queues `unit`; False if `stop` was set (or the queue closed) while waiting for room."""
        victim = None
        with self._changed:
            while self._policy is Policy.EVERY and len(self._units) >= self._capacity:
                if stop.is_set() or self._closed:
                    return False
                self._changed.wait(0.1)
            if len(self._units) >= self._capacity:
                victim = self._units.popleft()
            self._units.append(unit)
            self._changed.notify_all()
        if victim is not None:
            self._dropped(victim)
        return True

    def get(self) -> Unit:
        """The oldest unit, waiting for one.

        Raises:
            Closed: the queue was closed and is empty.
        """
        with self._changed:
            while not self._units:
                if self._closed:
                    raise Closed
                self._changed.wait(0.1)
            unit = self._units.popleft()
            self._changed.notify_all()
            return unit

    def waiting(self) -> int:
        with self._changed:
            return len(self._units)

    def close(self) -> list[Unit]:
        """Closes the queue; returns the units still unsent (and removes them)."""
        with self._changed:
            self._closed = True
            left = list(self._units)
            self._units.clear()
            self._changed.notify_all()
            return left

    def finish(self) -> None:
        """Closes the queue once it is empty: `get` hands out what is left, then raises `Closed`."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()


T = TypeVar("T")


class Sequencer(Generic[T]):
    """Releases each unit's item (its lines) in sequence order, whatever order the answers come
    back in; `write` is called under the sequencer's lock, so one at a time, in order.

    Every sequence number handed to `issue` must come back through `done` (answered, failed or
    dropped), else the lines after it wait forever: the camera makes sure of that.
    """

    def __init__(self, write: Callable[[T], None]) -> None:
        self._write = write
        self._lock = threading.Lock()
        self._next = 0
        self._issued = 0
        self._ready: dict[int, T] = {}
        self._after: dict[int, list[T]] = {}  # items written once everything before that number is

    def issue(self) -> int:
        """The next sequence number."""
        with self._lock:
            seq = self._issued
            self._issued += 1
            return seq

    def done(self, seq: int, item: T) -> None:
        """`seq` is finished with this item (lines, possibly none); writes every item now in order."""
        with self._lock:
            self._ready[seq] = item
            while self._next in self._ready:
                self._write(self._ready.pop(self._next))
                self._next += 1
                for later in self._after.pop(self._next, ()):
                    self._write(later)

    def after_all(self, item: T) -> None:
        """Writes `item` once every number issued so far is written (at once if they are), before
        any later one: e.g. the end of a connection, after the lines of its units."""
        with self._lock:
            if self._next == self._issued:
                self._write(item)
            else:
                self._after.setdefault(self._issued, []).append(item)
