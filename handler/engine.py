"""What every engine's glue shares (DESIGN section 14): a model directory loaded into a `Served`,
and one batch of engine items answered with one `Response` each.

TorchServe's `service.py` and Ray Serve's `rayserve.model` both call these; neither holds batching
logic, and nothing here knows which engine runs it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from handler import ultralytics
from handler.clip import Outcome
from handler.config import HandlerConfig
from handler.device import bind
from handler.doors import route
from handler.doors.wire import Response
from handler.errors import CannotLoad, FrameError, InternalError, ModelNotLoaded
from handler.loading import Loaded, load_model
from handler.metrics import BatchStats
from handler.pipeline import Pipeline, intra_op_threads
from handler.tasks.labels import from_names, read_labels
from handler.video import describe_decoder

logger = logging.getLogger(__name__)

#: One request as an engine hands it: TorchServe's item dict and its header map.
Item = tuple[Mapping[str, object], Mapping[str, object]]


@dataclass(slots=True)
class Served:
    """A loaded model, or the reason every request is refused.

    Attributes:
        config: the archive's `handler:` section.
        device: where the model runs.
        pipeline: the core; None when the model could not load.
        unavailable: why it could not (answered 500 `ModelNotLoaded`).
    """

    config: HandlerConfig
    device: torch.device
    pipeline: Pipeline | None
    unavailable: ModelNotLoaded | None = None


def device_for(gpu: object) -> torch.device:
    """The worker's device: `cuda:<gpu>` where CUDA exists and the engine gave a GPU, else CPU."""
    return torch.device(f"cuda:{gpu}" if torch.cuda.is_available() and gpu is not None else "cpu")


def load(model_dir: str, manifest: Mapping[str, Any], yaml_config: Mapping[str, Any] | None,
         device: torch.device) -> Served:
    """Loads an unpacked archive's model onto `device` and checks it on a dummy frame.

    Args:
        model_dir: where the archive's files are.
        manifest: the `model` object of its `MANIFEST.json`.
        yaml_config: its model-config YAML (the `handler:` section is read).
        device: from `device_for`.

    Raises:
        ValueError: the archive has no model file; `ConfigError`: a bad `handler:` section.
    """
    config = HandlerConfig.from_mapping((yaml_config or {}).get("handler"))
    bind(device)  # before the model loads: this thread's allocations go to the engine's GPU
    serialized = manifest.get("serializedFile")
    if not serialized:
        raise ValueError("the archive has no model file: pass --serialized-file to the archiver")
    model_file = manifest.get("modelFile")
    try:
        loaded = load_model(os.path.join(model_dir, serialized), device,
                            os.path.join(model_dir, model_file) if model_file else None,
                            intra_op_threads(config.resolved(cuda=device.type == "cuda").threads))
    except CannotLoad as err:
        # Failing the load would have the engine restart the worker in a loop, each request
        # waiting out its timeout; answering every request with the reason at once is better.
        logger.error("the model cannot load: %s. Every request is answered 500 ModelNotLoaded "
                     "until this is fixed", err)
        return Served(config, device, None, ModelNotLoaded(str(err)))
    config = _settings(loaded, (yaml_config or {}).get("handler")) or config
    labels = read_labels(os.path.join(model_dir, config.labels)) if config.labels \
        else from_names(loaded.metadata.get("names"))
    pipeline = Pipeline(loaded.model, config, device, labels=labels, metadata=loaded.metadata)
    logger.info("model checked on a dummy frame: task %s", pipeline.check())
    logger.info(describe_decoder(config, device))
    logger.info("video handler ready on %s with %s", device, config)
    return Served(config, device, pipeline)


def _settings(loaded: Loaded, section: Mapping[str, Any] | None) -> HandlerConfig | None:
    """The settings the model file decides beside the `handler:` section: an ONNX graph's batch,
    size and outputs, an Ultralytics export's `predict` (a TorchScript one is fixed at its
    `imgsz`); None when it decides nothing."""
    if loaded.graph is not None:
        return HandlerConfig.from_mapping(loaded.graph.settings(section, loaded.metadata))
    if loaded.metadata:
        return HandlerConfig.from_mapping(ultralytics.defaults(section, loaded.metadata, fixed=False, dynamic=False))
    return None


def handle(served: Served, items: Sequence[Item], model: str) -> tuple[list[Response], BatchStats]:
    """One batch: each item through its door and the core, one response each, in order. Never
    raises: a bug in the core answers its batch 500 `InternalError`, each in its own door."""
    read = [route.read(item, headers, model, served.config) for item, headers in items]
    outcomes: list[Outcome]
    stats = BatchStats(requests=len(read))
    if served.pipeline is None:
        outcomes = [served.unavailable or ModelNotLoaded("the model is not loaded")] * len(read)
    else:
        try:
            outcomes, stats = served.pipeline.run([request for _, request in read])
            if len(outcomes) != len(read):
                raise RuntimeError(f"{len(read)} requests but {len(outcomes)} outcomes")
        except Exception:
            logger.exception("the core failed on a batch of %d requests", len(read))
            failed: FrameError = InternalError("the handler failed on this batch; see the worker log")
            outcomes, stats = [failed] * len(read), BatchStats(requests=len(read))
            stats.reject(InternalError.reason, len(read))
    responses = [route.answer(door, request, outcome, stats, served.config)
                 for (door, request), outcome in zip(read, outcomes)]
    logger.info("batch: %d requests, %d frames in %d chunks, rejected %s, oom splits %d",
                stats.requests, stats.frames, stats.chunks, stats.rejected or "none", stats.oom_splits)
    return responses, stats
