"""The detection head's hot paths, each against the code it replaced, in this process (CPU here;
`python -m bench.models --hot-paths`, about a minute):

1. NMS over a chunk of 16 frames x 5,000 candidates (a detector at `score_threshold: 0.1`, 80
   classes, boxes overlapping as a detector's do): one NMS over the whole chunk, frames and
   classes apart by offsets (the code before), against NMS frame by frame (`per_frame_nms`),
   against one frame's NMS times 16 (the target: at most 1.3 times that).
2. YOLO-seg masks of one 1080p frame at 10 and 300 detections (random prototypes and
   coefficients, boxes 40-190 px): before, per detection the whole prototype map mixed and the
   window sampled by grid_sample, then the COCO RLE from a frame-sized buffer, its text written
   run by run; now every detection at once, the cells under the windows mixed and each column's
   zero crossings found (`masks.mask_changes`), the RLE of all of them in array operations
   (`rle.from_changes`); the target: under 30 ms at 300, 3 ms at 10, where the code before
   took 750 and 25 ms; judged as the same fraction of the code before in this run (0.04 x and
   0.12 x: this machine's speed varies by 2 x from one minute to the next), with the absolute
   verdict beside it. The answers are compared: a pixel may differ only where its logit is
   within float rounding of 0.

Medians of `repeats` runs; the machine may be shared: compare rows of one run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from handler.layout import layout_for
from handler.tasks import rle
from handler.tasks.masks import mask_changes
from handler.tasks.nms import batched_nms, per_frame_nms

FRAMES, CANDIDATES, CLASSES = 16, 5000, 80
NMS_RATIO = 1.3
MASK_TARGET_MS = {10: 3.0, 300: 30.0}
ISSUE_BEFORE_MS = {10: 25.0, 300: 750.0}  # the code before, as issue 28 measured it: 2.5 ms a 1080p mask


@dataclass(frozen=True, slots=True)
class HotRow:
    part: str
    case: str
    ms: float


def _median_ms(run: Callable[[], Any], repeats: int) -> float:
    run()  # warm
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return round(1000 * statistics.median(times), 2)


def _candidates(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """16 frames x 5,000 boxes around 300 objects a frame (a detector's clusters), scores, classes, frames."""
    g = torch.Generator().manual_seed(seed)
    objects = torch.rand(FRAMES, 300, 4, generator=g) * torch.tensor([1800.0, 1000.0, 120.0, 120.0]) + 20
    pick = torch.randint(0, 300, (FRAMES, CANDIDATES), generator=g)
    base = torch.gather(objects, 1, pick[..., None].expand(-1, -1, 4))
    jitter = torch.randn(FRAMES, CANDIDATES, 4, generator=g) * 6
    x, y, w, h = (base + jitter).unbind(-1)
    boxes = torch.stack([x, y, x + w.abs() + 4, y + h.abs() + 4], dim=-1).reshape(-1, 4)
    scores = torch.rand(FRAMES * CANDIDATES, generator=g) * 0.9 + 0.1
    classes = (pick % CLASSES).reshape(-1)
    frames = torch.arange(FRAMES).repeat_interleave(CANDIDATES)
    return boxes, scores, classes, frames


def nms_rows(repeats: int = 3) -> list[HotRow]:
    boxes, scores, classes, frames = _candidates()
    one = slice(0, CANDIDATES)
    return [
        HotRow("NMS", f"{FRAMES} x {CANDIDATES}: one NMS over the chunk (before)",
               _median_ms(lambda: batched_nms(boxes, scores, frames * 2**20 + classes, 0.7), repeats)),
        HotRow("NMS", f"{FRAMES} x {CANDIDATES}: frame by frame (now)",
               _median_ms(lambda: per_frame_nms(boxes, scores, classes, frames, FRAMES, 0.7), repeats)),
        HotRow("NMS", f"one frame of {CANDIDATES}, x {FRAMES}",
               round(FRAMES * _median_ms(lambda: batched_nms(boxes[one], scores[one], classes[one], 0.7), repeats), 2)),
    ]


def _old_window_bits(coefficients: torch.Tensor, frames: torch.Tensor, boxes: torch.Tensor, protos: torch.Tensor,
                     placement: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The code before (handler/tasks/masks.py): per detection, the whole prototype map mixed, the
    frame's area cut, the window sampled by grid_sample."""
    import torch.nn.functional as F

    from handler.tasks.masks import windows

    spans = windows(boxes)
    bits = []
    stride = placement.slot[0] / protos.shape[2]
    for i, (frame, window) in enumerate(zip(frames.tolist(), spans.tolist())):
        top, bottom, left, right = placement.area(frame, stride, cover=False)
        logits = (coefficients[i].float() @ protos[frame].float().flatten(1)).view(protos.shape[2:])[top:bottom, left:right]
        x0, y0, x1, y1 = window
        (ph, pw), (h, w) = logits.shape, placement.original[frame]
        ys = ((torch.arange(y0, y1) + 0.5) * (ph / h) - 0.5).clamp(min=0)
        xs = ((torch.arange(x0, x1) + 0.5) * (pw / w) - 0.5).clamp(min=0)
        grid = torch.stack(torch.meshgrid((2 * xs + 1) / pw - 1, (2 * ys + 1) / ph - 1, indexing="xy"), dim=-1)[None]
        out = F.grid_sample(logits[None, None], grid, mode="bilinear", padding_mode="border", align_corners=False)
        bits.append((out[0, 0] > 0).reshape(-1))
    return torch.cat(bits), spans


def _old_encode(bits: np.ndarray, window: list[int], size: tuple[int, int]) -> dict[str, object]:
    """The code before: each mask in a frame-sized buffer, encoded whole, its text run by run."""
    x0, y0, x1, y1 = window
    mask = np.zeros(size, dtype=bool)
    mask[y0:y1, x0:x1] = bits.reshape(max(0, y1 - y0), max(0, x1 - x0))
    flat = mask.ravel(order="F")
    runs = np.diff(np.concatenate(([0], np.flatnonzero(flat[1:] != flat[:-1]) + 1, [flat.size]))).tolist()
    if flat[0]:
        runs.insert(0, 0)
    out = []
    for i, run in enumerate(runs):
        x = run - runs[i - 2] if i > 2 else run
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = (x != -1) if c & 0x10 else (x != 0)
            out.append(chr((c | 0x20 if more else c) + 48))
    return {"size": list(size), "counts": "".join(out)}


def _before(coefficients: torch.Tensor, frames: torch.Tensor, boxes: torch.Tensor, protos: torch.Tensor,
            placement: Any) -> list[dict[str, object]]:
    bits, spans = _old_window_bits(coefficients, frames, boxes, protos, placement)
    flat, windows = bits.numpy(), spans.tolist()
    offsets = np.cumsum([0, *((x1 - x0) * (y1 - y0) for x0, y0, x1, y1 in windows)])
    return [_old_encode(flat[a:b], w, placement.original[0]) for a, b, w in zip(offsets[:-1], offsets[1:], windows)]


def _now(coefficients: torch.Tensor, frames: torch.Tensor, boxes: torch.Tensor, protos: torch.Tensor,
         placement: Any) -> list[dict[str, object]]:
    changes, counts = mask_changes(coefficients, frames, boxes, protos, placement)
    return rle.from_changes(changes.numpy(), counts.numpy(), [placement.original[0]] * len(boxes))


def mask_rows(repeats: int = 3) -> list[HotRow]:
    from handler.config import HandlerConfig

    height, width = 1080, 1920
    layout = layout_for(HandlerConfig.from_mapping({"resize": "letterbox", "input_size": [640, 640],
                                                    "letterbox_pad": "center"}))
    placement = layout.place((640, 640), [(height, width)])
    g = torch.Generator().manual_seed(1)
    protos = torch.randn(1, 32, 160, 160, generator=g)
    rows = []
    for count in MASK_TARGET_MS:
        corner = torch.rand(count, 2, generator=g) * torch.tensor([width - 200.0, height - 200.0])
        args = (torch.randn(count, 32, generator=g), torch.zeros(count, dtype=torch.int64),
                torch.cat([corner, corner + 40 + torch.rand(count, 2, generator=g) * 150], dim=1), protos, placement)
        pixels = sum((rle.decode(a) != rle.decode(b)).sum() for a, b in zip(_before(*args), _now(*args)))
        area = sum(int((w[2] - w[0]) * (w[3] - w[1])) for w in args[2].ceil().tolist())
        rows += [HotRow("YOLO-seg masks, 1080p", f"{count} masks: whole-map mix, frame-sized RLE (before)",
                        _median_ms(lambda a=args: _before(*a), repeats)),
                 HotRow("YOLO-seg masks, 1080p", f"{count} masks: crossings of the window columns (now)",
                        _median_ms(lambda a=args: _now(*a), repeats)),
                 HotRow("YOLO-seg masks, 1080p", f"{count} masks: of which on the device (now)",
                        _median_ms(lambda a=args: mask_changes(*a), repeats)),
                 HotRow("YOLO-seg masks, 1080p", f"{count} masks: pixels that differ, of {area:,} in the boxes",
                        float(pixels))]
    return rows


def verdicts(rows: list[HotRow]) -> list[str]:
    by = {r.case: r.ms for r in rows}
    out = []
    chunk = by.get(f"{FRAMES} x {CANDIDATES}: frame by frame (now)")
    alone = by.get(f"one frame of {CANDIDATES}, x {FRAMES}")
    if chunk is not None and alone:
        out.append(f"NMS at {FRAMES} x {CANDIDATES}: {chunk:g} ms, {chunk / alone:.2f} x {FRAMES} frames' own "
                   f"(target <= {NMS_RATIO:g}): {'PASS' if chunk <= NMS_RATIO * alone else 'FAIL'}")
    for count, target in MASK_TARGET_MS.items():
        now = by.get(f"{count} masks: crossings of the window columns (now)")
        before = by.get(f"{count} masks: whole-map mix, frame-sized RLE (before)")
        if now is None or not before:
            continue
        # The issue's targets are times on the machine where the code before took ISSUE_BEFORE_MS:
        # judged in this run as the same fraction of the code before (this machine's speed varies).
        share = target / ISSUE_BEFORE_MS[count]
        out.append(f"YOLO-seg post-processing at {count} masks on a 1080p frame: {now:g} ms, {now / before:.3f} x the "
                   f"code before in this run (target < {target:g} ms where it took {ISSUE_BEFORE_MS[count]:g}: "
                   f"< {share:.3f} x): {'PASS' if now < share * before else 'FAIL'} "
                   f"(against {target:g} ms on this machine as it ran: {'PASS' if now < target else 'FAIL'})")
    return out


def table(rows: list[HotRow]) -> str:
    lines = ["| hot path | case | ms (median) |", "| --- | --- | --- |"]
    lines += [f"| {r.part} | {r.case} | {r.ms:g} |" for r in rows]
    return "\n".join(lines)


def main(repeats: int = 3) -> list[HotRow]:
    torch.set_num_threads(1)
    rows = nms_rows(repeats) + mask_rows(repeats)
    print(table(rows))
    print("\n".join(verdicts(rows)))
    return rows


if __name__ == "__main__":
    main()
