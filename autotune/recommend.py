"""Which measured batch setting to recommend: the one that met the target with most headroom."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.fit import LatencyFit


@dataclass(frozen=True, slots=True)
class Cell:
    """One measured grid point.

    Attributes:
        batch_size, max_batch_delay_ms: the setting served with.
        offered_fps: frames per second the cameras sent.
        achieved_fps: frames answered 200 per second.
        p50_ms, p99_ms: latency from scheduled send to answer.
        all_ok: every request answered 200 and none dropped.
        mean_batch: frames per batch the handler saw (from the metrics port).
        batches: batches the handler ran.
    """

    batch_size: int
    max_batch_delay_ms: int
    offered_fps: float
    achieved_fps: float
    p50_ms: float
    p99_ms: float
    all_ok: bool
    mean_batch: float = 0.0
    batches: int = 0


@dataclass(frozen=True, slots=True)
class Scored:
    """A cell with its verdict against the target.

    Attributes:
        meets: every frame answered 200 and p99 within the SLA.
        latency_headroom: 1 - p99 / sla (the share of the budget left).
        capacity_headroom: 1 - fps / capacity of full batches from the fit (None without a fit).
        headroom: the smaller of the two: how far this setting is from failing either way.
    """

    cell: Cell
    meets: bool
    latency_headroom: float
    capacity_headroom: float | None
    headroom: float


def score(cell: Cell, fps: float, sla_ms: float, fit: LatencyFit | None = None) -> Scored:
    """Scores one cell against `fps` (total frames/s) and the p99 budget `sla_ms`."""
    if fps <= 0 or sla_ms <= 0:
        raise ValueError(f"fps {fps}, sla_ms {sla_ms}: both must be above 0")
    latency = 1.0 - cell.p99_ms / sla_ms
    capacity = None if fit is None else 1.0 - fps / fit.capacity_fps(cell.batch_size)
    headroom = latency if capacity is None else min(latency, capacity)
    return Scored(cell, cell.all_ok and cell.p99_ms <= sla_ms, latency, capacity, headroom)


def recommend(cells: Sequence[Cell], fps: float, sla_ms: float, fit: LatencyFit | None = None) -> Scored | None:
    """The setting that meets `fps` within `sla_ms` with the most headroom, or None if none does.

    Ties go to the smaller batch, then the shorter delay (less waiting for the same margin).
    """
    scored = [score(c, fps, sla_ms, fit) for c in cells]
    meeting = [s for s in scored if s.meets]
    if not meeting:
        return None
    return max(meeting, key=lambda s: (s.headroom, -s.cell.batch_size, -s.cell.max_batch_delay_ms))
