"""The cameras of this process: started, stopped and restarted to match the camera list."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ingest.camera import CameraWorker
from ingest.config import Camera
from ingest.shard import Shard

if TYPE_CHECKING:
    from ingest.web.view import View

logger = logging.getLogger(__name__)

#: Seconds a stopping camera has to get its last units answered.
DRAIN_S = 8.0


class Fleet:
    """Keeps one `CameraWorker` per camera of this shard.

    Args:
        start: makes and starts a worker for a camera.
        shard: which cameras of the list are this process's.
    """

    def __init__(self, start: Callable[[Camera], CameraWorker], shard: Shard | None = None) -> None:
        self._start = start
        self._shard = shard or Shard()
        self.workers: dict[str, CameraWorker] = {}
        self.view: View | None = None  # told of the cameras after each change (the web view)

    def cameras(self) -> list[Camera]:
        """The running cameras, in the list's order."""
        return [w.camera for w in self.workers.values()]

    def apply(self, cameras: Sequence[Camera]) -> None:
        """Starts added cameras, stops removed ones, restarts changed ones; the others go on (a
        camera whose tracking, zones or lines alone changed takes them without a restart)."""
        wanted = {c.name: c for c in cameras if self._shard.includes(c.name)}
        leaving = [w for name, w in self.workers.items() if name not in wanted or wanted[name] != w.camera]
        self.stop(leaving, time.monotonic() + DRAIN_S)
        for worker in leaving:
            del self.workers[worker.camera.name]
        for name, camera in wanted.items():
            if name not in self.workers:
                self.workers[name] = self._start(camera)
            elif camera.scene != self.workers[name].camera.scene:
                self.workers[name].reconfigure(camera)
        if not wanted:
            logger.warning("no camera of the list is in shard %d/%d", self._shard.index, self._shard.count)

    @property
    def finished(self) -> bool:
        """Whether every camera is done (only files that do not loop ever are)."""
        return all(w.finished for w in self.workers.values())

    @staticmethod
    def stop(workers: Sequence[CameraWorker], deadline: float) -> None:
        """Stops `workers` together: all stop reading now, then each drains until `deadline`."""
        for worker in workers:
            worker.stop()
        threads = [threading.Thread(target=w.drain, args=(deadline,), daemon=True) for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()) + 1.0)

    def stop_all(self, deadline: float) -> None:
        self.stop(list(self.workers.values()), deadline)
        self.workers.clear()
