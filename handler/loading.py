"""Loads a model onto a device: TorchScript (`.pt`, `.ts`), `torch.export` (`.pt2`), ONNX (`.onnx`,
through ONNX Runtime: `handler.onnx_model`), or TorchServe's eager mode (a `--model-file` defining
one `nn.Module` class, and its state dict).

torchvision, where installed, is imported first: TorchScript and `torch.export` programs of its
detectors call its ops (`torchvision::nms`, `torchvision::roi_align`), which exist only once it is.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import logging
import pathlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

import torch

from handler.errors import CannotLoad

if TYPE_CHECKING:
    from handler.onnx_model import Graph

logger = logging.getLogger(__name__)

_OP = re.compile(r"\b([A-Za-z_][\w.]*::[A-Za-z_]\w*)")
#: Packages that register operators TorchScript and torch.export programs commonly call.
_OP_PACKAGES = {"torchvision": "torchvision (the build that matches torch)", "torchaudio": "torchaudio",
                "quantized": "a torch build with quantized kernels"}


class MissingOperator(CannotLoad):
    """The model calls an operator that no installed package registered."""


@dataclass(frozen=True, slots=True)
class Loaded:
    """A loaded model and what its file says of itself (Ultralytics' `config.txt` or ONNX
    `metadata_props`: `names`, `imgsz`, `stride`, `task`, `kpt_shape`); an ONNX graph's declared
    input and outputs (`graph`), which decide settings (`Graph.settings`)."""

    model: Callable[..., Any]
    metadata: dict[str, Any] = field(default_factory=dict)
    graph: Graph | None = None


@cache
def has_torchvision() -> bool:
    """Whether torchvision is installed."""
    return importlib.util.find_spec("torchvision") is not None


def register_ops() -> None:
    """Imports torchvision when it is installed, so that its operators are registered."""
    if has_torchvision():
        import torchvision  # noqa: F401


def load_model(path: str | pathlib.Path, device: torch.device, model_file: str | pathlib.Path | None = None,
               threads: int = 1) -> Loaded:
    """The model in `path`, in eval mode, on `device`.

    Args:
        path: a TorchScript or torch.export file, or the state dict of `model_file`'s module.
        device: where it runs.
        model_file: TorchServe's `--model-file`: a Python file defining one `nn.Module` class,
            built without arguments (eager mode).
        threads: an ONNX Runtime session's intra-op threads on the CPU.

    Raises:
        CannotLoad: the program calls an operator nothing registered (`MissingOperator`), or
            an ONNX graph cannot run here; naming what to install or change.
        ValueError: the file's suffix is not one this handler loads.
    """
    path = pathlib.Path(path)
    if path.suffix == ".onnx" and model_file is None:
        from handler import onnx_model

        model, metadata = onnx_model.load(str(path), device, threads)
        return Loaded(model, metadata, model.graph)
    register_ops()
    try:
        if model_file is not None:
            return Loaded(_eager(pathlib.Path(model_file), path, device))
        if path.suffix == ".pt2":
            return Loaded(torch.export.load(str(path)).module().to(device))
        if path.suffix in (".pt", ".ts", ".torchscript"):
            extra = {"config.txt": ""}
            model = torch.jit.load(str(path), map_location=device, _extra_files=extra).eval()  # type: ignore[no-untyped-call]
            return Loaded(model, _metadata(extra["config.txt"]))
    except RuntimeError as err:
        raise _missing_operator(err) or err from None
    raise ValueError(
        f"cannot load {path.name}: package a TorchScript file (.pt, from torch.jit.script or "
        "torch.jit.trace), a torch.export program (.pt2, from torch.export.save), an ONNX graph "
        "(.onnx), or a state dict "
        "with the --model-file that defines its module"
    )


def _eager(model_file: pathlib.Path, weights: pathlib.Path, device: torch.device) -> torch.nn.Module:
    """TorchServe's eager mode: the one `nn.Module` class of `model_file`, with `weights` loaded."""
    spec = importlib.util.spec_from_file_location(model_file.stem, model_file)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import the model file {model_file.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(model_file.stem, module)
    spec.loader.exec_module(module)
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass)
               if issubclass(c, torch.nn.Module) and c.__module__ == module.__name__]
    if len(classes) != 1:
        raise ValueError(f"the model file {model_file.name} defines {len(classes)} nn.Module classes "
                         f"({[c.__name__ for c in classes]}); define exactly one, built without arguments")
    model = classes[0]()
    state = torch.load(str(weights), map_location=device, weights_only=True)
    model.load_state_dict(state)
    return model.to(device).eval()


def _metadata(text: str | bytes) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _missing_operator(err: RuntimeError) -> MissingOperator | None:
    """A load error that names an unregistered operator, as one that says what to install.

    torch raises a plain RuntimeError ("Unknown builtin op: torchvision::nms", "operator
    torchvision::nms does not exist"); its text is all that names the operator.
    """
    text = str(err)
    if not any(s in text for s in ("Unknown builtin op", "does not exist", "Could not find schema", "No such operator")):
        return None
    match = _OP.search(text)
    if match is None:
        return None
    op = match.group(1)
    namespace = op.split("::")[0]
    package = _OP_PACKAGES.get(namespace, f"the package that registers the {namespace}:: operators")
    installed = " (it is installed but did not register it: its build does not match torch's)" \
        if namespace == "torchvision" and has_torchvision() else ""
    return MissingOperator(f"the model calls the operator {op}, which nothing registered{installed}: install "
                           f"{package} in the worker's Python environment, then restart TorchServe")
