"""The head of each task (`head_for`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from handler.config import HandlerConfig, Task
from handler.layout import Layout
from handler.tasks.classification import ClassificationHead
from handler.tasks.detection import DetectionHead
from handler.tasks.head import Head
from handler.tasks.labels import Labels
from handler.tasks.raw import RawHead
from handler.tasks.segmentation import SegmentationHead


def head_for(config: HandlerConfig, layout: Layout, labels: Labels, metadata: Mapping[str, Any] | None = None) -> Head:
    """The head of the configured task (`metadata`: what the model file says of itself)."""
    if config.task is Task.DETECTION:
        return DetectionHead(config, labels, metadata)
    if config.task is Task.CLASSIFICATION:
        return ClassificationHead(config, labels)
    if config.task is Task.SEGMENTATION:
        return SegmentationHead(config, labels, layout)
    return RawHead(config.output_names, config.dense_outputs)
