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

from handler.clip import Outcome
from handler.config import HandlerConfig
from handler.device import bind
from handler.doors import route
from handler.errors import ModelNotLoaded
from handler.loading import MissingOperator, load_model
from handler.metrics import BatchStats, Kind, samples
from handler.pipeline import Pipeline
from handler.tasks.labels import from_names, read_labels
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
        manifest = context.manifest["model"]
        serialized = manifest.get("serializedFile")
        if not serialized:
            raise ValueError("the archive has no model file: pass --serialized-file to the archiver")
        model_dir = properties["model_dir"]
        self.batch_size = int(properties.get("batch_size") or 1)
        self.unavailable: ModelNotLoaded | None = None
        model_file = manifest.get("modelFile")
        try:
            loaded = load_model(os.path.join(model_dir, serialized), self.device,
                                os.path.join(model_dir, model_file) if model_file else None)
        except MissingOperator as err:
            # Failing initialize would have TorchServe restart the worker in a loop, each request
            # waiting out its timeout; answering every request with the reason at once is better.
            logger.error("the model cannot load: %s. Every request is answered 500 ModelNotLoaded "
                         "until this is fixed", err)
            self.unavailable = ModelNotLoaded(str(err))
            self.initialized = True
            return
        labels = read_labels(os.path.join(model_dir, self.config.labels)) if self.config.labels \
            else from_names(loaded.metadata.get("names"))
        self.pipeline = Pipeline(loaded.model, self.config, self.device, labels=labels, metadata=loaded.metadata)
        logger.info("model checked on a dummy frame: task %s", self.pipeline.check())
        logger.info(describe_decoder(self.config, self.device))
        self.initialized = True
        logger.info("video handler ready on %s with %s", self.device, self.config)

    def handle(self, data: list[dict[str, Any]], context: Any) -> list[str]:
        read = [route.read(item, context.get_all_request_header(idx) or {}, context.model_name, self.config)
                for idx, item in enumerate(data)]
        outcomes: list[Outcome]
        if self.unavailable is not None:
            outcomes, stats = [self.unavailable] * len(read), BatchStats(requests=len(read))
        else:
            outcomes, stats = self.pipeline.run([request for _, request in read])
        responses = [route.answer(door, request, outcome, stats, self.config)
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
