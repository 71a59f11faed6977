"""ONNX models through ONNX Runtime: one session per worker, fed the chunk's tensor without a copy.

The graph says what it takes (DESIGN section 14's note on ONNX): its one input's batch (a number,
or symbolic), spatial size, dtype and layout become the handler's `static_batch`, letterbox
`input_size`, padding and conversion (`Graph.settings`); Ultralytics' `metadata_props` (`names`,
`imgsz`, `stride`, `task`, `kpt_shape`) are read as a TorchScript file's `config.txt` is, and
serve the export as its `predict` would (`handler.ultralytics`).

On the CPU the chunk's float32 tensor is handed to ONNX Runtime as a view (its buffer, no copy),
and the outputs come back as tensors over ONNX Runtime's buffers. On CUDA the input and outputs
are bound on the device's memory (I/O binding; outputs to torch by DLPack).
"""

from __future__ import annotations

import ast
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils.dlpack

from handler import ultralytics
from handler.errors import CannotLoad, ConfigError

logger = logging.getLogger(__name__)

#: ONNX tensor types the handler can feed, and the torch dtype it converts the chunk to.
_DTYPES = {"tensor(float)": torch.float32, "tensor(float16)": torch.float16, "tensor(uint8)": torch.uint8}
INSTALL = 'pip install "video-frame-handler[onnx]" (or onnxruntime-gpu for CUDA workers)'


