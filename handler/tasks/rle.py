"""COCO's compressed run-length encoding of binary masks (what `pycocotools.mask.encode` writes),
so an answer carries a mask in a few hundred bytes instead of one number per pixel."""

from __future__ import annotations

import numpy as np


def encode(mask: np.ndarray) -> dict[str, object]:
    """`{"size": [h, w], "counts": str}` for a mask, as `pycocotools.mask.encode` gives it.

    Args:
        mask: `[h, w]` bool (or 0/1) array.

    Returns:
        COCO RLE: runs over the pixels in column-major order, starting with a run of zeros,
        written in COCO's 6-bit variable-length text code (decodable by `pycocotools.mask.decode`
        after `counts` is encoded to bytes).
    """
    h, w = mask.shape
    flat = np.asarray(mask, dtype=bool).ravel(order="F")
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    edges = np.concatenate(([0], changes, [flat.size]))
    runs = np.diff(edges).tolist()
    if flat.size and flat[0]:
        runs.insert(0, 0)
    return {"size": [h, w], "counts": _text(runs)}


def encode_window(bits: np.ndarray, window: list[int], size: tuple[int, int]) -> dict[str, object]:
    """`encode` of a `size` (h, w) mask that is zero outside `window` (x0, y0, x1, y1), from the
    window's bits alone: its columns at the frame's height (the runs of a column-major mask cross
    columns), the columns before and after it as the first and last zero runs. No frame-sized
    buffer: a box 100 pixels wide in a 1080p frame is 108,000 values, not 2 million.

    Args:
        bits: `[y1 - y0, x1 - x0]` bool, the mask inside the window.
        window: x0, y0, x1, y1 within the frame.
        size: the frame's (h, w).
    """
    h, w = size
    x0, y0, x1, y1 = window
    columns = np.zeros((max(0, x1 - x0), h), dtype=bool)  # column-major: each window column, whole height
    columns[:, y0:y1] = np.asarray(bits, dtype=bool).reshape(max(0, y1 - y0), max(0, x1 - x0)).T
    flat = columns.ravel()
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    runs = np.diff(np.concatenate(([0], changes, [flat.size]))).tolist() if flat.size else []
    if flat.size and flat[0]:
        runs.insert(0, 0)
    before, after = x0 * h, (w - x1) * h
    if not runs:
        runs = [before + after]
    else:
        runs[0] += before
        if flat[-1]:
            runs.append(after)
        else:
            runs[-1] += after
    if len(runs) > 1 and runs[-1] == 0:
        runs.pop()
    return {"size": [h, w], "counts": _text(runs)}


def decode(rle: dict[str, object]) -> np.ndarray:
    """The `[h, w]` bool mask of a COCO compressed RLE (the inverse of `encode`)."""
    size = rle["size"]
    if not isinstance(size, list) or len(size) != 2:
        raise ValueError(f"an RLE's size is [h, w], not {size!r}")
    h, w = int(size[0]), int(size[1])
    runs = _runs(str(rle["counts"]))
    flat = np.zeros(h * w, dtype=np.bool_)
    position, value = 0, False
    for run in runs:
        if value:
            flat[position:position + run] = True
        position += run
        value = not value
    mask: np.ndarray = flat.reshape((w, h)).T
    return mask


def _text(runs: list[int]) -> str:
    """COCO's code: each run (from the third on, as the difference to the run two before) in
    5-bit groups, low first, each group + 48 with bit 5 set when more follow."""
    out = []
    for i, run in enumerate(runs):
        x = run - runs[i - 2] if i > 2 else run
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = (x != -1) if c & 0x10 else (x != 0)
            if more:
                c |= 0x20
            out.append(chr(c + 48))
    return "".join(out)


def _runs(text: str) -> list[int]:
    runs: list[int] = []
    p = 0
    while p < len(text):
        x, k, more = 0, 0, True
        while more:
            c = ord(text[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(runs) > 2:
            x += runs[-2]
        runs.append(x)
    return runs
