"""The vision tasks on the device: a detector's post-processing (decode, filter, NMS, map back,
cap) syncs with the host a fixed number of times per chunk, never per frame, and answers the
planted rectangles exactly on CUDA as on the CPU.

The detector is `tests.planted.Yolo` (Ultralytics' raw output layout, built from code).
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import torch

from bench.gpu_probe.core import _cuda, _requests
from bench.gpu_probe.probe import Probe, Row, Section

_RECTS = {0: (40, 20, 200, 100), 2: (400, 200, 640, 320)}


def _pipeline(probe: Probe, **settings: Any) -> Any:
    from handler.config import HandlerConfig
    from handler.tasks.labels import Labels
    from tests import planted
    from tests.support import Answering

    config = HandlerConfig.from_mapping({"task": "detection", "normalize": {"scale": 1 / 255}, **settings})
    model = planted.script(planted.Yolo()).to(probe.device)
    pipeline = Answering(model, config, probe.device, labels=Labels({0: "red", 1: "green", 2: "blue"}))
    pipeline.check()
    return pipeline


def _syncs(pipeline: Any, frames: int, probe: Probe) -> tuple[int, list[str]]:
    """Host syncs inside one chunk's `_on_device` (forward and the task's gather) of `frames` frames."""
    from tests import planted

    chunks = pipeline._chunks
    original = chunks._on_device
    seen: list[str] = []

    def counted(pixels: torch.Tensor, batch: Any, settle: bool = False) -> Any:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if probe.cuda:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                return original(pixels, batch, settle)
            finally:
                if probe.cuda:
                    torch.cuda.set_sync_debug_mode("default")
                seen.extend(str(w.message).splitlines()[0][:120] for w in caught if "synchroniz" in str(w.message))

    chunks._on_device = counted
    try:
        scenes = [planted.scene(320, 640, _RECTS)] * frames
        responses, _ = pipeline.run(_requests(scenes))
    finally:
        chunks._on_device = original
    assert all(r.status == 200 for r in responses), [r.body[:200] for r in responses]
    return len(seen), seen


def detection_section(probe: Probe) -> list[Row]:
    from tests import planted

    rows = []
    pipeline = _pipeline(probe, model_max_batch=16)
    one, _ = _syncs(pipeline, 1, probe)
    many, seen = _syncs(pipeline, 16, probe)
    rows.append(Row("detection: host syncs per chunk do not grow with its frames (1 vs 16)",
                    f"{one} and {many} syncs", many, "syncs", "equal, at most 8",
                    _cuda(probe, one == many <= 8), "; ".join(sorted(set(seen)))[:300]
                    or "set_sync_debug_mode('warn') around ChunkRunner._on_device", cuda_only=True))
    letterbox = _pipeline(probe, resize="letterbox", input_size=[320, 320], letterbox_pad="center", pad_value=114)
    frames = [planted.scene(320, 640, _RECTS), planted.scene(200, 160, {1: (10, 10, 150, 190)})]
    responses, _ = letterbox.run(_requests(frames))
    got = [[(d["label"], d["box"]) for d in json.loads(r.body)["frames"][0]["detections"]] for r in responses]
    want = [[("red", [40, 20, 200, 100]), ("blue", [400, 200, 640, 320])], [("green", [10, 10, 150, 190])]]
    rows.append(Row(f"detection on {probe.device.type}: planted boxes exact through a centred letterbox",
                    f"{sum(map(len, got))} boxes", None, "", "the planted rectangles", got == want,
                    "" if got == want else f"got {got}"))
    return rows


SECTIONS: list[Section] = [Section("detection", detection_section, share=0.5)]