@dataclass(frozen=True, slots=True)
class Graph:
    """What an ONNX graph's one input and its outputs declare.

    Attributes:
        input: the input's name.
        shape: as declared, a number or a symbolic name per dimension.
        batch: the fixed batch, or None when symbolic.
        size: the fixed (height, width), or None when both are symbolic.
        dtype: the input's element type.
        channels_last: `[N, H, W, 3]` rather than `[N, 3, H, W]`.
        outputs: the outputs' names, in order.
    """

    input: str
    shape: tuple[int | str, ...]
    batch: int | None
    size: tuple[int, int] | None
    dtype: torch.dtype
    channels_last: bool
    outputs: tuple[str, ...]

    def describe(self) -> str:
        return f"input {self.input!r} {list(self.shape)} {str(self.dtype).removeprefix('torch.')}"

    def settings(self, handler: Mapping[str, Any] | None, metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The `handler:` section with what the graph decides filled in: its batch, its fixed size
        (a letterbox) or, for any size, no padding (`size_divisor: 1`: a padded frame would not be
        the frame the graph's own framework answers for); an Ultralytics export's `metadata` adds
        what its `predict` does (`handler.ultralytics`).

        Raises:
            ConfigError: a setting that contradicts the graph, naming both.
        """
        values = ultralytics.defaults(handler, metadata, fixed=self.size is not None,
                                      dynamic=self.batch is None and self.size is None)

        def refuse(key: str, why: str) -> ConfigError:
            return ConfigError(f"handler.{key} = {values[key]!r} contradicts the ONNX graph's "
                               f"{self.describe()}: {why}")

        if self.batch is not None:
            frames = f"{self.batch} frame{'s' if self.batch > 1 else ''}"
            if values.get("static_batch") not in (None, self.batch):
                raise refuse("static_batch", f"it takes exactly {frames}; drop static_batch")
            if isinstance(values.get("model_max_batch"), int) and values["model_max_batch"] > self.batch:
                raise refuse("model_max_batch", f"it takes exactly {frames}; drop model_max_batch")
            values["static_batch"] = self.batch
        if self.size is not None:
            if values.get("resize") not in (None, "letterbox"):
                raise refuse("resize", f"its input is a fixed {self.size[1]}x{self.size[0]}; use "
                                       "resize: letterbox (the default for this graph) or export it with dynamic axes")
            if values.get("input_size") not in (None, list(self.size), tuple(self.size)):
                raise refuse("input_size", f"its input is {list(self.size)}; drop input_size")
            values["resize"], values["input_size"] = "letterbox", list(self.size)
        elif values.get("resize", "pad") == "pad":
            values.setdefault("size_divisor", 1)
        if self.dtype == torch.uint8 and values.get("normalize") is not None:
            raise refuse("normalize", "it takes uint8 pixels and normalises them itself; drop normalize")
        if values.get("output_names") is None:
            values["output_names"] = list(self.outputs)
        return values


def read_graph(session: Any) -> Graph:
    """The graph's input and outputs, checked to be an image model's.

    Raises:
        CannotLoad: more than one input, or an input that is not an image tensor.
    """
    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise CannotLoad(f"the ONNX graph has {len(inputs)} inputs ({[i.name for i in inputs]}); the handler "
                         "feeds one image tensor [N, 3, H, W]: export the model with its image as the only input")
    found = inputs[0]
    shape = tuple(d if isinstance(d, int) else str(d) for d in found.shape)
    image = f"the ONNX graph's input {found.name!r} is {list(shape)} {found.type}, not an image tensor"
    if found.type not in _DTYPES:
        raise CannotLoad(f"{image}: the handler feeds float32, float16 or uint8 pixels; export with one of those")
    if len(shape) != 4:
        raise CannotLoad(f"{image}: the handler feeds [N, 3, H, W] (or [N, H, W, 3]) frames")
    channels_last = shape[3] == 3 and shape[1] != 3
    if not channels_last and shape[1] != 3 and not isinstance(shape[1], str):
        raise CannotLoad(f"{image}: the handler feeds 3 colour channels (RGB), [N, 3, H, W] or [N, H, W, 3]")
    h, w = (shape[1], shape[2]) if channels_last else (shape[2], shape[3])
    if isinstance(h, int) != isinstance(w, int):
        raise CannotLoad(f"{image}: one side is fixed and the other symbolic; export both fixed (a letterboxed "
                         "input) or both dynamic")
    size = (h, w) if isinstance(h, int) and isinstance(w, int) else None
    batch = shape[0] if isinstance(shape[0], int) else None
    return Graph(found.name, shape, batch, size, _DTYPES[found.type], channels_last,
                 tuple(o.name for o in session.get_outputs()))


def metadata(session: Any) -> dict[str, Any]:
    """The graph's `metadata_props`, values as Python literals where they are (Ultralytics writes
    `names` as `{0: 'person', ...}` and `imgsz` as `[640, 640]`)."""
    found: dict[str, Any] = {}
    for key, text in session.get_modelmeta().custom_metadata_map.items():
        try:
            found[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            found[key] = text
    return found


class OnnxModel:
    """A graph in one ONNX Runtime session, called as the handler calls a torch model."""

    def __init__(self, session: Any, graph: Graph, device: torch.device) -> None:
        self.session, self.graph = session, graph
        self.on_cuda = "CUDAExecutionProvider" in session.get_providers()
        self._device = device
        #: A float32 NCHW graph on the CPU takes the chunk as collated (planar: no copy).
        self.planar = not self.on_cuda and graph.dtype == torch.float32 and not graph.channels_last

    def __call__(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The graph's outputs for `x` (`Tensor[N, 3, H, W]`): one tensor, or a tuple in order."""
        feed = self._input(x)
        outputs = self._on_cuda(feed) if self.on_cuda else self._on_cpu(feed)
        if x.device != outputs[0].device:  # a GPU worker whose session fell back to the CPU
            outputs = [t.to(x.device) for t in outputs]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _input(self, x: torch.Tensor) -> torch.Tensor:
        graph = self.graph
        if graph.dtype == torch.uint8:
            x = x.round().clamp_(0, 255)
        x = x.permute(0, 2, 3, 1) if graph.channels_last else x
        x = x.to(graph.dtype).contiguous()  # no copy for a float32 chunk already in the graph's layout
        return x if self.on_cuda else x.cpu()

    def _on_cpu(self, x: torch.Tensor) -> list[torch.Tensor]:
        # numpy views of each side: ONNX Runtime reads the chunk's buffer and hands its own back.
        return [torch.from_numpy(out) for out in self.session.run(None, {self.graph.input: x.numpy()})]

    def _on_cuda(self, x: torch.Tensor) -> list[torch.Tensor]:
        binding = self.session.io_binding()
        binding.bind_input(self.graph.input, "cuda", x.device.index or 0, _numpy_type(x.dtype), list(x.shape),
                           x.data_ptr())
        for name in self.graph.outputs:
            binding.bind_output(name, "cuda", x.device.index or 0)
        torch.cuda.current_stream(x.device).synchronize()  # the chunk is written before ONNX Runtime reads it
        self.session.run_with_iobinding(binding)
        return [torch.utils.dlpack.from_dlpack(value) for value in binding.get_outputs()]


def _numpy_type(dtype: torch.dtype) -> Any:
    import numpy as np

    return {torch.float32: np.float32, torch.float16: np.float16, torch.uint8: np.uint8}[dtype]


def settings_for(path: str, handler: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """`handler` with what the graph at `path` decides, as a worker would load it (archive.sh
    checks an ONNX archive with it before packing); `handler` as is without onnxruntime.

    Raises:
        CannotLoad: the graph cannot run or takes no image; ConfigError: a contradicting setting.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        logger.warning("onnxruntime is not installed here: the graph's input is checked when a worker loads it")
        return handler
    try:
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    except Exception as err:
        raise CannotLoad(f"ONNX Runtime {ort.__version__} cannot run {os.path.basename(path)} ({err})") from None
    return read_graph(session).settings(handler, metadata(session))


def load(path: str, device: torch.device, threads: int) -> tuple[OnnxModel, dict[str, Any]]:
    """One session for the worker: CUDA's provider where the device is a GPU and the GPU build is
    installed, else the CPU's with `threads` intra-op threads (the worker's share of the cores).

    Raises:
        CannotLoad: onnxruntime is missing, the graph cannot run (an opset it lacks), or its
            input is not an image tensor; each message says what to do.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        raise CannotLoad(f"the model is an ONNX graph and onnxruntime is not installed in the worker's "
                         f"Python environment: {INSTALL}, then restart TorchServe") from None
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    providers: list[Any] = ["CPUExecutionProvider"]
    if device.type == "cuda":
        if "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": device.index or 0}))
        else:
            logger.warning("this GPU worker runs its ONNX model on the CPU: onnxruntime %s has no CUDA provider "
                           "(install onnxruntime-gpu instead of onnxruntime)", ort.__version__)
    try:
        session = ort.InferenceSession(path, options, providers=providers)
    except Exception as err:  # ONNX Runtime raises its own Fail / InvalidGraph / NotImplemented
        reason = str(err).strip().splitlines()[0][:400] if str(err).strip() else type(err).__name__
        raise CannotLoad(f"ONNX Runtime {ort.__version__} cannot run {os.path.basename(path)} ({reason}): "
                         "export it at an opset this ONNX Runtime supports (torch.onnx.export's default does), "
                         "or upgrade onnxruntime") from None
    graph = read_graph(session)
    in_use = session.get_providers()
    if device.type == "cuda" and "CUDAExecutionProvider" not in in_use:
        logger.warning("this GPU worker runs its ONNX model on the CPU (providers in use: %s)", in_use)
    logger.info("ONNX Runtime %s: %s, providers %s, %d intra-op threads", ort.__version__, graph.describe(),
                in_use, threads)
    return OnnxModel(session, graph, device), metadata(session)
