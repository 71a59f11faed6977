"""COCO's compressed run-length encoding of binary masks (what `pycocotools.mask.encode` writes),
so an answer carries a mask in a few hundred bytes instead of one number per pixel. Written for
many masks at once: from the pixels where each mask changes value, in array operations over all
of them, with no loop per mask or per run."""

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
    flat = np.asarray(mask, dtype=bool).ravel(order="F")
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    if flat.size and flat[0]:
        changes = np.concatenate(([0], changes))
    return from_changes(changes, np.array([changes.size]), [mask.shape])[0]


def from_changes(changes: np.ndarray, counts: np.ndarray, sizes: object) -> list[dict[str, object]]:
    """The COCO RLE of each of M masks, from the pixels where it changes value.

    Args:
        changes: `[K] int64`, mask after mask, the column-major indices (`x * h + y`) of the
            pixels where a mask changes value, from 0 before its first pixel, ascending within a
            mask. Equal indices cancel in pairs (a run of no pixels); indices of `h * w` and past
            it (a change after the last pixel) are ignored.
        counts: `[M]`, how many of `changes` each mask has.
        sizes: `[M, 2]` each mask's (h, w).
    """
    m = len(counts)
    size = np.asarray(sizes, dtype=np.int64).reshape(m, 2)
    at, counts = _cancelled(np.asarray(changes, dtype=np.int64), np.asarray(counts, dtype=np.int64), size)
    ends = np.cumsum(counts + 2)  # each mask's edges: 0, its changes, h * w
    firsts = ends - counts - 2
    edges = np.empty(int(ends[-1]) if m else 0, dtype=np.int64)
    inner = np.ones(edges.size, dtype=bool)
    inner[firsts], inner[ends - 1] = False, False
    edges[firsts], edges[ends - 1], edges[inner] = 0, size[:, 0] * size[:, 1], at
    runs = np.delete(np.diff(edges), ends[:-1] - 1)  # the differences within a mask
    per_mask = counts + 1
    texts = _text(runs, per_mask)
    return [{"size": [int(h), int(w)], "counts": text} for (h, w), text in zip(size.tolist(), texts)]


def _cancelled(changes: np.ndarray, counts: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The real changes (those inside their mask, equal neighbours cancelled in pairs) and how
    many each mask keeps."""
    area = size[:, 0] * size[:, 1]
    ends = np.cumsum(counts)
    filled = counts > 0
    if changes.size and (changes[ends[filled] - 1] >= area[filled]).any():  # ascending: the tail may be past
        owner = np.repeat(np.arange(len(counts)), counts)
        inside = changes < area[owner]
        changes, counts = changes[inside], np.bincount(owner[inside], minlength=len(counts))
        ends = np.cumsum(counts)
    pairs = np.flatnonzero(changes[1:] == changes[:-1])  # changes i and i + 1 are equal ...
    pairs = pairs[~np.isin(pairs + 1, ends - counts)]  # ... within one mask
    if not pairs.size:
        return changes, counts
    # m pairs in a row are m + 1 equal changes: an even number cancel, an odd number leave one.
    first = np.ones(pairs.size, dtype=bool)
    first[1:] = pairs[1:] != pairs[:-1] + 1
    run = np.diff(np.append(np.flatnonzero(first), pairs.size)) + 1  # equal changes in each run
    kept = run % 2
    start, length = pairs[first] + kept, run - kept  # what each run drops
    drop = np.repeat(start - np.cumsum(length) + length, length) + np.arange(length.sum())
    return np.delete(changes, drop), counts - np.bincount(np.searchsorted(ends, drop, side="right"),
                                                          minlength=len(counts))


def _text(runs: np.ndarray, per_mask: np.ndarray) -> list[str]:
    """COCO's code of each mask's runs: each run (from the third on, as the difference to the
    run two before) in 5-bit groups, low first, each group + 48 with bit 5 set when more follow;
    as few groups as hold the value in two's complement."""
    firsts = np.cumsum(per_mask) - per_mask
    early = np.zeros(runs.size, dtype=bool)  # a mask's first three runs are written as they are
    for k in range(3):
        early[(firsts + k)[per_mask > k]] = True
    values = runs.copy()
    values[2:] -= np.where(early[2:], 0, runs[:-2])
    magnitude = np.where(values < 0, ~values, values)
    # g groups (5g bits) hold [-2**(5g-1), 2**(5g-1)): g = (bit length + 5) // 5 (frexp's exponent
    # is the bit length, exactly, below 2**53).
    groups = (np.frexp(magnitude)[1] + 5) // 5
    starts = np.cumsum(groups) - groups
    chars = np.empty(int(groups.sum()), dtype=np.uint8)
    chars[starts] = (values & 0x1F) + np.where(groups > 1, 0x20 + 48, 48)
    for level in range(1, int(groups.max()) if groups.size else 0):  # the runs of more groups, fewer each level
        rows = np.flatnonzero(groups > level)
        code = (values[rows] >> 5 * level) & 0x1F
        chars[starts[rows] + level] = code + np.where(groups[rows] > level + 1, 0x20 + 48, 48)
    text = chars.tobytes().decode("ascii")
    lengths = np.add.reduceat(groups, firsts) if runs.size else np.zeros(0, dtype=np.int64)
    bounds = np.concatenate(([0], np.cumsum(lengths))).tolist()
    return [text[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


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
