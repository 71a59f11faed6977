"""Batch metrics (DESIGN section 7): what a batch did, as plain samples; `service.py` hands
them to TorchServe."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from handler.clip import Clip


@dataclass(slots=True)
class BatchStats:
    """What one batch did, for the metrics (DESIGN section 7).

    Attributes:
        segments: video segments decoded, by decoder ("nvdec", "cpu").
    """

    requests: int = 0
    frames: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    segments: dict[str, int] = field(default_factory=dict)
    chunks: int = 0
    oom_splits: int = 0
    padded_pixels: int = 0
    tensor_pixels: int = 0
    peak_memory_bytes: int = 0
    non_finite: int = 0  # detections and class scores dropped: the model answered NaN or infinity

    @property
    def padding_ratio(self) -> float:
        return self.padded_pixels / self.tensor_pixels if self.tensor_pixels else 0.0

    def reject(self, reason: str, frames: int) -> None:
        """Counts `frames` frames answered with an error of `reason`."""
        self.rejected[reason] = self.rejected.get(reason, 0) + frames

    def count_segments(self, decoded: Iterable[object]) -> None:
        """Counts the video segments among a wave's decoded requests (clips or errors), by decoder."""
        for clip in decoded:
            if isinstance(clip, Clip) and clip.decoder is not None:
                self.segments[clip.decoder] = self.segments.get(clip.decoder, 0) + 1


class Kind(enum.Enum):
    """A metric's Prometheus type."""

    COUNTER = "counter"
    GAUGE = "gauge"


@dataclass(frozen=True, slots=True)
class Sample:
    """One metric update.

    Attributes:
        dimensions: (name, value) of the dimensions after `ModelName` and `Level`, in the order
            `metrics.yaml` declares them (`Reason` of the rejects counter, `Decoder` of the
            segments counter).
    """

    name: str
    kind: Kind
    value: float
    dimensions: tuple[tuple[str, str], ...] = ()


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
        Sample("video_non_finite_dropped_total", Kind.COUNTER, stats.non_finite),
    ]
    out += [Sample("video_frames_rejected_total", Kind.COUNTER, count, (("Reason", reason),))
            for reason, count in sorted(stats.rejected.items())]
    out += [Sample("video_segments_total", Kind.COUNTER, count, (("Decoder", decoder),))
            for decoder, count in sorted(stats.segments.items())]
    return out
