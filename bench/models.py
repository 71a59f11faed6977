"""`python -m bench.models`: what a vision task's answers cost, beside the forward that makes them.

Two detectors on the same photographs (data/images, 640x480 JPEG): a YOLOv8n-sized net built from
code (seeded weights, batch-norm calibrated on the photographs; `[N, 84, 8400]` at 640x640, like
YOLOv8n/11n) whose outputs carry exactly `k` objects above the threshold, four candidates each
(NMS keeps one), and torchvision's SSDlite (tests/vision/zoo.py) with thresholds that leave about
`k` boxes a frame. Both are served by the handler's core in process (`Answering`, TorchServe's
worker path without TorchServe):

1. post-processing and encoding (the task head's `gather` + `per_frame` + the native door's JSON)
   per frame against the forward's time per frame, for 10 and 100 detections (target: under 5%);
2. answer bytes per frame at 10 and 100 detections, and `task: raw`'s for the same model;
3. end to end through one real TorchServe (token auth on), interleaved closed-loop rounds: SSDlite
   with our handler and with TorchServe's stock `object_detector` handler; `task: raw` cannot
   answer a torchvision detector (its outputs are a list of dicts), so raw against detection is
   the YOLO-format detector's;
4. the same YOLO-format detector as an ONNX graph (`torch.onnx.export`, symbolic batch, 640x640)
   through ONNX Runtime's CPU provider, in process and end to end beside its TorchScript row
   (where onnxruntime and onnxscript are installed: the `onnx` and `test` extras).

The machine may be shared: compare rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import Tensor, nn

# ---------------------------------------------------------------------------------------------
# The YOLO-format detector: YOLOv8n's layers (widths 16..256, C2f, SPPF, PAN neck, DFL head).

INPUT = 640
WIDTH, HEIGHT = 640, 480  # the frames: letterboxed into 640x640 at scale 1 (top-left)
CANDIDATES = 4  # anchors above the threshold per planted object: NMS keeps the best
DAMP = 0.2  # every other class score is sigmoid * DAMP, under the default threshold (0.25)
_COCO_NAMES = ("person bicycle car motorcycle airplane bus train truck boat traffic_light fire_hydrant "
               "stop_sign parking_meter bench bird cat dog horse sheep cow elephant bear zebra giraffe "
               "backpack umbrella handbag tie suitcase frisbee skis snowboard sports_ball kite baseball_bat "
               "baseball_glove skateboard surfboard tennis_racket bottle wine_glass cup fork knife spoon bowl "
               "banana apple sandwich orange broccoli carrot hot_dog pizza donut cake chair couch potted_plant "
               "bed dining_table toilet tv laptop mouse remote keyboard cell_phone microwave oven toaster sink "
               "refrigerator book clock vase scissors teddy_bear hair_drier toothbrush")
COCO = tuple(name.replace("_", " ") for name in _COCO_NAMES.split(" "))  # 80 names


class _Conv(nn.Module):
    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = nn.SiLU()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.bn(self.conv(x)))


class _Bottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool) -> None:
        super().__init__()
        self.cv1 = _Conv(c, c, 3)
        self.cv2 = _Conv(c, c, 3)
        self.add = shortcut

    def forward(self, x: Tensor) -> Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class _C2f(nn.Module):
    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = False) -> None:
        super().__init__()
        self.c = c2 // 2
        self.cv1 = _Conv(c1, 2 * self.c)
        self.cv2 = _Conv((2 + n) * self.c, c2)
        self.m = nn.ModuleList(_Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x: Tensor) -> Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class _SPPF(nn.Module):
    def __init__(self, c1: int, c2: int) -> None:
        super().__init__()
        self.cv1 = _Conv(c1, c1 // 2)
        self.cv2 = _Conv(c1 // 2 * 4, c2)
        self.pool = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: Tensor) -> Tensor:
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(self.pool(y[-1]))
        return self.cv2(torch.cat(y, 1))


class YoloNet(nn.Module):
    """YOLOv8n's architecture: `Tensor[N, 3, H, W]` (pixels / 255) -> `Tensor[N, 84, A]` of
    centre x, y, w, h (input pixels) and 80 class scores; A = 8400 at 640x640."""

    def __init__(self, classes: int = 80, reg_max: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(_Conv(3, 16, 3, 2), _Conv(16, 32, 3, 2), _C2f(32, 32, 1, True),
                                  _Conv(32, 64, 3, 2), _C2f(64, 64, 2, True))
        self.p4 = nn.Sequential(_Conv(64, 128, 3, 2), _C2f(128, 128, 2, True))
        self.p5 = nn.Sequential(_Conv(128, 256, 3, 2), _C2f(256, 256, 1, True), _SPPF(256, 256))
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        self.top4, self.top3 = _C2f(384, 128), _C2f(192, 64)
        self.down3, self.out4 = _Conv(64, 64, 3, 2), _C2f(192, 128)
        self.down4, self.out5 = _Conv(128, 128, 3, 2), _C2f(384, 256)
        self.box = nn.ModuleList(nn.Sequential(_Conv(c, 64, 3), _Conv(64, 64, 3), nn.Conv2d(64, 4 * reg_max, 1))
                                 for c in (64, 128, 256))
        self.cls = nn.ModuleList(nn.Sequential(_Conv(c, 80, 3), _Conv(80, 80, 3), nn.Conv2d(80, classes, 1))
                                 for c in (64, 128, 256))
        self.register_buffer("bins", torch.arange(reg_max, dtype=torch.float32))
        self.reg_max = reg_max
        self.strides = [8, 16, 32]

    def forward(self, x: Tensor) -> Tensor:
        p3 = self.stem(x)
        p4 = self.p4(p3)
        p5 = self.p5(p4)
        t4 = self.top4(torch.cat([self.up(p5), p4], 1))
        n3 = self.top3(torch.cat([self.up(t4), p3], 1))
        n4 = self.out4(torch.cat([self.down3(n3), t4], 1))
        n5 = self.out5(torch.cat([self.down4(n4), p5], 1))
        boxes: list[Tensor] = []
        scores: list[Tensor] = []
        for i, (box, cls) in enumerate(zip(self.box, self.cls)):
            feature = [n3, n4, n5][i]
            n, _, h, w = feature.shape
            stride = float(self.strides[i])
            # DFL: each side's distance is the expectation over reg_max bins, in strides.
            dist = box(feature).view(n, 4, self.reg_max, h * w).softmax(2)
            dist = (dist * self.bins.view(1, 1, -1, 1)).sum(2)
            ys, xs = torch.meshgrid(torch.arange(h, device=x.device, dtype=x.dtype) + 0.5,
                                    torch.arange(w, device=x.device, dtype=x.dtype) + 0.5, indexing="ij")
            anchor = torch.stack([xs.reshape(-1), ys.reshape(-1)])[None]  # [1, 2, h*w]
            lt, rb = anchor - dist[:, :2], anchor + dist[:, 2:]
            boxes.append(torch.cat([(lt + rb) / 2, rb - lt], 1) * stride)
            scores.append(cls(feature).flatten(2).sigmoid())
        return torch.cat([torch.cat(boxes, 2), torch.cat(scores, 2)], 1)


class Planted(nn.Module):
    """A `YoloNet` whose outputs hold exactly `k` objects above 0.25, each with `CANDIDATES`
    anchors (boxes shifted by 2 px, IoU about 0.9; lower scores) that class-aware NMS removes; every
    other class score is damped under the threshold. The objects lie on a grid over the
    `WIDTH` x `HEIGHT` frame, at the top-left of the 640x640 input, class `i % 80`."""

    def __init__(self, net: YoloNet, k: int, side: int = INPUT) -> None:
        super().__init__()
        self.net = net
        plant, mask = _plants(k, side)
        self.register_buffer("plant", plant)
        self.register_buffer("mask", mask)
        self.damp = DAMP

    def forward(self, x: Tensor) -> Tensor:
        y = self.net(x)
        y = torch.cat([y[:, :4], y[:, 4:] * self.damp], 1)
        return torch.where(self.mask, self.plant, y)


def objects(k: int) -> list[tuple[float, float, float, float]]:
    """`k` non-overlapping boxes (x1, y1, x2, y2) on a grid over the frame, 20% margins."""
    cols = max(1, math.ceil(math.sqrt(k * WIDTH / HEIGHT)))
    rows = max(1, math.ceil(k / cols))
    cw, ch = WIDTH / cols, HEIGHT / rows
    return [(c * cw + 0.1 * cw, r * ch + 0.1 * ch, (c + 0.9) * cw, (r + 0.9) * ch)
            for r in range(rows) for c in range(cols)][:k]


def _plants(k: int, side: int) -> tuple[Tensor, Tensor]:
    """The planted rows `[1, 84, A]` and where they go `[1, 1, A]` bool (stride-8 anchors)."""
    grid = side // 8
    anchors = sum((side // s) ** 2 for s in (8, 16, 32))
    plant = torch.zeros(1, 84, anchors)
    mask = torch.zeros(1, 1, anchors, dtype=torch.bool)
    for i, (x1, y1, x2, y2) in enumerate(objects(k)):
        gx, gy = int((x1 + x2) / 16), int((y1 + y2) / 16)
        score = 0.5 + 0.4 * i / max(1, k)
        for j, (dx, dy) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1)][:CANDIDATES]):
            a = (gy + dy) * grid + gx + dx
            if mask[0, 0, a]:
                raise ValueError(f"{k} objects are too many for distinct anchors")
            shift_x, shift_y = 2.0 * dx, 2.0 * dy
            plant[0, :4, a] = torch.tensor([(x1 + x2) / 2 + shift_x, (y1 + y2) / 2 + shift_y, x2 - x1, y2 - y1])
            plant[0, 4 + i % 80, a] = score - 0.05 * j
            mask[0, 0, a] = True
    return plant, mask


def frames(count: int, height: int = HEIGHT, width: int = WIDTH) -> list[Any]:
    """`count` photographs (tests.support.frame) as `[height, width, 3]` uint8."""
    from tests import support

    return [support.frame(height, width, seed) for seed in range(count)]


def yolo_net(seed: int = 0) -> YoloNet:
    """The seeded net, its batch-norm statistics taken from the photographs (so activations keep
    a trained net's scale: no runaway or subnormal values that would time differently)."""
    torch.manual_seed(seed)
    net = YoloNet()
    from tests.support import calibrated

    batch = torch.stack([torch.from_numpy(f.copy()).permute(2, 0, 1).float() / 255 for f in frames(4, INPUT, INPUT)])
    return calibrated(net, net, batch)


def yolo(k: int, net: YoloNet | None = None) -> torch.jit.ScriptModule:
    """The scripted YOLO-format detector with exactly `k` objects a frame."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script: archive.sh packs TorchScript
        return torch.jit.script(Planted(net or yolo_net(), k).eval())


# ---------------------------------------------------------------------------------------------
# SSDlite: torchvision's, seeded and calibrated (tests/vision/zoo.py).

SSDLITE_LABELS = ("background", "person", "bicycle", "car", "dog")
#: The seeded 5-class head's softmax sits near 0.2; its logits x SHARPEN put about 10 boxes a
#: frame over the stock object_detector's fixed 0.5, so both handlers answer the same boxes.
SHARPEN = 6.75
STOCK_THRESHOLD = 0.5  # ts/torch_handler/object_detector.py: ObjectDetector.threshold
SSDLITE_MODULE = '''
import torch
import torchvision


class SSDlite(torch.nn.Module):
    """torchvision's SSDlite (MobileNetV3, 320), 5 classes, as TorchServe's eager mode loads it."""

    def __init__(self):
        super().__init__()
        self.model = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=5)

    def forward(self, images):
        return self.model(images)
'''


def ssdlite() -> nn.Module:
    """tests/vision/zoo.py's SSDlite with its classifier's logits x `SHARPEN` (eager)."""
    import copy

    from tests.vision import zoo

    model = copy.deepcopy(zoo.ssdlite())
    with torch.no_grad():
        for block in model.head.classification_head.module_list:
            block[-1].weight.mul_(SHARPEN)
            block[-1].bias.mul_(SHARPEN)
    return model.eval()


def threshold_for(scores: Sequence[Sequence[float]], per_frame: int) -> float:
    """The score threshold above which `per_frame` boxes a frame remain on average (`>`, as
    `score_threshold` compares): the `per_frame * frames + 1`-th best score of all frames.

    Raises:
        ValueError: fewer scores than that.
    """
    pooled = sorted((s for frame in scores for s in frame), reverse=True)
    keep = per_frame * len(scores)
    if keep >= len(pooled):
        raise ValueError(f"{len(pooled)} scores over {len(scores)} frames cannot leave {per_frame} a frame")
    return pooled[keep]


# ---------------------------------------------------------------------------------------------
# Results: pure, so the table and the verdict are tested without torchvision.

TARGET_PERCENT = 5.0


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(slots=True)
class Row:
    """One model and variant: in process (per frame, one value per repeat) and end to end.

    Attributes:
        checked: whether its post-processing counts for the target (detection rows).
        detections: boxes a frame, as answered (mean over the frames).
        answer_bytes: native JSON body of a one-frame request (mean over the frames).
        served_bytes: HTTP body of an answer end to end (mean over the answers).
        served_detections: boxes a frame in the answers end to end (mean).
        rounds: end-to-end frames/s, one per round.
        note: why a part is missing (e.g. the variant cannot answer).
    """

    model: str
    variant: str
    checked: bool = False
    detections: float | None = None
    forward_ms: list[float] = field(default_factory=list)
    gather_ms: list[float] = field(default_factory=list)
    per_frame_ms: list[float] = field(default_factory=list)
    json_ms: list[float] = field(default_factory=list)
    answer_bytes: int | None = None
    rounds: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    served_detections: float | None = None
    served_bytes: float | None = None
    note: str | None = None

    @property
    def forward(self) -> float | None:
        """Median forward ms a frame."""
        return _median(self.forward_ms)

    @property
    def post(self) -> float | None:
        """Median of gather + per_frame + JSON ms a frame (summed within each repeat)."""
        return _median([sum(parts) for parts in zip(self.gather_ms, self.per_frame_ms, self.json_ms)])

    @property
    def percent(self) -> float | None:
        """Post-processing and encoding as a percentage of the forward."""
        return share(self.post, self.forward)

    @property
    def frames_per_s(self) -> float | None:
        return _median(self.rounds)

    @property
    def p50_ms(self) -> float | None:
        return _median(self.latency_ms)


def share(post_ms: float | None, forward_ms: float | None) -> float | None:
    """`post_ms` as a percentage of `forward_ms`; None when either is missing."""
    if post_ms is None or not forward_ms:
        return None
    return 100.0 * post_ms / forward_ms


def verdict(rows: Sequence[Row], target: float = TARGET_PERCENT) -> bool | None:
    """Whether every checked row's post-processing is under `target` percent of its forward;
    None when no checked row was measured."""
    measured = [r.percent for r in rows if r.checked and r.percent is not None]
    if not measured:
        return None
    return all(p < target for p in measured)


def _number(value: float | None, fmt: str, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}{fmt}}"


def _size(count: float | None) -> str:
    if count is None:
        return "-"
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


def _odd(statuses: Counter) -> str | None:
    """End-to-end answers other than 200, if any."""
    if not statuses or set(statuses) == {200}:
        return None
    return "e2e answers " + " ".join(f"{k}:{v}" for k, v in sorted(statuses.items(), key=str))


def table(rows: Sequence[Row], target: float = TARGET_PERCENT) -> str:
    """One line per model and variant; a verdict line for the target."""
    head = (f"{'model':<8} {'variant':<27} {'det/fr':>6} {'fwd ms':>7} {'gather':>7} {'per_fr':>7} {'json':>7} "
            f"{'post ms':>7} {'post %':>6} {'answer':>9} | {'e2e fr/s':>8} {'p50 ms':>7} {'e2e det':>7} {'e2e body':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        parts = (_median(r.gather_ms), _median(r.per_frame_ms), _median(r.json_ms))
        lines.append(
            f"{r.model:<8} {r.variant:<27} {_number(r.detections, '.1f', 6)} {_number(r.forward, '.1f', 7)} "
            + " ".join(_number(p, ".2f", 7) for p in parts)
            + f" {_number(r.post, '.2f', 7)} {_number(r.percent, '.2f', 6)} {_size(r.answer_bytes):>9} | "
            f"{_number(r.frames_per_s, '.2f', 8)} {_number(r.p50_ms, '.0f', 7)} "
            f"{_number(r.served_detections, '.1f', 7)} {_size(r.served_bytes):>9}"
            + "".join(f"  ({n})" for n in (r.note, _odd(r.statuses)) if n))
    met = verdict(rows, target)
    worst = max((r.percent for r in rows if r.checked and r.percent is not None), default=None)
    shown = "not measured" if met is None else f"{'PASS' if met else 'FAIL'} (worst {worst:.2f}%)"
    lines.append(f"\ndetection post-processing + encoding under {target:g}% of the forward: {shown}")
    return "\n".join(lines)


def report(rows: Sequence[Row], settings: dict[str, Any], target: float = TARGET_PERCENT) -> dict[str, Any]:
    """Everything measured, for `--json`."""
    out = []
    for r in rows:
        entry = asdict(r)
        entry["statuses"] = {str(k): v for k, v in r.statuses.items()}
        entry.update(forward_median_ms=r.forward, post_median_ms=r.post, percent=r.percent,
                     frames_per_s=r.frames_per_s, p50_ms=r.p50_ms)
        out.append(entry)
    return {"settings": settings, "target_percent": target, "pass": verdict(rows, target), "rows": out}


# ---------------------------------------------------------------------------------------------
# In process: the handler's core (`tests.support.Answering`), its head and door timed.

SCALE = {"normalize": {"scale": 1 / 255}}
LETTERBOX = {"resize": "letterbox", "input_size": [INPUT, INPUT], **SCALE}
#: TorchServe's max_response_size in the shipped config.properties: room for raw's answers.
RAW_BYTES = 209715200
_STAGES = {"call": "forward", "gather": "gather", "per_frame": "per_frame"}


@dataclass(frozen=True, slots=True, eq=False)  # keyed by identity: its settings are a dict
class Variant:
    """One row's model and handler settings (the `handler:` section)."""

    model: str
    name: str
    net: Callable[..., Any]
    settings: dict[str, Any]
    labels: tuple[str, ...]
    checked: bool = False
    planted: int | None = None  # detections a frame the model holds (YOLO), to check the answers


ONNX_ROW = "detection k=10, ONNX"


def variants(batch: int, yolo10: Any, yolo100: Any, ssd: Any, ssd_thresholds: Sequence[tuple[int, float]],
             onnx10: Any = None) -> list[Variant]:
    """The in-process rows: YOLO at 10 and 100 detections and raw (and at 10 as an ONNX graph),
    SSDlite at about 10 and 100 (None for a model left out)."""
    out = []
    if yolo10 is not None:
        detect = {"task": "detection", "format": "yolo", "model_max_batch": batch, **LETTERBOX}
        if onnx10 is not None:
            out.append(Variant("yolo", ONNX_ROW, onnx10, detect, COCO, True, 10))
        out += [Variant("yolo", "detection k=10", yolo10, detect, COCO, True, 10),
                Variant("yolo", "detection k=100", yolo100, detect, COCO, True, 100),
                Variant("yolo", "raw (k=10)", yolo10, {"task": "raw", "model_max_batch": batch,
                                                       "max_response_bytes": RAW_BYTES, **LETTERBOX}, ())]
    if ssd is not None:
        for k, t in ssd_thresholds:
            out.append(Variant("ssdlite", f"detection ~{k} @{t:.3g}", ssd, {
                "task": "detection", "score_threshold": t, "model_max_batch": batch, **SCALE}, SSDLITE_LABELS, True))
        out.append(Variant("ssdlite", "raw", ssd, {"task": "raw", "model_max_batch": batch,
                                                   "max_response_bytes": RAW_BYTES, **SCALE}, ()))
    return out


class _TimedDoor:
    """The native door, its JSON encoding timed."""

    def __init__(self, clock: Any) -> None:
        from handler.doors import native

        self.answer = clock.wrap("json", native.answer)
        self.refuse = native.refuse


@contextmanager
def _timed_heads(clock: Any) -> Iterator[None]:
    """Every head's `call` (the forward), `gather` and `per_frame` timed while inside."""
    from handler.tasks.detection import DetectionHead
    from handler.tasks.raw import RawHead

    saved = [(cls, name, cls.__dict__[name]) for cls in (DetectionHead, RawHead) for name in _STAGES]
    try:
        for cls, name, fn in saved:
            setattr(cls, name, clock.wrap(_STAGES[name], fn))
        yield
    finally:
        for cls, name, fn in saved:
            setattr(cls, name, fn)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:90] if text else ''}"


