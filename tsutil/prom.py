"""Prometheus text from TorchServe's metrics port, read with `prometheus_client`'s parser.

Handler metrics carry `ModelName` (TorchServe adds `Level` and `Hostname`); the frontend's own
metrics carry `model_name`, `model_version` and `hostname` instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample line: the series name (`video_frames_total`), its labels and its value."""

    name: str
    labels: dict[str, str]
    value: float

    def model(self) -> str | None:
        """The model the sample is about, whichever label convention it uses."""
        return self.labels.get("ModelName", self.labels.get("model_name"))


def samples(text: str) -> Iterator[Sample]:
    """Every sample of a scrape, in order.

    Raises:
        ValueError: the text is not Prometheus text exposition format.
    """
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            yield Sample(s.name, dict(s.labels), float(s.value))


def total(text: str, name: str, model: str | None = None, **labels: str) -> float:
    """The sum of series `name`'s samples for `model` (either label) with these labels; 0 if none.

    Counters are summed over versions and hosts, e.g. `total(text, "video_frames_rejected_total",
    "frame_quality", Reason="bad_input")`.
    """
    return sum(s.value for s in samples(text) if s.name == name and (model is None or s.model() == model)
               and all(s.labels.get(k) == v for k, v in labels.items()))
