"""ONNX graphs exported from code (`torch.onnx.export`, the dynamo exporter) in the shapes models
ship in: a fixed batch and a fixed input, or symbolic ones; Ultralytics' `metadata_props` added
as its exporter writes them (`str` of each value)."""

from __future__ import annotations

import contextlib
import io
import pathlib
from collections.abc import Mapping

import onnx
import torch
from torch.export import Dim


def export(module: torch.nn.Module, path: pathlib.Path, batch: int | None, size: tuple[int, int] | None,
           metadata: Mapping[str, object] | None = None, output_names: list[str] | None = None,
           channels_last: bool = False, dtype: torch.dtype = torch.float32) -> pathlib.Path:
    """Writes `module` as an ONNX graph whose input is `[batch, 3, *size]` (`[batch, *size, 3]`
    with `channels_last`), a symbolic dimension where `batch` or `size` is None."""
    h, w = size or (64, 96)
    shape = (batch or 2, h, w, 3) if channels_last else (batch or 2, 3, h, w)
    dims: dict[int, Dim] = {} if batch is not None else {0: Dim("batch", min=1, max=4096)}
    if size is None:
        spatial = (1, 2) if channels_last else (2, 3)
        dims |= {spatial[0]: Dim("height", min=8, max=8192), spatial[1]: Dim("width", min=8, max=8192)}
    example = torch.zeros(shape, dtype=dtype)
    with contextlib.redirect_stdout(io.StringIO()):  # the exporter's progress lines
        program = torch.onnx.export(module.eval(), (example,), dynamo=True, input_names=["images"],
                                    output_names=output_names, dynamic_shapes=({"x": dims} if dims else None))
    assert program is not None
    program.save(str(path))
    if metadata:
        model = onnx.load(str(path))
        for key, value in metadata.items():
            model.metadata_props.add(key=key, value=str(value))
        onnx.save(model, str(path))
    return path
