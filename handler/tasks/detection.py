"""`task: detection`: a detector's outputs, in any common format, as labelled boxes (keypoints,
masks) in each frame's own pixels.

On the device, per chunk: decode the format, keep the `pre_nms_topk` best candidates of each
frame, filter by confidence (per-class thresholds, the `classes` allow-list), class-aware NMS
where the format has none, map back through the layout that placed each frame, drop boxes left
empty by clipping or under `min_box_size`, keep each frame's `max_detections` best; then one
transfer per dtype.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from handler.clip import FrameResult
from handler.config import TORCHVISION_LETTERBOX, DetectionFormat, HandlerConfig
from handler.errors import ConfigError
from handler.layout import Layout, Placement
from handler.outputs import NON_FINITE, Gathered, pack
from handler.tasks import rle
from handler.tasks.head import Upload, describe, first_tensor, forward
from handler.tasks.labels import Labels, check_ids
from handler.tasks.masks import mask_changes, prototypes
from handler.tasks.nms import per_frame_nms

logger = logging.getLogger(__name__)

_EFFICIENT_NMS = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")
_FORMATS = ", ".join(f.value for f in DetectionFormat if f is not DetectionFormat.AUTO)


@dataclass(frozen=True, slots=True)
class Candidates:
    """A chunk's detections before the common steps, flat over its frames.

    Attributes:
        boxes: `Tensor[M, 4]` x1, y1, x2, y2 in the model input's pixels.
        scores: `Tensor[M]`.
        classes: `Tensor[M] int64`.
        frames: `Tensor[M] int64`, the row of each candidate.
        keypoints: `Tensor[M, K, 3]` x, y, score in the model input's pixels, or None.
        masks: `Tensor[M, H, W] bool` masks (above `mask_threshold`) in their frame's pixels, padded to the
            slot (bottom and right), or None.
        coefficients: `Tensor[M, 32]` mask coefficients of a YOLO segment model, or None.
        nms: whether NMS is still to be done (the format's own model did none).
        non_finite: `Tensor[] int64`: rows the decoding already left out for a NaN or infinite
            score (a YOLO anchor), or None.
    """

    boxes: torch.Tensor
    scores: torch.Tensor
    classes: torch.Tensor
    frames: torch.Tensor
    keypoints: torch.Tensor | None = None
    masks: torch.Tensor | None = None
    nms: bool = False
    coefficients: torch.Tensor | None = None
    non_finite: torch.Tensor | None = None

    def take(self, index: torch.Tensor) -> Candidates:
        """The candidates at `index` (every per-row field, by name; the rest as they are)."""
        def pick(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[index]

        return dataclasses.replace(self, boxes=self.boxes[index], scores=self.scores[index],
                                   classes=self.classes[index], frames=self.frames[index],
                                   keypoints=pick(self.keypoints), masks=pick(self.masks),
                                   coefficients=pick(self.coefficients))

    def finite(self) -> torch.Tensor:
        """`Tensor[M] bool`: the rows whose box, score, keypoints and mask coefficients are all finite."""
        ok = torch.isfinite(self.scores) & torch.isfinite(self.boxes).all(dim=1)
        for extra in (self.keypoints, self.coefficients):
            if extra is not None:
                ok &= torch.isfinite(extra.flatten(1)).all(dim=1)
        return ok

    def moved(self, boxes: torch.Tensor, keypoints: torch.Tensor | None) -> Candidates:
        """The same candidates with boxes and keypoints elsewhere (in the frames' pixels)."""
        return dataclasses.replace(self, boxes=boxes, scores=self.scores.float(), keypoints=keypoints)


def format_of(raw: Any) -> DetectionFormat:
    """The detector format that outputs of this shape and type are (`format: auto`).

    Raises:
        ConfigError: the outputs are none of the formats, showing what they were.
    """
    if _torchvision_detections(raw) is not None:
        return DetectionFormat.TORCHVISION
    if isinstance(raw, Mapping) and "detection_boxes" in raw:
        return DetectionFormat.EFFICIENT_NMS
    tensors = [raw] if isinstance(raw, torch.Tensor) else list(raw.values() if isinstance(raw, Mapping) else raw) \
        if isinstance(raw, (Mapping, list, tuple)) else []
    if len(tensors) == 4 and all(isinstance(t, torch.Tensor) for t in tensors) and tensors[0].dim() <= 2 \
            and tensors[1].dim() == 3 and tensors[1].shape[-1] == 4:
        return DetectionFormat.EFFICIENT_NMS
    first = tensors[0] if tensors and isinstance(tensors[0], torch.Tensor) else None
    if first is not None and first.dim() == 3:
        if first.shape[1] < first.shape[2] and first.shape[1] > 4:
            return DetectionFormat.YOLO
        if first.shape[2] >= 6:
            return DetectionFormat.END2END
    raise ConfigError(f"handler.format = auto: the model's outputs {describe(raw)} are no detector format "
                      f"this handler knows; set handler.format ({_FORMATS}) or handler.task")


class DetectionHead:
    """Turns a detector's outputs into `detections` per frame."""

    def __init__(self, config: HandlerConfig, labels: Labels, metadata: Mapping[str, Any] | None = None) -> None:
        self._config = config
        self._labels = labels
        self.format = config.format
        metadata = metadata or {}
        names = metadata.get("names")
        self._num_classes = config.num_classes or (len(names) if isinstance(names, (dict, list)) and names else None)
        kpt = metadata.get("kpt_shape")
        self._keypoint_dims = int(kpt[1]) if isinstance(kpt, list) and len(kpt) == 2 else 3
        self._thresholds = [(i, t) for key, t in config.class_thresholds or ()
                            for i in labels.ids([key], "class_thresholds")]
        self._allowed = None if config.classes is None else labels.ids(list(config.classes), "classes")
        self._lowest_threshold = min([config.score_threshold, *(t for _, t in self._thresholds)])
        self._checked = False  # the ids of `classes` and `class_thresholds` against the model's classes
        self._by_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor | None]] = {}

    def call(self, model: Callable[..., Any], x: torch.Tensor, placement: Placement,
             sizes: torch.Tensor | None) -> Any:
        if self.format is DetectionFormat.AUTO:  # a pipeline that was not `check`ed
            return self.settle(model, x, placement, sizes)
        if self.format is DetectionFormat.TORCHVISION:
            return _torchvision_call(model, x, placement)
        return forward(model, x, sizes)

    def settle(self, model: Callable[..., Any], x: torch.Tensor, placement: Placement,
               sizes: torch.Tensor | None) -> Any:
        """Calls the model on the dummy chunk at `initialize` and fixes `format: auto` from what
        it returns (a torchvision detector, which takes a list of frames, is then called so).

        Raises:
            ConfigError: the outputs fit no format, or not the one configured.
        """
        if self.format is not DetectionFormat.AUTO:
            return self.call(model, x, placement, sizes)
        refused: Exception | None = None
        try:
            raw = forward(model, x, sizes)
        except Exception as err:  # a scripted torchvision detector refuses a batched tensor
            refused, raw = err, None
        if raw is None or _torchvision_detections(raw) is not None:
            self.format = DetectionFormat.TORCHVISION  # called again as it wants: each frame alone
            try:
                raw = self.call(model, x, placement, sizes)
            except Exception:
                if refused is not None:  # neither a batch nor a list of frames: the first error says why
                    raise refused from None
                raise
        self.format = format_of(raw)
        if self.format is DetectionFormat.TORCHVISION and self._config.letterboxed:
            raise ConfigError(TORCHVISION_LETTERBOX)
        logger.info("detector format: %s (format: auto; outputs %s)", self.format.value, describe(raw))
        return raw

    def gather(self, raw: Any, placement: Placement, frames: int, upload: Upload) -> Gathered:
        protos = prototypes(raw) if self.format in (DetectionFormat.YOLO, DetectionFormat.END2END) else None
        try:
            found = self._decode(raw, frames, placement.slot, protos)
        except ConfigError:  # a setting that the model's outputs show to be wrong, named
            raise
        except (ValueError, TypeError, IndexError, KeyError, RuntimeError) as err:
            raise ConfigError(f"handler.format = {self.format.value}: the model's outputs {describe(raw)} do "
                              f"not fit it ({err}); set handler.format ({_FORMATS}) or format: auto") from err
        finite = found.finite()
        dropped = (~finite).sum()
        if found.non_finite is not None:
            dropped = dropped + found.non_finite
        found = found.take(self._confident(found, finite))
        if found.nms:
            groups = torch.zeros_like(found.classes) if self._config.class_agnostic else found.classes
            found = found.take(per_frame_nms(found.boxes, found.scores, groups, found.frames, frames,
                                             self._config.iou_threshold))
        geometry = upload(placement.to_frame())[found.frames]  # [M, 6]: left, top, scale, w, h
        found, counts = self._capped(self._to_frames(found, geometry), frames)
        tensors = {"boxes": found.boxes, "scores": found.scores, "classes": found.classes.long(), "counts": counts,
                   NON_FINITE: dropped.reshape(1).long()}
        if found.keypoints is not None:
            tensors["keypoints"] = found.keypoints
        if found.masks is not None:
            tensors["masks"] = found.masks
        if found.coefficients is not None and protos is not None:
            tensors["mask_changes"], tensors["mask_counts"] = mask_changes(
                found.coefficients, found.frames, found.boxes, protos[:frames], placement)
        return pack(tensors)

    def per_frame(self, outputs: list[tuple[str, torch.Tensor]], placement: Placement,
                  layout: Layout) -> list[FrameResult]:
        got = dict(outputs)
        dropped = int(got[NON_FINITE][0])
        if dropped:
            logger.warning("a chunk of %d frames: %d detections dropped, their box, score or keypoints NaN or "
                           "infinite (the model's outputs; video_non_finite_dropped_total)", len(placement.original),
                           dropped)
        counts = got["counts"].tolist()
        boxes = got["boxes"].tolist()
        scores = got["scores"].tolist()
        classes = got["classes"].tolist()
        keypoints = got["keypoints"].tolist() if "keypoints" in got else None
        masks = got.get("masks")
        extras = {"keypoints": list(got["keypoints"].shape[1:])} if "keypoints" in got else {}
        if masks is not None or "mask_counts" in got:
            extras["mask"] = []
        mixed = None
        if "mask_counts" in got:
            sizes = [size for size, count in zip(placement.original, counts) for _ in range(count)]
            mixed = rle.from_changes(got["mask_changes"].numpy(), got["mask_counts"].numpy(), sizes)
        results, start = [], 0
        for (h, w), count in zip(placement.original, counts):
            detections = []
            for j in range(start, start + count):
                detection: dict[str, Any] = {"box": [round(v, 2) for v in boxes[j]], "score": round(scores[j], 5),
                                             "class_id": classes[j], "label": self._labels.name(classes[j])}
                if keypoints is not None:
                    detection["keypoints"] = [[round(x, 2), round(y, 2), round(s, 5)] for x, y, s in keypoints[j]]
                if masks is not None:
                    detection["mask"] = rle.encode(masks[j, :h, :w].numpy())
                if mixed is not None:
                    detection["mask"] = mixed[j]
                detections.append(detection)
            start += count
            results.append(FrameResult(w, h, answer={"detections": detections}, extras=extras))
        return results

    def _decode(self, raw: Any, frames: int, placement_slot: tuple[int, int],
                protos: torch.Tensor | None) -> Candidates:
        coefficients = 0 if protos is None else protos.shape[1]
        if self.format is DetectionFormat.YOLO:
            return self._yolo(first_tensor(raw)[:frames], coefficients)
        if self.format is DetectionFormat.END2END:
            return _end2end(first_tensor(raw)[:frames], coefficients)
        if self.format is DetectionFormat.EFFICIENT_NMS:
            return _efficient_nms(raw, frames)
        if self.format is DetectionFormat.TORCHVISION:
            detections = _torchvision_detections(raw)
            if detections is None:
                raise TypeError("a torchvision detector returns a list of dicts with boxes, labels, scores")
            return _torchvision(detections[:frames], placement_slot, self._config.mask_threshold)
        raise AssertionError("format: auto is settled by the first call")

    def _yolo(self, pred: torch.Tensor, coefficients: int) -> Candidates:
        """`[n, 4 + nc + extra, A]`: centre x, y, w, h, class scores, then keypoints or (with
        prototypes) mask coefficients. Only anchors above the lowest threshold are read further,
        at most `pre_nms_topk` a frame (the best)."""
        n, channels, _ = pred.shape
        classes = self._num_classes or channels - 4 - coefficients
        extra = channels - 4 - classes
        if not self._checked and classes >= 1:
            check_ids(self._allowed or (), classes, "classes")
            check_ids([i for i, _ in self._thresholds], classes, "class_thresholds")
            self._checked = True
        if classes < 1 or extra < 0 or (extra and not coefficients and extra % self._keypoint_dims) \
                or (coefficients and extra != coefficients):
            raise ValueError(f"{channels} rows are not 4 + {classes} classes (+ keypoints or {coefficients} "
                             "mask coefficients); set handler.num_classes")
        best, label = pred[:, 4:4 + classes].max(dim=1)  # [n, A]; a NaN class score makes it NaN
        finite = torch.isfinite(best)
        frames, anchors = ((best > self._lowest_threshold) & finite).nonzero(as_tuple=True)
        scores = best[frames, anchors]
        top, _ = _best_per_frame(scores, frames, n, self._config.pre_nms_topk)
        frames, anchors, scores = frames[top], anchors[top], scores[top]
        rows = pred.transpose(1, 2)[frames, anchors]  # [M, C]
        xy, wh = rows[:, :2], rows[:, 2:4] / 2
        tail = rows[:, 4 + classes:]
        keypoints = _keypoints(tail[:, None], self._keypoint_dims)[:, 0] if extra and not coefficients else None
        return Candidates(torch.cat((xy - wh, xy + wh), dim=1), scores, label[frames, anchors], frames, keypoints,
                          nms=True, coefficients=tail if coefficients else None, non_finite=(~finite).sum())

    def _confident(self, found: Candidates, finite: torch.Tensor) -> torch.Tensor:
        """Indexes of the `finite` candidates above their class's threshold and in the allow-list."""
        thresholds, allowed = self._tables(found.scores.device)
        index = found.classes.clamp(0, len(thresholds) - 1)
        index = torch.where(found.classes == index, index, len(thresholds) - 1)  # past the table: the default
        keep = (found.scores > thresholds[index]) & finite
        if allowed is not None:
            keep &= allowed[index]
        return keep.nonzero().squeeze(1)

    def _tables(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per class id, made once per device: its score threshold and whether it is allowed; the
        last entry stands for every class past the configured ones (the default threshold, not
        allowed)."""
        found = self._by_device.get(device)
        if found is None:
            size = max([*(i for i, _ in self._thresholds), *(self._allowed or ()), -1]) + 2
            thresholds = torch.full((size,), self._config.score_threshold)
            for class_id, value in self._thresholds:
                thresholds[class_id] = value
            allowed = None
            if self._allowed is not None:
                allowed = torch.zeros(size, dtype=torch.bool)
                allowed[self._allowed] = True
            found = self._by_device[device] = (thresholds.to(device), None if allowed is None else allowed.to(device))
        return found

    def _to_frames(self, found: Candidates, geometry: torch.Tensor) -> Candidates:
        """Boxes and keypoints in each frame's pixels, clipped to it; boxes left empty or smaller
        than `min_box_size` dropped."""
        xs, ys = Placement.points_back(found.boxes[:, 0::2], found.boxes[:, 1::2], geometry)
        boxes = torch.stack((xs[:, 0], ys[:, 0], xs[:, 1], ys[:, 1]), dim=1)
        keypoints = found.keypoints
        if keypoints is not None:
            kx, ky = Placement.points_back(keypoints[..., 0], keypoints[..., 1], geometry)
            keypoints = torch.stack((kx, ky, keypoints[..., 2].float()), dim=-1)
        size = min(self._config.min_box_size, 1e9)
        w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
        keep = ((w > 0) & (h > 0) & (w >= size) & (h >= size)).nonzero().squeeze(1)
        return found.moved(boxes, keypoints).take(keep)

    def _capped(self, found: Candidates, frames: int) -> tuple[Candidates, torch.Tensor]:
        """Each frame's `max_detections` best, grouped by frame and sorted by score, and how many
        each frame has."""
        kept, counts = _best_per_frame(found.scores, found.frames, frames, self._config.max_detections)
        return found.take(kept), counts


def _best_per_frame(scores: torch.Tensor, frames: torch.Tensor, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indexes of each frame's `k` best scores, grouped by frame and best first, and how many
    each of the `n` frames keeps; no host sync but the one that sizes the result."""
    by_score = torch.argsort(scores, descending=True, stable=True)
    order = by_score[torch.argsort(frames[by_score], stable=True)]
    counts = torch.bincount(frames, minlength=n)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(len(order), device=scores.device) - starts[frames[order]]
    return order[(rank < k).nonzero().squeeze(1)], counts.clamp(max=k)


def _flat(boxes: torch.Tensor, scores: torch.Tensor, classes: torch.Tensor, keypoints: torch.Tensor | None,
          nms: bool, valid: torch.Tensor | None = None, coefficients: torch.Tensor | None = None) -> Candidates:
    """`[n, K, ...]` per-frame candidates as flat ones (with `valid`: only those)."""
    n, k = scores.shape
    frames = torch.arange(n, device=scores.device)[:, None].expand(n, k)
    found = Candidates(boxes.reshape(-1, 4), scores.reshape(-1), classes.reshape(-1).long(), frames.reshape(-1),
                       None if keypoints is None else keypoints.reshape(n * k, *keypoints.shape[2:]), nms=nms,
                       coefficients=None if coefficients is None else coefficients.reshape(n * k, -1))
    return found if valid is None else found.take(valid.reshape(-1).nonzero().squeeze(1))


def _keypoints(rows: torch.Tensor, dims: int) -> torch.Tensor:
    """`[n, K, P * dims]` -> `[n, K, P, 3]` x, y, score (1.0 when the model gives none)."""
    n, k, _ = rows.shape
    points = rows.reshape(n, k, rows.shape[-1] // dims, dims)
    if dims == 2:
        points = torch.cat((points, torch.ones_like(points[..., :1])), dim=-1)
    return points[..., :3]


def _end2end(pred: torch.Tensor, coefficients: int) -> Candidates:
    """`[n, K, 6 + extra]`: x1, y1, x2, y2, score, class, then keypoints (x, y, score) or (with
    prototypes) mask coefficients."""
    extra = pred.shape[-1] - 6
    if extra < 0 or (coefficients and extra != coefficients) or (not coefficients and extra % 3):
        raise ValueError(f"rows of {pred.shape[-1]} values are not 6 (+ 3 per keypoint or {coefficients} mask "
                         "coefficients)")
    keypoints = _keypoints(pred[..., 6:], 3) if extra and not coefficients else None
    return _flat(pred[..., :4], pred[..., 4], pred[..., 5], keypoints, nms=False,
                 coefficients=pred[..., 6:] if coefficients else None)


def _efficient_nms(raw: Any, frames: int) -> Candidates:
    """TensorRT EfficientNMS: `num_detections [N, 1]`, boxes `[N, K, 4]`, scores, classes `[N, K]`."""
    if isinstance(raw, Mapping):
        missing = [name for name in _EFFICIENT_NMS if name not in raw]
        if missing:
            raise KeyError(f"outputs {missing} missing")
        raw = [raw[name] for name in _EFFICIENT_NMS]
    count, boxes, scores, classes = (t[:frames] for t in raw)
    k = scores.shape[1]
    valid = torch.arange(k, device=scores.device)[None, :] < count.reshape(-1, 1)
    return _flat(boxes, scores, classes, None, nms=False, valid=valid)


def _torchvision_call(model: Callable[..., Any], x: torch.Tensor, placement: Placement) -> list[Any]:
    """A torchvision detector on each frame at its own size (its transform resizes and pads each
    list it gets to one size, and that padding and the anchors laid over it change a frame's
    answer): frames of one size are called together, others apart; answers in frame order."""
    by_size: dict[tuple[int, int], list[int]] = {}
    for i, size in enumerate(placement.sizes):
        by_size.setdefault(size, []).append(i)
    answers: list[Any] = [None] * len(placement.sizes)
    for (h, w), rows in by_size.items():
        detections = _torchvision_detections(model([x[i, :, :h, :w] for i in rows]))
        if detections is None:
            raise TypeError("a torchvision detector returns a list of dicts with boxes, labels, scores")
        for i, found in zip(rows, detections):
            answers[i] = found
    return answers


def _torchvision_detections(raw: Any) -> list[Mapping[str, torch.Tensor]] | None:
    """The per-frame dicts of a torchvision detector (eager: a list; scripted: `(losses, list)`)."""
    if isinstance(raw, tuple) and len(raw) == 2 and isinstance(raw[0], Mapping):
        raw = raw[1]
    if isinstance(raw, list) and all(isinstance(d, Mapping) and "boxes" in d for d in raw):
        return raw
    return None


def _torchvision(detections: Sequence[Mapping[str, torch.Tensor]], slot: tuple[int, int],
                 mask_threshold: float) -> Candidates:
    """Boxes (xyxy, the frame's pixels), labels, scores; optional masks `[k, 1, h, w]` (above
    `mask_threshold`, as bool before they are padded to the slot: a float mask padded first was
    about 830 MB a 1080p frame at 100 detections) and keypoints `[k, P, 3]` (scored by
    `keypoints_scores` where given)."""
    device = detections[0]["boxes"].device
    counts = torch.tensor([len(d["boxes"]) for d in detections], device=device)
    frames = torch.repeat_interleave(torch.arange(len(detections), device=device), counts)
    keypoints = None
    if all("keypoints" in d for d in detections):
        points = []
        for d in detections:
            p = d["keypoints"].float()
            if "keypoints_scores" in d:
                p = torch.cat((p[..., :2], d["keypoints_scores"][..., None].float()), dim=-1)
            points.append(p)
        keypoints = torch.cat(points)
    masks = None
    if all("masks" in d for d in detections):  # [k, 1, h, w] at each frame's size: padded to the slot
        masks = torch.cat([F.pad((d["masks"].reshape(-1, *d["masks"].shape[-2:]) > mask_threshold).to(torch.uint8),
                                 (0, slot[1] - d["masks"].shape[-1], 0, slot[0] - d["masks"].shape[-2]))
                           for d in detections]).bool()
    return Candidates(torch.cat([d["boxes"] for d in detections]), torch.cat([d["scores"] for d in detections]),
                      torch.cat([d["labels"] for d in detections]).long(), frames, keypoints, masks)
