"""The one TorchServe handler class: picks each request's door, runs the core, answers each request.

TorchServe imports this file as a top-level module and takes the one class defined in it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from ts.metrics.metric_type_enum import MetricTypes
from ts.torch_handler.base_handler import BaseHandler

from handler.config import HandlerConfig
from handler.device import bind
from handler.doors import route
from handler.loading import load_model
from handler.metrics import BatchStats, Kind, samples
from handler.pipeline import Pipeline
from handler.video import describe_decoder

logger = logging.getLogger(__name__)

_METRIC_TYPES = {Kind.COUNTER: MetricTypes.COUNTER, Kind.GAUGE: MetricTypes.GAUGE}


class VideoFrameHandler(BaseHandler):  # type: ignore[misc]  # ts ships no type information
    """Serves frames and clips of any batch size and resolution; one status per request."""

    def initialize(self, context: Any) -> None:
        properties = context.system_properties
        self.config = HandlerConfig.from_mapping((context.model_yaml_config or {}).get("handler"))
        gpu = properties.get("gpu_id")
        self.device = torch.device(
            f"cuda:{gpu}" if torch.cuda.is_available() and gpu is not None else "cpu"
        )
        bind(self.device)  # before the model loads: this thread's allocations go to gpu_id
        serialized = context.manifest["model"].get("serializedFile")
        if not serialized:
            raise ValueError("the archive has no model file: pass --serialized-file to the archiver")
        model = load_model(os.path.join(properties["model_dir"], serialized), self.device)
        self.pipeline = Pipeline(model, self.config, self.device)
        logger.info(describe_decoder(self.config, self.device))
        self.batch_size = int(properties.get("batch_size") or 1)
        self.initialized = True
        logger.info("video handler ready on %s with %s", self.device, self.config)

    def handle(self, data: list[dict[str, Any]], context: Any) -> list[str]:
        read = [route.read(item, context.get_all_request_header(idx) or {}, context.model_name, self.config)
                for idx, item in enumerate(data)]
        outcomes, stats = self.pipeline.run([request for _, request in read])
        responses = [route.answer(door, request, outcome, stats)
                     for (door, request), outcome in zip(read, outcomes)]
        for idx, response in enumerate(responses):
            context.set_response_status(response.status, response.phrase, idx)
            context.set_response_content_type(idx, "application/json")
        self._emit(context, stats)
        logger.info("batch: %d requests, %d frames in %d chunks, rejected %s, oom splits %d",
                    stats.requests, stats.frames, stats.chunks, stats.rejected or "none", stats.oom_splits)
        return [response.body for response in responses]

    def _emit(self, context: Any, stats: BatchStats) -> None:
        """Never fails a request: an emission error is logged and dropped."""
        try:
            for sample in samples(stats, self.batch_size):
                metric = context.metrics.get_metric(sample.name, _METRIC_TYPES[sample.kind])
                dims = [context.model_name, "Model", *(value for _, value in sample.dimensions)]
                metric.add_or_update(sample.value, dims)
        except Exception:
            logger.exception("emitting batch metrics failed; requests are unaffected")
