"""Frames written into a chunk's input on the device, after its upload: frames NVDEC left on the
device, and JPEG decoded there (nvJPEG), with the CPU decoder as each frame's fallback.

`collate` leaves these rows all padding (`later`); `DeviceFill.fill` writes each frame at its
corner of its row, so the padding is exactly as for a frame collated on the host.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import torch

from handler.clip import Frame
from handler.config import HandlerConfig, JpegDecoder
from handler.errors import ConfigError, FrameError
from handler.frames import DeferredJpeg

logger = logging.getLogger(__name__)

#: Encoded JPEG bodies (uint8 CPU tensors) -> `[3, h, w]` uint8 RGB each, on the device.
BatchDecoder = Callable[[list[torch.Tensor]], list[torch.Tensor]]


def nvjpeg(device: torch.device) -> BatchDecoder:
    """The batched nvJPEG decoder of torchvision, onto `device`.

    Raises:
        ConfigError: torchvision cannot be imported (it must match the worker's torch).
    """
    try:
        from torchvision.io import ImageReadMode, decode_jpeg  # type: ignore[import-not-found,unused-ignore]
    except ImportError as err:
        raise ConfigError(
            f"handler.jpeg_decoder = nvjpeg needs torchvision built for torch {torch.__version__} "
            f"({err}); install it, or set jpeg_decoder: cpu") from None

    # torchvision allocates the images on the current stream and fills them from its own: on a
    # stream of their own, no block the chunks' stream freed (and may still be using) is handed out.
    side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]

    def decode(bodies: list[torch.Tensor]) -> list[torch.Tensor]:
        current = torch.cuda.current_stream(device)
        with torch.cuda.stream(side):
            images = list(decode_jpeg(bodies, mode=ImageReadMode.RGB, device=device))
        current.wait_stream(side)
        return images

    return decode


def device_jpeg(config: HandlerConfig, device: torch.device) -> BatchDecoder | None:
    """The JPEG decoder on the device that `jpeg_decoder` asks for, or None (the CPU decodes)."""
    if config.jpeg_decoder is JpegDecoder.CPU:
        return None
    if device.type != "cuda":
        logger.warning("handler.jpeg_decoder = nvjpeg on a worker without CUDA: JPEG decodes on the CPU")
        return None
    return nvjpeg(device)


class DeviceFill:
    """Which frames of a chunk go straight to the device, and writing them there."""

    def __init__(self, jpeg: BatchDecoder | None) -> None:
        self._jpeg = jpeg

    def rows(self, frames: Sequence[Frame]) -> frozenset[int]:
        """The rows to collate `later`: frames on the device, and JPEG when it decodes there."""
        return frozenset(i for i, frame in enumerate(frames) if isinstance(frame, torch.Tensor)
                         or (self._jpeg is not None and isinstance(frame, DeferredJpeg)))

    def fill(self, x: torch.Tensor, frames: Sequence[Frame], rows: frozenset[int],
             offsets: Sequence[tuple[int, int]] | None = None) -> dict[int, FrameError]:
        """Writes `frames[i]` into `x[i]` (`[R, H, W, 3]` on the device) for each of `rows`, with
        its top-left corner at `offsets[i]` (default: the slot's).

        Returns:
            The rows whose frame could not be decoded at all (their row stays zero).
        """
        corners = offsets or [(0, 0)] * len(frames)
        jpegs: dict[int, DeferredJpeg] = {}
        for i in sorted(rows):
            frame = frames[i]
            if isinstance(frame, torch.Tensor):
                _place(x, i, frame, corners[i])
            elif isinstance(frame, DeferredJpeg):
                jpegs[i] = frame
        return self._fill_jpegs(x, jpegs, corners) if jpegs else {}

    def _fill_jpegs(self, x: torch.Tensor, jpegs: dict[int, DeferredJpeg],
                    corners: Sequence[tuple[int, int]]) -> dict[int, FrameError]:
        """One batched device decode; a failed batch is retried frame by frame, and a frame the
        device cannot decode goes to the CPU decoder (libjpeg-turbo, then Pillow)."""
        bodies = {i: torch.frombuffer(bytearray(f.body), dtype=torch.uint8) for i, f in jpegs.items()}
        decoded = dict(zip(bodies, self._decode(list(bodies.values())) or []))
        failed: dict[int, FrameError] = {}
        for i, frame in jpegs.items():
            pixels = decoded.get(i)
            if not _fits(pixels, frame):
                again = self._decode([bodies[i]])
                pixels = again[0] if again else None
            if pixels is not None and _fits(pixels, frame):
                _place(x, i, pixels.permute(1, 2, 0), corners[i])
                continue
            try:
                _place(x, i, _on_cpu(frame), corners[i])
            except FrameError as err:
                failed[i] = err.detached()
        return failed

    def _decode(self, bodies: list[torch.Tensor]) -> list[torch.Tensor] | None:
        """`[3, h, w]` per body, or None when the device decoder refused them."""
        assert self._jpeg is not None
        try:
            return self._jpeg(bodies)
        except RuntimeError as err:
            logger.info("device JPEG decode failed on %d frame(s) (%s)", len(bodies), err)
            return None


def _fits(pixels: torch.Tensor | None, frame: DeferredJpeg) -> bool:
    return pixels is not None and tuple(pixels.shape) == (3, *frame.shape[:2])


def _on_cpu(frame: DeferredJpeg) -> torch.Tensor:
    """`[h, w, 3]` uint8 from the CPU decoder (the same errors as on a CPU worker)."""
    out = np.empty(frame.shape, dtype=np.uint8)
    frame.decode_into(out)
    return torch.from_numpy(out)


def _place(x: torch.Tensor, row: int, pixels: torch.Tensor, corner: tuple[int, int] = (0, 0)) -> None:
    """`pixels` (`[h, w, 3]`) into `x[row]` with its top-left at `corner`. A frame made on another stream
    (NVDEC's decode thread, the JPEG decoder's) is kept from reuse until this stream has read it."""
    if pixels.is_cuda:
        pixels.record_stream(torch.cuda.current_stream(pixels.device))
    (h, w), (top, left) = pixels.shape[:2], corner
    x[row, top:top + h, left:left + w].copy_(pixels, non_blocking=True)
