"""Pure metrics over the per-request records of a run (like vLLM's `calculate_metrics`).

Latency is measured from a request's *scheduled* send time (its `X-Capture-Time`) to its answer,
so time a request waited in the client because the server was slow counts too (no coordinated
omission). Percentiles are NumPy's default (linear interpolation between closest ranks), over the
requests that got an HTTP answer of any status; they can be recomputed from the report's
`records` with `numpy.percentile([r["latency_ms"] for r in records if r["status"] is not None], q)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

OK = 200
PERCENTILES = (50, 95, 99)


@dataclass(frozen=True, slots=True)
class Record:
    """One request of a run; times in seconds from the start of the run.

    Attributes:
        stream: camera index.
        frame_id: first frame's number in the camera's sequence.
        frames: frames in the request (the clip size).
        resolution: `"WxH"`.
        scheduled: when the schedule said to send it (its capture time).
        sent: when it actually left (late if the client was saturated).
        done: when its answer (or transport error) arrived.
        status: HTTP status, or None when no answer came (connection error, timeout).
        error: the error type for non-200 answers (`type` of the JSON body) or the transport error.
    """

    stream: int
    frame_id: int
    frames: int
    resolution: str
    scheduled: float
    sent: float
    done: float
    status: int | None
    error: str | None = None

    @property
    def latency_ms(self) -> float:
        return (self.done - self.scheduled) * 1000.0


@dataclass(frozen=True, slots=True)
class Latency:
    """Latency percentiles in ms (all 0.0 when nothing was answered)."""

    p50: float = 0.0
    p95: float = 0.0
    p99: float = 0.0
    max: float = 0.0
    mean: float = 0.0

    @classmethod
    def of(cls, values_ms: Sequence[float]) -> Latency:
        if len(values_ms) == 0:
            return cls()
        values = np.asarray(values_ms, dtype=np.float64)
        p50, p95, p99 = (float(v) for v in np.percentile(values, PERCENTILES))
        return cls(p50, p95, p99, float(values.max()), float(values.mean()))


@dataclass(frozen=True, slots=True)
class StreamMetrics:
    """One camera's (or the whole run's) counts and latency."""

    requests_sent: int
    frames_sent: int
    responses: dict[str, int]
    latency_ms: Latency


@dataclass(frozen=True, slots=True)
class Metrics:
    """What a run achieved.

    Attributes:
        requests_sent: requests sent (each counts once in TorchServe's `ts_inference_requests_total`).
        frames_sent: frames in them (`video_frames_total` counts these).
        responses: HTTP status (as a string; `"error"` for no answer) -> requests.
        latency_ms: percentiles over all answered requests.
        offered_fps: frames the schedule offered per second of the run.
        achieved_fps: frames answered 200 per second, from the first send to the last answer.
        sla_ms: the p99 latency budget.
        sla_met: every request answered 200 and p99 <= sla_ms.
        all_ok: every request answered 200.
        send_lag_ms: how late requests left against their schedule (client saturation).
        per_stream: the same counts and latency per camera.
        wall_s: first scheduled send to last answer.
        frames_dropped: frames the client dropped unsent (too late to send, `max_lag_s`).
    """

    requests_sent: int
    frames_sent: int
    responses: dict[str, int]
    latency_ms: Latency
    offered_fps: float
    achieved_fps: float
    sla_ms: float
    sla_met: bool
    all_ok: bool
    send_lag_ms: Latency
    per_stream: dict[int, StreamMetrics] = field(default_factory=dict)
    wall_s: float = 0.0
    frames_dropped: int = 0


def status_key(status: int | None) -> str:
    return "error" if status is None else str(status)


def _summary(records: Sequence[Record]) -> StreamMetrics:
    responses: dict[str, int] = {}
    for r in records:
        responses[status_key(r.status)] = responses.get(status_key(r.status), 0) + 1
    return StreamMetrics(
        requests_sent=len(records),
        frames_sent=sum(r.frames for r in records),
        responses=dict(sorted(responses.items())),
        latency_ms=Latency.of([r.latency_ms for r in records if r.status is not None]),
    )


def calculate_metrics(records: Iterable[Record], duration_s: float, sla_ms: float,
                      offered_frames: int | None = None, frames_dropped: int = 0) -> Metrics:
    """Summarises a run.

    Args:
        records: one per request sent.
        duration_s: the schedule's length (offered_fps = offered frames / duration_s).
        sla_ms: the p99 latency budget.
        offered_frames: frames the schedule held (default: the frames in `records`).
        frames_dropped: frames dropped unsent; any drop means not every frame got 200.

    Raises:
        ValueError: for a non-positive duration or a negative SLA.
    """
    if duration_s <= 0:
        raise ValueError(f"duration_s = {duration_s}: use more than 0 seconds")
    if sla_ms < 0:
        raise ValueError(f"sla_ms = {sla_ms}: use 0 or more milliseconds")
    records = list(records)
    overall = _summary(records)
    by_stream: dict[int, list[Record]] = {}
    for r in records:
        by_stream.setdefault(r.stream, []).append(r)
    ok_frames = sum(r.frames for r in records if r.status == OK)
    wall = (max(r.done for r in records) - min(r.scheduled for r in records)) if records else 0.0
    all_ok = bool(records) and frames_dropped == 0 and all(r.status == OK for r in records)
    offered = overall.frames_sent if offered_frames is None else offered_frames
    return Metrics(
        requests_sent=overall.requests_sent,
        frames_sent=overall.frames_sent,
        responses=overall.responses,
        latency_ms=overall.latency_ms,
        offered_fps=offered / duration_s,
        achieved_fps=ok_frames / wall if wall > 0 else 0.0,
        sla_ms=sla_ms,
        sla_met=all_ok and overall.latency_ms.p99 <= sla_ms,
        all_ok=all_ok,
        send_lag_ms=Latency.of([(r.sent - r.scheduled) * 1000.0 for r in records]),
        per_stream={s: _summary(rs) for s, rs in sorted(by_stream.items())},
        wall_s=wall,
        frames_dropped=frames_dropped,
    )