def measure(chosen: Sequence[Variant], bodies: Sequence[bytes], repeats: int,
            progress: Callable[[str], None] = lambda line: None) -> list[Row]:
    """Each variant on one batch of `bodies` (JPEG, one frame a request): a warm-up, then
    `repeats` timed batches, the variants interleaved (the order rotates every repeat).

    Returns:
        One row per variant; a variant whose pipeline cannot check (e.g. `task: raw` on a
        torchvision detector) has a note instead of times.
    """
    from bench.inprocess import StageClock
    from handler.config import HandlerConfig
    from handler.tasks.labels import Labels
    from tests import support

    clock = StageClock(lambda: None)
    rows = {v: Row(v.model, v.name, v.checked) for v in chosen}
    pipelines = {}
    for v in chosen:
        try:
            pipeline = support.Answering(v.net, HandlerConfig.from_mapping(v.settings), door=_TimedDoor(clock),
                                         labels=Labels(dict(enumerate(v.labels))))
            pipeline.check()
        except Exception as err:  # the table says why
            rows[v].note = f"cannot answer: {_first_line(err)}"
            progress(f"{v.model} {v.name}: {rows[v].note}")
            continue
        pipelines[v] = pipeline
    live = list(pipelines)
    last: dict[Variant, list[Any]] = {}
    with _timed_heads(clock):
        for r in range(repeats + 1):  # the first is a warm-up
            for v in live[r % max(1, len(live)):] + live[:r % max(1, len(live))]:
                clock.seconds.clear()
                responses, _ = pipelines[v].run([support.request(body, "image/jpeg") for body in bodies])
                last[v] = responses
                if r == 0:
                    continue
                n, row = len(bodies), rows[v]
                for stage, values in (("forward", row.forward_ms), ("gather", row.gather_ms),
                                      ("per_frame", row.per_frame_ms), ("json", row.json_ms)):
                    values.append(clock.seconds[stage] * 1000 / n)
                progress(f"repeat {r}/{repeats} {v.model:<7} {v.name:<18} forward {row.forward_ms[-1]:7.1f} ms/frame, "
                         f"post {row.gather_ms[-1] + row.per_frame_ms[-1] + row.json_ms[-1]:6.2f} ms/frame")
    default_limit = HandlerConfig().max_response_bytes
    for v, responses in last.items():
        row, notes = rows[v], []
        codes = Counter(resp.status for resp in responses)
        if set(codes) != {200}:
            notes.append(f"answers {dict(codes)}")
        row.answer_bytes = round(statistics.mean(len(resp.body.encode()) for resp in responses))
        if row.answer_bytes > default_limit:
            notes.append(f"over the default max_response_bytes {default_limit}: raised here")
        if v.settings["task"] == "detection":
            row.detections = statistics.mean(len(json.loads(resp.body)["frames"][0]["detections"])
                                             for resp in responses if resp.status == 200)
        if v.planted is not None and row.detections != v.planted:
            notes.append(f"{v.planted} planted a frame: NMS left duplicates")
        row.note = "; ".join(notes) or None
    return list(rows.values())


