"""What every camera of one process shares: where to send, the key, the outputs, the clock."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ingest.cameras.client import Keys
from ingest.cameras.clock import WallClock
from ingest.sinks.metrics import Metrics
from ingest.sinks.output import Lines
from ingest.sinks.redact import Redactor

if TYPE_CHECKING:
    from ingest.record.recorder import Recorder
    from ingest.web.view import View


@dataclass(frozen=True, slots=True)
class Shared:
    """The process's services, handed to each camera.

    Attributes:
        url: TorchServe's inference address.
        model: the model to post to.
        keys: the inference key.
        lines: results and events.
        metrics: Prometheus metrics.
        redact: masks secrets in texts.
        now: the wall clock (monotonic since start).
        snapshots: `--snapshot DIR` (a picture per camera), or None.
        view: `--web`'s live view, told of every answered unit, or None.
        recorder: `--record DIR`, handed each segment as it is cut, or None.
    """

    url: str
    model: str
    keys: Keys
    lines: Lines
    metrics: Metrics
    redact: Redactor
    now: WallClock
    snapshots: Path | None = None
    view: View | None = None
    recorder: Recorder | None = None
