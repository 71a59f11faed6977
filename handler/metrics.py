"""Batch metrics (DESIGN section 7) as plain samples; `service.py` hands them to TorchServe."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from handler.pipeline import BatchStats


class Kind(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"


@dataclass(frozen=True, slots=True)
class Sample:
    """One metric update; `reason` fills the `Reason` dimension of the rejects counter."""

    name: str
    kind: Kind
    value: float
    reason: str | None = None


def samples(stats: BatchStats, batch_size: int) -> list[Sample]:
    """The updates one batch makes; names as declared in `metrics.yaml`.

    Args:
        stats: what the batch did.
        batch_size: TorchServe's configured `batchSize` for the model (requests per batch).
    """
    out = [
        Sample("video_frames_total", Kind.COUNTER, stats.frames),
        Sample("video_batches_total", Kind.COUNTER, 1),
        Sample("video_oom_splits_total", Kind.COUNTER, stats.oom_splits),
        Sample("video_batch_size", Kind.GAUGE, stats.frames),
        Sample("video_batch_fill_ratio", Kind.GAUGE, stats.requests / max(1, batch_size)),
        Sample("video_padding_ratio", Kind.GAUGE, stats.padding_ratio),
        Sample("video_device_memory_peak_bytes", Kind.GAUGE, stats.peak_memory_bytes),
    ]
    out += [Sample("video_frames_rejected_total", Kind.COUNTER, count, reason)
            for reason, count in sorted(stats.rejected.items())]
    return out
