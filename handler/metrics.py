"""Batch metrics (DESIGN section 7): what a batch did, as plain samples; `service.py` hands
them to TorchServe."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


@dataclass(slots=True)
class BatchStats:
    """What one batch did, for the metrics (DESIGN section 7)."""

    requests: int = 0
    frames: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    chunks: int = 0
    oom_splits: int = 0
    padded_pixels: int = 0
    tensor_pixels: int = 0
    peak_memory_bytes: int = 0

    @property
    def padding_ratio(self) -> float:
        return self.padded_pixels / self.tensor_pixels if self.tensor_pixels else 0.0

    def reject(self, reason: str, frames: int) -> None:
        """Counts `frames` frames answered with an error of `reason`."""
        self.rejected[reason] = self.rejected.get(reason, 0) + frames


class Kind(enum.Enum):
    """A metric's Prometheus type."""

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