# ---------------------------------------------------------------------------------------------
# End to end: one TorchServe (shipped config.properties, token auth on), the archives side by side.

#: TorchServe model name -> (row model, row variant)
SERVED = {"yolo_detection": ("yolo", "detection k=10"), "yolo_onnx": ("yolo", ONNX_ROW), "yolo_raw": ("yolo", "raw (k=10)"),
          "ssdlite_detection": ("ssdlite", "detection ~10 @0.5"),
          "ssdlite_threads": ("ssdlite", "detection, decode_threads 1"),
          "ssdlite_stock": ("ssdlite", "stock object_detector @0.5")}


#: Served once, one request a client (one batch), not in rounds: a batch of raw YOLO answers
#: (8 x 14.6 MB) takes TorchServe about 100 s to bring back, growing with the square of its size.
ONE_BATCH = ("yolo_raw",)


def _batching(batch: int, delay_ms: int) -> dict[str, Any]:
    return {"minWorkers": 1, "maxWorkers": 1, "batchSize": batch, "maxBatchDelay": delay_ms, "responseTimeout": 120}


def build_archives(work: Path, yolo10: Any, ssd: nn.Module, ssd_threshold: float, batch: int,
                   delay_ms: int, onnx_file: Path | None = None) -> dict[str, Path]:
    """The archives of `SERVED`: ours (archive.sh: YOLO scripted, SSDlite eager with
    `--model-file`) and the stock `object_detector` on the same SSDlite files (its
    `index_to_name.json`)."""
    from bench.torchserve import ROOT

    store, src = work / "store", work / "src"
    src.mkdir(parents=True)
    yolo10.save(str(src / "yolo.pt"))
    (src / "ssdlite_module.py").write_text(SSDLITE_MODULE)
    torch.save({f"model.{k}": v for k, v in ssd.state_dict().items()}, src / "ssdlite.pth")
    (src / "coco.txt").write_text("\n".join(COCO) + "\n")
    (src / "ssdlite.txt").write_text("\n".join(SSDLITE_LABELS) + "\n")
    (src / "index_to_name.json").write_text(json.dumps({str(i): n for i, n in enumerate(SSDLITE_LABELS)}))
    handlers = {
        "yolo_detection": {"task": "detection", "format": "yolo", "labels": "coco.txt", **LETTERBOX},
        "yolo_raw": {"task": "raw", "max_response_bytes": RAW_BYTES, **LETTERBOX},
        "ssdlite_detection": {"task": "detection", "score_threshold": ssd_threshold, "labels": "ssdlite.txt",
                              **SCALE},
        # One decode thread: torch keeps both CPUs for the forward (auto: 2 threads, 1 intra-op).
        "ssdlite_threads": {"task": "detection", "score_threshold": ssd_threshold, "labels": "ssdlite.txt",
                            "decode_threads": 1, **SCALE},
    }
    for name, handler in handlers.items():
        (src / f"{name}.yaml").write_text(yaml.safe_dump({**_batching(batch, delay_ms),
                                                          "handler": {"model_max_batch": batch, **handler}}))
    (src / "stock.yaml").write_text(yaml.safe_dump(_batching(batch, delay_ms)))
    env = {**os.environ, "MODEL_STORE": str(store), "PYTHON": sys.executable,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if onnx_file is not None:  # the same detector as an ONNX graph, the same handler settings
        (src / "yolo_onnx.yaml").write_text((src / "yolo_detection.yaml").read_text())
        subprocess.run(["bash", str(ROOT / "archive.sh"), "yolo_onnx", str(onnx_file), str(src / "yolo_onnx.yaml")],
                       check=True, env=env, stdout=subprocess.DEVNULL)
    for name, model, extra in (("yolo_detection", "yolo.pt", []), ("yolo_raw", "yolo.pt", []),
                               *((n, "ssdlite.pth", ["--model-file", str(src / "ssdlite_module.py")])
                                 for n in ("ssdlite_detection", "ssdlite_threads"))):
        subprocess.run(["bash", str(ROOT / "archive.sh"), name, str(src / model), str(src / f"{name}.yaml"), *extra],
                       check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["torch-model-archiver", "--model-name", "ssdlite_stock", "--version", "1.0",
                    "--model-file", str(src / "ssdlite_module.py"), "--serialized-file", str(src / "ssdlite.pth"),
                    "--handler", "object_detector", "--extra-files", str(src / "index_to_name.json"),
                    "--config-file", str(src / "stock.yaml"), "--export-path", str(store), "--force"],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    return {name: store / f"{name}.mar" for name in SERVED if (store / f"{name}.mar").exists()}


def _overlay(names: Sequence[str], batch: int, delay_ms: int) -> str:
    models = {m: {"1.0": {"defaultVersion": True, "marName": f"{m}.mar", **_batching(batch, delay_ms)}}
              for m in names}
    return f"load_models={','.join(f'{m}.mar' for m in names)}\nmodels={json.dumps(models)}\n"


def _detections(body: bytes) -> int | None:
    """Boxes in an answer: ours (`frames[0].detections`) or the stock handler's (a list)."""
    answer = json.loads(body)
    if isinstance(answer, list):
        return len(answer)
    frame = answer.get("frames", [{}])[0]
    return len(frame["detections"]) if "detections" in frame else None


#: Answers larger than this (`task: raw`) are measured, not parsed for their boxes.
_PARSED_BYTES = 1 << 20


@dataclass(slots=True)
class Window:
    """One variant's closed-loop window: what came back for every request sent in it."""

    seconds: float = 0.0  # from the first request to the last answer
    statuses: Counter = field(default_factory=Counter)
    latency_ms: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    detections: list[int] = field(default_factory=list)

    @property
    def frames_per_s(self) -> float:
        return self.statuses[200] / self.seconds if self.seconds else 0.0


def drained_loop(url: str, token: str, bodies: Sequence[bytes], clients: int, seconds: float) -> Window:
    """`clients` threads, each sending its next JPEG when the last is answered, for `seconds`
    (at least once); every request sent is waited for, and the rate is over the time to the last
    answer.

    `bench.e2e.closed_loop` counts the answers inside the window instead: where one batch takes
    about the window (`task: raw`'s 15 MB answers, 8 a batch) that reads 0 or a whole batch.
    """
    import threading

    import requests

    start = time.monotonic()
    stop_at = start + seconds
    window = Window()
    lock = threading.Lock()
    last = [start]

    def client(k: int) -> None:
        session = requests.Session()
        for i in range(k, 1 << 30, clients):
            if i > k and time.monotonic() >= stop_at:  # each client sends at least once
                return
            body = bodies[i % len(bodies)]
            sent = time.monotonic()
            try:
                answer = session.post(url, data=body, timeout=600, headers={
                    "Authorization": f"Bearer {token}", "Content-Type": "image/jpeg"})
                status: int | str = answer.status_code
            except requests.RequestException as exc:
                status, answer = type(exc).__name__, None
            done = time.monotonic()
            found = _detections(answer.content) if status == 200 and answer is not None and \
                len(answer.content) < _PARSED_BYTES else None
            with lock:
                window.statuses[status] += 1
                last[0] = max(last[0], done)
                if status == 200 and answer is not None:
                    window.latency_ms.append((done - sent) * 1000)
                    window.sizes.append(len(answer.content))
                    if found is not None:
                        window.detections.append(found)

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    window.seconds = last[0] - start
    return window


def serve(work: Path, mars: dict[str, Path], bodies: Sequence[bytes], rows: Sequence[Row], rounds: int,
          seconds: float, clients: int, batch: int, delay_ms: int, port_offset: int | None = None,
          progress: Callable[[str], None] = lambda line: None) -> None:
    """Closed-loop rounds (`clients` threads) against every archive in one TorchServe, the order
    rotating every round (`ONE_BATCH`: one request a client, in the first round alone); fills
    each row's `rounds`, latencies, statuses and answer sizes."""
    from tsutil.server import TorchServe

    names = list(mars)
    by_key = {(r.model, r.variant): r for r in rows}
    server = TorchServe(work / "ts", mars, overlays=[_overlay(names, batch, delay_ms)], port_offset=port_offset)
    started = time.monotonic()
    server.start(timeout_s=400)
    progress(f"TorchServe ready in {time.monotonic() - started:.0f} s")
    try:
        token = server.key()
        url = {n: f"{server.inference_url}/predictions/{n}" for n in names}
        for n in names:  # warm-up: first batches pay one-off costs
            if n not in ONE_BATCH:
                drained_loop(url[n], token, bodies, clients, 1.0)
        sizes: dict[str, list[int]] = {n: [] for n in names}
        found: dict[str, list[int]] = {n: [] for n in names}
        for r in range(rounds):
            for n in names[r % len(names):] + names[:r % len(names)]:
                if n in ONE_BATCH and r:
                    continue
                window = drained_loop(url[n], token, bodies, clients, 0.0 if n in ONE_BATCH else seconds)
                row = by_key[SERVED[n]]
                row.rounds.append(window.frames_per_s)
                row.statuses.update(window.statuses)
                row.latency_ms.extend(window.latency_ms)
                sizes[n] += window.sizes
                found[n] += window.detections
                progress(f"round {r + 1}/{rounds} {n:<18} {window.frames_per_s:6.2f} frames/s "
                         f"({window.statuses[200]} answers in {window.seconds:.1f} s)")
        for n in names:
            row = by_key[SERVED[n]]
            row.served_bytes = statistics.mean(sizes[n]) if sizes[n] else None
            row.served_detections = statistics.mean(found[n]) if found[n] else None
            if n in ONE_BATCH:
                row.note = "; ".join(filter(None, [row.note, f"e2e: one batch, {clients} requests at once"]))
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------
# The run, and its thin CLI.

MODELS = ("yolo", "ssdlite")


def _ssd_scores(model: nn.Module, pixels: Sequence[Any]) -> list[list[float]]:
    """torchvision's own scores of each frame (what `score_threshold` then filters)."""
    with torch.inference_mode():
        found = model([torch.from_numpy(p.copy()).permute(2, 0, 1).float() / 255 for p in pixels])
    return [d["scores"].tolist() for d in found]


def onnx_yolo(work: Path, net: YoloNet, progress: Callable[[str], None]) -> tuple[Path | None, Any]:
    """The k=10 detector as an ONNX graph (symbolic batch, 640x640) and its ONNX Runtime session
    as the handler loads it; (None, None) where onnxruntime or the exporter is not installed."""
    from handler.errors import CannotLoad

    try:
        from handler.config import HandlerConfig
        from handler.onnx_model import load
        from handler.pipeline import intra_op_threads
        from tests.onnx_export import export

        path = export(Planted(net, 10).eval(), work / "yolo.onnx", None, (INPUT, INPUT))
        model, _ = load(str(path), torch.device("cpu"), intra_op_threads(HandlerConfig().threads))
    except (ImportError, CannotLoad) as err:
        progress(f"no ONNX rows: {err} (pip install -e '.[onnx,test]')")
        return None, None
    return path, model


def run(work: Path, models: Sequence[str] = MODELS, e2e: bool = True, repeats: int = 5, batch: int = 8,
        rounds: int = 2, seconds: float = 12.0, clients: int = 8, delay_ms: int = 50,
        port_offset: int | None = None, progress: Callable[[str], None] = lambda line: None
        ) -> tuple[list[Row], dict[str, Any]]:
    """Builds the models, measures them in process, then (with `e2e`) serves them.

    Args:
        work: a scratch folder (archives, TorchServe's working directory).
        models: which of `MODELS` (SSDlite needs torchvision).
        repeats: timed batches a variant, in process.
        batch: frames a batch (one a request): `model_max_batch` and TorchServe's `batchSize`.
        rounds, seconds, clients: end-to-end rounds, each variant's window in a round, and
            closed-loop client threads.
        delay_ms: TorchServe's `maxBatchDelay`.
    """
    from tests import support

    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        raise ValueError(f"models {unknown}: choose from {list(MODELS)}")
    if e2e and set(models) != set(MODELS):
        raise ValueError("the end-to-end part serves both models: leave --models out, or add --no-e2e")
    bodies = [support.jpeg(f) for f in frames(batch)]
    pixels = [support.decoded(b) for b in bodies]
    yolo10 = yolo100 = ssd = None
    thresholds: list[tuple[int, float]] = []
    onnx_file = onnx10 = None
    if "yolo" in models:
        net = yolo_net()
        yolo10, yolo100 = yolo(10, net), yolo(100, net)
        onnx_file, onnx10 = onnx_yolo(work, net, progress)
    if "ssdlite" in models:
        ssd = ssdlite()
        thresholds = [(10, STOCK_THRESHOLD), (100, threshold_for(_ssd_scores(ssd, pixels), 100))]
    progress(f"models built; in process: batches of {batch} JPEG {WIDTH}x{HEIGHT} frames, {repeats} timed "
             f"repeats, torch intra-op threads as the handler sets them")
    rows = measure(variants(batch, yolo10, yolo100, ssd, thresholds, onnx10), bodies, repeats, progress)
    if ssd is not None:
        rows.append(Row("ssdlite", "detection, decode_threads 1", note="@0.5, torch on both CPUs: end to end only"))
        rows.append(Row("ssdlite", "stock object_detector @0.5", note="TorchServe's handler: end to end only"))
    if e2e:
        progress(f"end to end: one TorchServe, batchSize {batch}, maxBatchDelay {delay_ms} ms, {clients} "
                 f"closed-loop clients, {rounds} interleaved rounds of {seconds:g} s")
        mars = build_archives(work, yolo10, ssd, STOCK_THRESHOLD, batch, delay_ms, onnx_file)
        serve(work, mars, bodies, rows, rounds, seconds, clients, batch, delay_ms, port_offset, progress)
    settings = {"models": list(models), "frames": f"{len(bodies)} JPEG {WIDTH}x{HEIGHT} (data/images)",
                "batch": batch, "repeats": repeats, "e2e": e2e, "rounds": rounds, "seconds": seconds,
                "clients": clients, "max_batch_delay_ms": delay_ms, "ssdlite_sharpen": SHARPEN,
                "ssdlite_thresholds": thresholds, "torch_threads": torch.get_num_threads(),
                "torch": torch.__version__, "onnx_file": str(onnx_file.name) if onnx_file else None}
    return rows, settings


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.models", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a short run: 2-frame batches, 1 repeat, 1 short round")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated: yolo, ssdlite (needs torchvision)")
    p.add_argument("--no-e2e", action="store_true", help="skip the TorchServe part (no Java needed)")
    p.add_argument("--repeats", type=int, default=5, help="timed batches a variant, in process")
    p.add_argument("--batch", type=int, default=8, help="frames a batch: model_max_batch and batchSize")
    p.add_argument("--rounds", type=int, default=2, help="end-to-end rounds over every variant")
    p.add_argument("--seconds", type=float, default=12.0, help="seconds a variant and round, end to end")
    p.add_argument("--clients", type=int, default=8, help="closed-loop client threads")
    p.add_argument("--port-offset", type=int, help="move TorchServe's ports (default $VIDEO_TS_PORT_OFFSET)")
    p.add_argument("--json", type=Path, help="write all results here")
    p.add_argument("--hot-paths", action="store_true",
                   help="only the detection head's hot paths against the code they replaced (bench.hot_paths)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.hot_paths:
        from bench import hot_paths

        hot_paths.main()
        return 0
    if args.quick:
        args.repeats, args.batch, args.rounds, args.seconds = 1, 2, 1, 4.0
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-models-") as tmp:
        rows, settings = run(Path(tmp), [m.strip() for m in args.models.split(",") if m.strip()], not args.no_e2e,
                             args.repeats, args.batch, args.rounds, args.seconds, args.clients,
                             port_offset=args.port_offset,
                             progress=lambda line: print(f"  [{time.time() - started:3.0f} s] {line}", flush=True))
    print("\n" + table(rows))
    print(f"\n({time.time() - started:.0f} s; per frame = a batch's time / its frames; post = gather + per_frame "
          "+ JSON; a shared 2-core machine is noisy: compare rows of one run)")
    if args.json:
        args.json.write_text(json.dumps({"argv": sys.argv, **report(rows, settings)}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
