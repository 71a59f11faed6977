"""The one TorchServe handler class: picks each request's door, runs the core, answers each request.

TorchServe imports this file as a top-level module and takes the one class defined in it.
"""

from __future__ import annotations

import logging
from typing import Any

from ts.metrics.metric_type_enum import MetricTypes
from ts.torch_handler.base_handler import BaseHandler

from handler import engine
from handler.metrics import BatchStats, Kind, samples

logger = logging.getLogger(__name__)

_METRIC_TYPES = {Kind.COUNTER: MetricTypes.COUNTER, Kind.GAUGE: MetricTypes.GAUGE}


class VideoFrameHandler(BaseHandler):  # type: ignore[misc]  # ts ships no type information
    """Serves frames and clips of any batch size and resolution; one status per request."""

    def initialize(self, context: Any) -> None:
        properties = context.system_properties
        self.batch_size = int(properties.get("batch_size") or 1)
        self.served = engine.load(properties["model_dir"], context.manifest["model"], context.model_yaml_config,
                                  engine.device_for(properties.get("gpu_id")))
        self.config, self.device, self.pipeline = self.served.config, self.served.device, self.served.pipeline
        self.initialized = True

    def handle(self, data: list[dict[str, Any]], context: Any) -> list[str]:
        items = [(item, context.get_all_request_header(idx) or {}) for idx, item in enumerate(data)]
        responses, stats = engine.handle(self.served, items, context.model_name)
        for idx, response in enumerate(responses):
            context.set_response_status(response.status, response.phrase, idx)
            context.set_response_content_type(idx, "application/json")
        self._emit(context, stats)
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
