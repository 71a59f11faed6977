"""Loads a TorchScript (`.pt`, `.ts`) or `torch.export` (`.pt2`) model onto a device."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import torch


def load_model(path: str | pathlib.Path, device: torch.device) -> Callable[..., Any]:
    """The model in `path`, in eval mode, on `device`.

    Raises:
        ValueError: the file's suffix is not one this handler loads.
    """
    path = pathlib.Path(path)
    if path.suffix == ".pt2":
        return torch.export.load(str(path)).module().to(device)
    if path.suffix in (".pt", ".ts", ".torchscript"):
        return torch.jit.load(str(path), map_location=device).eval()  # type: ignore[no-untyped-call, no-any-return]
    raise ValueError(
        f"cannot load {path.name}: package a TorchScript file (.pt, from torch.jit.script or "
        "torch.jit.trace) or a torch.export program (.pt2, from torch.export.save)"
    )
