"""A chunk's model outputs: named, gathered on the device into one flat tensor per dtype (no host
sync), brought back in one transfer each, and split into per-frame values by the layout."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from handler.clip import FrameResult
from handler.layout import Layout, Placement


@dataclass(frozen=True, slots=True)
class _Spec:
    """Where one named output lies in the gathered flat tensors: `flat[group][offset:...]`."""

    name: str
    group: int
    offset: int
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Gathered:
    """A chunk's real output rows, still on the device: one flat tensor per output dtype."""

    flat: list[torch.Tensor]
    specs: list[_Spec]

    def copy_to_host(self) -> HostOutputs:
        """Starts the copy to the host without waiting for it (CUDA: one non-blocking copy per
        dtype into pinned memory, then an event); off CUDA the tensors already are the host's."""
        if not self.flat or self.flat[0].device.type != "cuda":
            return HostOutputs(self.flat, self.specs)
        host = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in self.flat]
        for target, tensor in zip(host, self.flat):
            target.copy_(tensor, non_blocking=True)
        copied = torch.cuda.Event()  # type: ignore[no-untyped-call]
        copied.record(torch.cuda.current_stream(self.flat[0].device))
        return HostOutputs(host, self.specs, copied)


@dataclass(frozen=True, slots=True)
class HostOutputs:
    """A chunk's outputs on their way to the host (`Gathered.copy_to_host`)."""

    flat: list[torch.Tensor]
    specs: list[_Spec]
    copied: torch.cuda.Event | None = None

    def wait(self) -> list[tuple[str, torch.Tensor]]:
        """The named outputs on the host, in the model's order (views), once the copy has run."""
        if self.copied is not None:
            self.copied.synchronize()
        return [(s.name, self.flat[s.group][s.offset:s.offset + math.prod(s.shape)].view(s.shape))
                for s in self.specs]


def gather(raw: Any, names: tuple[str, ...] | None, placement: Placement, frames: int) -> Gathered:
    """The model's outputs for the first `frames` rows (padded rows dropped), by dtype.

    Raises:
        ValueError, TypeError: the model's outputs do not have one row per input row.
    """
    real = {}
    for name, tensor in named(raw, names).items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"model output {name!r} is a {type(tensor).__name__}, not a tensor: "
                            "set handler.task (detection, classification, segmentation) for this model")
        if tensor.dim() == 0 or tensor.shape[0] != placement.rows:
            rows = tensor.shape[0] if tensor.dim() else "no"
            raise ValueError(f"model output {name!r} has {rows} rows for {placement.rows} inputs")
        real[name] = tensor.detach()[:frames]
    return pack(real)


#: The output a head may add: how many of the chunk's rows it dropped because the model answered
#: NaN or infinity in them (`Tensor[1] int64`, gathered with the rest: no host sync of its own).
NON_FINITE = "non_finite"


def non_finite(outputs: list[tuple[str, torch.Tensor]]) -> int:
    """The rows a chunk's head dropped for a NaN or infinite value (0 if it counts none)."""
    return sum(int(tensor.sum()) for name, tensor in outputs if name == NON_FINITE)


def pack(tensors: Mapping[str, torch.Tensor]) -> Gathered:
    """Named tensors (any shapes, on one device) as one flat tensor per dtype, ready to copy."""
    groups: dict[torch.dtype, list[torch.Tensor]] = {}
    specs: list[_Spec] = []
    for name, tensor in tensors.items():
        group = groups.setdefault(tensor.dtype, [])
        offset = sum(t.numel() for t in group)
        specs.append(_Spec(name, list(groups).index(tensor.dtype), offset, tuple(tensor.shape)))
        group.append(tensor.reshape(-1))
    return Gathered([torch.cat(group) if len(group) > 1 else group[0] for group in groups.values()], specs)


def per_frame(outputs: list[tuple[str, torch.Tensor]], placement: Placement, layout: Layout,
              dense_outputs: tuple[str, ...] | None) -> list[FrameResult]:
    """Each frame's result: its own size and every output's value for it (dense maps cropped).

    Args:
        outputs: the named outputs on the host (`HostOutputs.wait`).
        placement: the chunk's placement.
        layout: the layout that placed the frames (it crops and resizes maps back).
        dense_outputs: the outputs to crop as maps; None: by their shape (`dense_outputs: auto`).
    """
    results = [FrameResult(w, h) for h, w in placement.original]
    for name, tensor in outputs:
        dense = None if dense_outputs is None else name in dense_outputs
        for result, value in zip(results, layout.unpad(tensor, placement, dense)):
            result.outputs[name] = value
    return results


def named(raw: Any, names: tuple[str, ...] | None) -> dict[str, torch.Tensor]:
    """The model's outputs by name: a dict as is, a tensor as `output`, a tuple by `names`."""
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, torch.Tensor):
        return {names[0] if names else "output": raw}
    if isinstance(raw, (tuple, list)):
        if names is not None and len(names) != len(raw):
            raise ValueError(f"model returned {len(raw)} outputs but output_names has {len(names)}")
        return dict(zip(names or [f"output_{i}" for i in range(len(raw))], raw))
    raise TypeError(f"model returned {type(raw).__name__}; return a tensor, a tuple or a dict")
