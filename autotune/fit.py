"""The batch latency model `latency_ms = a * frames + b`, fitted by least squares."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class LatencyFit:
    """How long one batch takes in the handler (TorchServe's PredictionTime).

    Attributes:
        a_ms: milliseconds per frame.
        b_ms: fixed milliseconds per batch.
        r2: coefficient of determination of the fit (1.0 = exact).
        batches: batches the fit was made from.
        outliers: batches left out as outliers (a batch that waited for a CPU another process held).
    """

    a_ms: float
    b_ms: float
    r2: float
    batches: int
    outliers: int = 0

    @property
    def reliable(self) -> bool:
        """Good enough to plan with: time grows with frames and the line explains most of it."""
        return self.a_ms > 0 and self.batch_ms(1) > 0 and self.r2 >= 0.5

    def batch_ms(self, frames: float) -> float:
        """Predicted time of one batch of `frames` frames."""
        return self.a_ms * frames + self.b_ms

    def capacity_fps(self, batch_size: int) -> float:
        """Frames per second one worker can serve when every batch holds `batch_size` frames."""
        ms = self.batch_ms(batch_size)
        return math.inf if ms <= 0 else 1000.0 * batch_size / ms


def _lstsq(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    design = np.stack([x, np.ones_like(x)], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    return float(a), float(b)


def _theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Median of the slopes between every two batch sizes' lower-quartile times, and the lower
    quartile of the intercepts: a line under the quiet batches, whatever share of them waited."""
    sizes = np.unique(x)
    quartiles = np.array([np.percentile(y[x == s], 25) for s in sizes])
    i, j = np.triu_indices(len(sizes), k=1)
    a = float(np.median((quartiles[j] - quartiles[i]) / (sizes[j] - sizes[i])))
    return a, float(np.percentile(y - a * x, 25))


def fit_batch_latency(frames: Sequence[float], latency_ms: Sequence[float], trim: bool = True,
                      rounds: int = 3) -> LatencyFit:
    """Least-squares fit of `latency_ms = a * frames + b` over measured batches.

    With `trim`, the line starts from a robust estimate (Theil-Sen over each batch size's median
    time), batches whose residual is more than 3 robust standard deviations (1.4826 x the median
    absolute residual, at least 2 % of the median time) from it are left out, and the rest are
    fitted by least squares, up to `rounds` times: on a shared host some batches wait for a CPU
    another process holds, and least squares alone would tilt the line towards them.

    Args:
        frames: frames in each batch.
        latency_ms: each batch's time, in the same order.

    Raises:
        ValueError: for mismatched lengths, or fewer than two distinct batch sizes (a line through
            one batch size has no slope to find).
    """
    if len(frames) != len(latency_ms):
        raise ValueError(f"{len(frames)} batch sizes but {len(latency_ms)} latencies: give one per batch")
    x = np.asarray(frames, dtype=np.float64)
    y = np.asarray(latency_ms, dtype=np.float64)
    if len(np.unique(x)) < 2:
        raise ValueError(f"batches of {len(np.unique(x))} distinct size(s): the fit needs at least two; "
                         "sweep more than one batch size or more traffic")
    keep = np.ones(len(x), dtype=bool)
    a, b = _theil_sen(x, y) if trim else _lstsq(x, y)
    floor = 0.02 * float(np.median(np.abs(y))) + 1e-9
    for _ in range(rounds if trim else 0):
        residual = y - (a * x + b)
        below = -residual[residual <= 0]
        spread = 1.4826 * float(np.median(below)) if len(below) else 0.0
        new_keep = np.abs(residual) <= max(3 * spread, floor)
        if new_keep.sum() < 2 or len(np.unique(x[new_keep])) < 2:
            break
        keep = new_keep
        a, b = _lstsq(x[keep], y[keep])
    xk, yk = x[keep], y[keep]
    residual_ss = float(np.sum((yk - (a * xk + b)) ** 2))
    total_ss = float(np.sum((yk - yk.mean()) ** 2))
    r2 = 1.0 - residual_ss / total_ss if total_ss > 0 else 1.0
    return LatencyFit(a, b, r2, int(keep.sum()), int((~keep).sum()))
