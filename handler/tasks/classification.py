"""`task: classification`: each frame's `top_k` classes, scored by the configured activation.

A class whose score is NaN or infinite (the model's logit was) is left out of its frame's answer
and counted (`video_non_finite_dropped_total`): no answer holds a value strict JSON cannot read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from handler.clip import FrameResult
from handler.config import Activation, HandlerConfig
from handler.errors import ConfigError
from handler.layout import Layout, Placement
from handler.outputs import NON_FINITE, Gathered, pack
from handler.tasks.head import Upload, describe, first_tensor, forward
from handler.tasks.labels import Labels, check_ids


class ClassificationHead:
    """`[N, C]` logits (or `[N, C, 1, 1]`) -> `classes: [{class_id, label, score}]`, best first."""

    def __init__(self, config: HandlerConfig, labels: Labels) -> None:
        self._config = config
        self._labels = labels
        self._allowed = None if config.classes is None else labels.ids(list(config.classes), "classes")
        self._checked = False

    def call(self, model: Callable[..., Any], x: torch.Tensor, placement: Placement,
             sizes: torch.Tensor | None) -> Any:
        return forward(model, x, sizes)

    def gather(self, raw: Any, placement: Placement, frames: int, upload: Upload) -> Gathered:
        logits = first_tensor(raw)
        if logits.dim() == 4 and logits.shape[2:] == (1, 1):
            logits = logits.flatten(1)
        if logits.dim() != 2 or logits.shape[0] != placement.rows:
            raise ConfigError(f"handler.task = classification takes one row of class scores per frame "
                              f"([N, C]); the model returned {describe(raw)}: set task: raw or segmentation")
        logits = logits[:frames].float()
        if self._allowed is not None and not self._checked:  # (the dummy run at initialize)
            check_ids(self._allowed, logits.shape[1], "classes")
            self._checked = True
        activation = self._config.activation
        scores = (logits.softmax(dim=1) if activation is Activation.SOFTMAX
                  else logits.sigmoid() if activation is Activation.SIGMOID else logits)
        finite = torch.isfinite(scores)
        scores = scores.masked_fill(~finite, float("-inf"))
        if self._allowed is not None:
            allowed = torch.zeros(scores.shape[1], dtype=torch.bool, device=scores.device)
            allowed[self._allowed] = True
            scores = scores.masked_fill(~allowed, float("-inf"))
        top, classes = scores.topk(min(self._config.top_k, scores.shape[1]), dim=1)
        return pack({"scores": top, "classes": classes, NON_FINITE: (~finite).sum().reshape(1)})

    def per_frame(self, outputs: list[tuple[str, torch.Tensor]], placement: Placement,
                  layout: Layout) -> list[FrameResult]:
        got = dict(outputs)
        results = []
        for (h, w), scores, classes in zip(placement.original, got["scores"].tolist(), got["classes"].tolist()):
            ranked = [{"class_id": c, "label": self._labels.name(c), "score": round(s, 6)}
                      for s, c in zip(scores, classes) if s != float("-inf")]
            results.append(FrameResult(w, h, answer={"classes": ranked}))
        return results
