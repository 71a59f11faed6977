"""Instance masks of YOLO segment models: 32 mask coefficients per detection and the chunk's
prototypes `[N, 32, H/4, W/4]`, answered in the frame's own pixels as Ultralytics'
`process_mask_native` (`retina_masks=True`) makes them: the prototypes' mix cropped to the frame's
area (`Placement.area`, `cover=False`), resized bilinearly to the frame (align_corners=False),
kept inside the box, above 0.

No pixel is computed. A mask is zero outside its box's window, and inside it each pixel column
is a piecewise linear function of the row (bilinear interpolation between cell rows), so the
column's runs are bounded by that function's zero crossings, found from the prototype cells
under the window. For every detection of a chunk at once, in tensor operations on the device:
the cells' mix, each window column sampled from its two cell columns, the crossings where
consecutive cell rows change sign. What leaves the device is the pixels where each mask changes
value (`rle.from_changes` writes them as COCO RLE): a few per column, not a bit per pixel.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from handler.layout import Placement


def windows(boxes: torch.Tensor) -> torch.Tensor:
    """`Tensor[M, 4] int64` x0, y0, x1, y1: the pixels a box's mask may set (centres inside it:
    `x0 <= x < x1` with `x0 = ceil(x1_box)`, as Ultralytics' `crop_mask` compares)."""
    return torch.cat((boxes[:, :2].ceil(), boxes[:, 2:].ceil()), dim=1).long()


def mask_changes(coefficients: torch.Tensor, frames: torch.Tensor, boxes: torch.Tensor, protos: torch.Tensor,
                 placement: Placement) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each detection's mask changes value, for `rle.from_changes`.

    Args:
        coefficients: `Tensor[M, 32]`.
        frames: `Tensor[M] int64`, each detection's row in the chunk.
        boxes: `Tensor[M, 4]` in the frame's pixels (clipped to it).
        protos: `Tensor[n, 32, h, w]`, the prototypes at a stride of the slot.
        placement: the chunk's placement (each frame's area in the slot).

    Returns:
        `Tensor[K] int64`, mask after mask, the column-major pixel indices (`x * h + y` in the
        frame) where the mask changes value, and `Tensor[M] int64`, how many each mask has.
    """
    geometry = _geometry(frames, boxes, protos, placement)
    columns = _Columns(geometry)
    logits = _cell_logits(coefficients, frames, protos, geometry)
    values, pairs = _column_values(logits, geometry, columns)
    return _changes(values, pairs, geometry, columns)


class _Geometry:
    """Per detection (each `Tensor[M]`): its frame's area in the prototypes (`top`, `left`, `ah`
    x `aw` cells), the frame's `h` x `w`, the window, its cell rows `r0 .. r0 + rows - 1` and
    columns `c0 .. c0 + cols - 1`, and its `width` in pixel columns (0 when empty)."""

    def __init__(self, table: torch.Tensor, window: torch.Tensor) -> None:
        self.top, bottom, self.left, right, self.h, self.w = table.unbind(1)
        self.ah, self.aw = bottom - self.top, right - self.left
        self.x0, self.y0, self.x1, self.y1 = window.unbind(1)
        empty = (self.x1 <= self.x0) | (self.y1 <= self.y0)
        self.width = torch.where(empty, 0, self.x1 - self.x0)
        self.r0, _ = _sources(self.y0, self.ah, self.h)
        _, last = _sources(self.y1 - 1, self.ah, self.h)
        self.rows = torch.where(empty, 0, last - self.r0 + 1)
        self.c0, _ = _sources(self.x0, self.aw, self.w)
        _, right_cell = _sources(self.x1 - 1, self.aw, self.w)
        self.cols = torch.where(empty, 0, right_cell - self.c0 + 1)


def _geometry(frames: torch.Tensor, boxes: torch.Tensor, protos: torch.Tensor, placement: Placement) -> _Geometry:
    stride = placement.slot[0] / protos.shape[2]
    rows = [(*placement.area(f, stride, cover=False), *placement.original[f]) for f in range(protos.shape[0])]
    table = torch.tensor(rows, dtype=torch.int64).reshape(-1, 6).to(protos.device)
    return _Geometry(_at(table, frames), windows(boxes))


def _sources(pixels: torch.Tensor, cells: torch.Tensor, size: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The two cells output pixels sample (bilinear, align_corners=False, as `F.interpolate`)."""
    low, high, _ = _weights(pixels, cells, size)
    return low, high


