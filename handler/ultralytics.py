"""What an Ultralytics export's own metadata says about serving it the way its `predict` does.

An export (ONNX `metadata_props`, TorchScript `config.txt`) carries `task`, `imgsz` and `stride`.
`predict` on one frame letterboxes it: resized into `imgsz` keeping its aspect (OpenCV's
`INTER_LINEAR`), centred, grey (114) borders, pixels / 255; a fixed export gets the full `imgsz`,
a dynamic one (symbolic batch, and so symbolic sides) only a border up to a multiple of `stride`
(its `auto` minimum rectangle: a 1920x1080 frame is seen at 640x384, not 1920x1088). The boxes come
back through its `scale_boxes`. `defaults` writes that down as the handler's settings, under
whatever the `handler:` section already says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Ultralytics tasks whose raw head the `detection` task reads.
_DETECTORS = frozenset({"detect", "segment", "pose"})


def defaults(handler: Mapping[str, Any] | None, metadata: Mapping[str, Any] | None, fixed: bool,
             dynamic: bool) -> dict[str, Any]:
    """The `handler:` section with `predict`'s settings added where it leaves them out.

    Args:
        handler: the archive's `handler:` section.
        metadata: the model file's own (`task`, `imgsz`, `stride`); nothing is added unless it is
            an Ultralytics detector's.
        fixed: the model's input has fixed sides (a graph's declared input decides the letterbox).
        dynamic: the model takes any batch and any size (`predict`'s minimum rectangle).
    """
    values = dict(handler or {})
    meta = metadata or {}
    imgsz, stride = _pair(meta.get("imgsz")), _stride(meta.get("stride"))
    if meta.get("task") not in _DETECTORS or imgsz is None or stride is None:
        return values
    for key, value in (("task", "detection"), ("normalize", {"scale": 1 / 255}), ("letterbox_pad", "center"),
                       ("pad_value", 114), ("resize_antialias", False)):
        values.setdefault(key, value)
    if not fixed:
        values.setdefault("resize", "rect" if dynamic else "letterbox")
        if values["resize"] in ("letterbox", "rect"):
            values.setdefault("input_size", list(imgsz))
        if values["resize"] == "rect":
            values.setdefault("size_divisor", stride)
    return values


def _pair(value: Any) -> tuple[int, int] | None:
    """`imgsz` as (height, width): Ultralytics writes `[640, 640]` (or one number for both)."""
    sides = [value, value] if isinstance(value, int) else value
    if isinstance(sides, (list, tuple)) and len(sides) == 2 and all(isinstance(v, int) and v > 0 for v in sides):
        return int(sides[0]), int(sides[1])
    return None


def _stride(value: Any) -> int | None:
    """The largest stride (`32`, `32.0` or a list of them)."""
    strides = value if isinstance(value, (list, tuple)) else [value]
    numbers = [int(s) for s in strides if isinstance(s, (int, float)) and not isinstance(s, bool) and s >= 1]
    return max(numbers) if numbers else None