def _weights(pixels: torch.Tensor, cells: torch.Tensor,
             size: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For output pixels of a `size` axis resized from `cells`: the two cells read and the
    second one's weight (the source position clamped at 0, as `F.interpolate` clamps it)."""
    scale = (cells / size).float()
    src = ((pixels.float() + 0.5) * scale - 0.5).clamp(min=0)
    low = torch.minimum(src.floor().long(), cells - 1)
    return low, torch.minimum(low + 1, cells - 1), src - low


def _starts(counts: torch.Tensor) -> torch.Tensor:
    """Where each of consecutive runs of `counts` items starts (the exclusive cumulative sum)."""
    return torch.cumsum(counts, 0) - counts


def _spread(counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For `counts[i]` items of each owner i, one after another: each item's owner and its
    index among its owner's items."""
    owner = torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts)
    return owner, torch.arange(owner.numel(), device=counts.device) - _at(_starts(counts), owner)


class _Columns:
    """Every window column of every detection (each `Tensor[C]`): its detection, x, the two
    cell columns it reads (as offsets in the detection's cell block) and the second's weight."""

    def __init__(self, g: _Geometry) -> None:
        self.owner, local = _spread(g.width)
        self.x = _at(g.x0, self.owner) + local
        low, high, self.weight = _weights(self.x, _at(g.aw, self.owner), _at(g.w, self.owner))
        c0 = _at(g.c0, self.owner)
        self.low, self.high = low - c0, high - c0
        self.h, self.y0, self.y1 = _at(g.h, self.owner), _at(g.y0, self.owner), _at(g.y1, self.owner)
        self.rows = _at(g.rows, self.owner)


def _cell_logits(coefficients: torch.Tensor, frames: torch.Tensor, protos: torch.Tensor,
                 g: _Geometry) -> torch.Tensor:
    """The mix of each detection's cell block, row-major block after block: `Tensor[sum rows x cols]`."""
    _, k, ph, pw = protos.shape
    owner, local = _spread(g.rows * g.cols)
    cols = _at(g.cols, owner)
    r = _at(g.top + g.r0, owner) + torch.div(local, cols, rounding_mode="floor")
    c = _at(g.left + g.c0, owner) + local % cols
    # Rows gathered by `embedding` (on CPU a fifth of `index_select`'s time for rows of a small
    # table), from a cell-major copy of the prototypes when the cells are many: each row of the
    # channel-major view is 32 reads a map apart (300 1080p masks: 9 ms, against 1.5 with the copy).
    table = protos.permute(0, 2, 3, 1).reshape(-1, k).float()
    if owner.numel() * 5 > table.shape[0]:
        table = table.contiguous()
    cells = F.embedding((_at(frames, owner) * ph + r) * pw + c, table)  # [cells, 32]
    return torch.einsum("nk,nk->n", cells, F.embedding(owner, coefficients.float()))


def _column_values(logits: torch.Tensor, g: _Geometry, columns: _Columns) -> tuple[torch.Tensor, torch.Tensor]:
    """Each window column's value at each of its cell rows (the two cell columns mixed): one
    `Tensor[P]` column after column, and each value's column."""
    # In int32 (a cell's index is below 2**31): the arithmetic over every pair is memory-bound,
    # and half the bytes is about half the time on CPU.
    i32, device = torch.int32, logits.device
    pairs = torch.repeat_interleave(torch.arange(columns.rows.numel(), device=device, dtype=i32), columns.rows)
    step = _at(g.cols, columns.owner)  # a cell row further down the block
    low = _at(_starts(g.rows * g.cols), columns.owner) + columns.low  # the column's cell at the block's first row
    # Pair p, the k-th of its column (p = start + k), reads cell low + k * step = p * step + offset.
    offset = (low - _starts(columns.rows) * step).to(i32)
    at = torch.arange(pairs.numel(), device=device, dtype=i32) * _at(step.to(i32), pairs) + _at(offset, pairs)
    right = _at(logits, at + _at((columns.high - columns.low).to(i32), pairs))
    return torch.lerp(_at(logits, at), right, _at(columns.weight, pairs)), pairs


def _changes(values: torch.Tensor, pairs: torch.Tensor, g: _Geometry,
             columns: _Columns) -> tuple[torch.Tensor, torch.Tensor]:
    """The crossings of each column's piecewise linear function, as pixels where it changes."""
    count, device = columns.owner.numel(), values.device
    positive = values > 0
    starts = _starts(columns.rows)
    head = torch.zeros(positive.numel(), dtype=torch.bool, device=device)
    head[starts] = True
    at = _true((positive[1:] != positive[:-1]) & ~head[1:])  # between cell rows at, at + 1
    col = _at(pairs, at)
    a, b = _at(values, at).double(), _at(values, at + 1).double()
    # Pair k of a column is its cell row r0 + k - start: at pixel (r0 + k - start + 0.5) * ratio - 0.5.
    ratio = _at(g.h.double() / g.ah.double(), columns.owner)
    shift = ((_at(g.r0, columns.owner) - starts).double() + 0.5) * ratio - 0.5
    y = (at + a / (a - b)) * _at(ratio, col) + _at(shift, col)
    y = torch.where(b > 0, y.floor() + 1, y.ceil()).long()  # the first pixel past the crossing
    inside = _true((y > _at(columns.y0, col)) & (y < _at(columns.y1, col)))
    col, y = _at(col, inside), _at(y, inside)
    crossings = torch.bincount(col, minlength=count)
    opened = _top_values(values, starts, g, columns) > 0  # the column's value at y0
    closed = opened ^ (crossings % 2 == 1)  # its value at y1 - 1
    return _ordered(columns, g, opened, closed, crossings, col, y)


def _top_values(values: torch.Tensor, starts: torch.Tensor, g: _Geometry, columns: _Columns) -> torch.Tensor:
    """Each column's value at its window's top pixel, between its first two cell rows (the
    first is the one y0 reads, `r0`)."""
    low, high, weight = _weights(columns.y0, _at(g.ah, columns.owner), columns.h)
    return torch.lerp(_at(values, starts), _at(values, starts + high - low), weight)


def _ordered(columns: _Columns, g: _Geometry, opened: torch.Tensor, closed: torch.Tensor, crossings: torch.Tensor,
             col: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per column, y0 when it opens positive, its crossings, y1 when it closes positive: as
    frame pixel indices, in order, and how many each detection has."""
    per_column = opened.long() + crossings + closed.long()
    out = _starts(per_column)
    changes = torch.empty(int(per_column.sum()), dtype=torch.int64, device=per_column.device)
    base = columns.x * columns.h
    shift = out + opened.long() - _starts(crossings)  # a crossing's place, less its rank
    changes.index_copy_(0, _at(shift, col) + torch.arange(col.numel(), device=col.device), _at(base, col) + y)
    changes.index_copy_(0, _kept(out, opened), _kept(base + columns.y0, opened))
    changes.index_copy_(0, _kept(out + per_column - 1, closed), _kept(base + columns.y1, closed))
    per_detection = torch.zeros_like(g.width).index_add_(0, columns.owner, per_column)
    return changes, per_detection


def _at(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """`values[index]` along the first axis (`index_select`: a third of advanced indexing's cost on CPU)."""
    return values.index_select(0, index)


def _kept(values: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """`values[keep]` for a bool `keep`, by `index_select`."""
    return values.index_select(0, _true(keep))


def _true(mask: torch.Tensor) -> torch.Tensor:
    """`Tensor[K] int64`: where a 1-D bool `mask` is true (on CPU by numpy: `torch.nonzero` takes
    8 to 10 times as long there)."""
    if mask.device.type == "cpu":
        return torch.from_numpy(np.flatnonzero(mask.numpy()))
    return torch.nonzero(mask).squeeze(1)


def prototypes(raw: object) -> torch.Tensor | None:
    """The prototypes among the model's outputs: a second output of 4 dimensions."""
    if isinstance(raw, (tuple, list)) and len(raw) == 2 and isinstance(raw[1], torch.Tensor) and raw[1].dim() == 4:
        return raw[1]
    return None
