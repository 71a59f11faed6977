"""What every peer engine runs per batch: the same decode, pad and forward as our handler.

A peer's server (`bench.peers.pytriton_server`, `bench.peers.litserve_server`) hands a list of
encoded JPEGs to `FrameModel`, which decodes each with libjpeg-turbo (simplejpeg, as
`handler.jpeg` does) on `decode_threads` threads straight into its slot of one float32
channels-last allocation, zero-padded to a multiple of `size_divisor`, runs the TorchScript model
on chunks of at most `max_batch` frames with each frame's true (h, w), and answers one JSON-ready
dict per frame (or an error value for a frame that does not decode). Torch's intra-op threads are
capped at CPUs / decode threads, as the handler caps them (`handler.pipeline`), so the engines
differ in their serving, not in the arithmetic.

Runs in the peers' own virtual environments (numpy < 2 for PyTriton): it imports nothing from
the project.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

#: Frame model settings as `handler/models/frame_quality.yaml` ships them.
MAX_BATCH = 16
SIZE_DIVISOR = 32


@dataclass(frozen=True, slots=True)
class FrameError:
    """A frame that could not be decoded: its answer instead of a result."""

    message: str

    def as_dict(self) -> dict[str, object]:
        return {"code": 400, "type": "CorruptFrame", "message": self.message}


def padded_size(sizes: Sequence[tuple[int, int]], divisor: int = SIZE_DIVISOR) -> tuple[int, int]:
    """The slot (H, W) for frames of `sizes` (h, w): the largest of each, rounded up to `divisor`."""
    height = max(h for h, _ in sizes)
    width = max(w for _, w in sizes)
    return math.ceil(height / divisor) * divisor, math.ceil(width / divisor) * divisor


class FrameModel:
    """A TorchScript `forward(pixels: Tensor[N, 3, H, W] float32 0..255, sizes: Tensor[N, 2] int64)`
    served on JPEG bodies: `frame_quality` (named outputs `[N]`) or `face_detector` (`[N, K, 21]`).

    Args:
        path: the TorchScript file (`frame_quality.pt` from `python -m handler.models.build`).
        decode_threads: frames decoded at once (the handler's `decode_threads: auto` on the CPU: 2).
        max_batch: frames a forward (`model_max_batch`).
        size_divisor: the slot's H and W are multiples of this.
        score_threshold: a detector's rows at or under this score are left out (face_detector.yaml).
    """

    def __init__(self, path: str, decode_threads: int = 2, max_batch: int = MAX_BATCH,
                 size_divisor: int = SIZE_DIVISOR, score_threshold: float = 0.5) -> None:
        if decode_threads < 1 or max_batch < 1 or size_divisor < 1:
            raise ValueError(f"decode_threads={decode_threads}, max_batch={max_batch}, "
                             f"size_divisor={size_divisor}: use 1 or more")
        cpus = len(os.sched_getaffinity(0))
        if "OMP_NUM_THREADS" not in os.environ:
            torch.set_num_threads(max(1, cpus // decode_threads))
        self.model = torch.jit.load(path, map_location="cpu").eval()
        self.max_batch, self.divisor, self.score_threshold = max_batch, size_divisor, score_threshold
        self.pool = ThreadPoolExecutor(decode_threads, thread_name_prefix="decode")
        self._scratch = threading.local()

    def __call__(self, bodies: Sequence[bytes]) -> list[dict[str, object]]:
        """One batch of encoded frames -> one answer per frame, in order."""
        answers: list[dict[str, object]] = []
        for start in range(0, len(bodies), self.max_batch):
            answers.extend(self._chunk(bodies[start:start + self.max_batch]))
        if len(answers) != len(bodies):
            raise RuntimeError(f"{len(bodies)} frames in, {len(answers)} answers out")
        return answers

    def _chunk(self, bodies: Sequence[bytes]) -> list[dict[str, object]]:
        import simplejpeg

        sizes: list[tuple[int, int] | FrameError] = []
        for body in bodies:
            try:
                height, width, _, _ = simplejpeg.decode_jpeg_header(body)
                sizes.append((height, width))
            except ValueError as exc:
                sizes.append(FrameError(str(exc)))
        good = [i for i, s in enumerate(sizes) if not isinstance(s, FrameError)]
        if not good:
            return [s.as_dict() for s in sizes if isinstance(s, FrameError)]
        slot_h, slot_w = padded_size([sizes[i] for i in good], self.divisor)  # type: ignore[misc]
        batch = np.zeros((len(good), slot_h, slot_w, 3), dtype=np.float32)

        def fill(row: int) -> FrameError | None:
            h, w = sizes[good[row]]  # type: ignore[misc]
            pixels = self._buffer(h * w * 3)[:h * w * 3].reshape(h, w, 3)
            try:
                simplejpeg.decode_jpeg(bodies[good[row]], colorspace="RGB", buffer=pixels)
            except ValueError as exc:
                return FrameError(str(exc))
            batch[row, :h, :w] = pixels  # converting copy while the frame is in cache
            return None

        failed = list(self.pool.map(fill, range(len(good))))
        hw = torch.tensor([sizes[i] for i in good], dtype=torch.int64)
        with torch.inference_mode():
            outputs = self.model(torch.from_numpy(batch).permute(0, 3, 1, 2), hw)
        per_frame = self._per_frame(outputs)
        answers: list[dict[str, object]] = []
        row = 0
        for size in sizes:
            if isinstance(size, FrameError):
                answers.append(size.as_dict())
                continue
            error = failed[row]
            if error is not None:
                answers.append(error.as_dict())
            else:
                answers.append({"code": 200, "frames": [{"width": size[1], "height": size[0], **per_frame[row]}]})
            row += 1
        return answers

    def _per_frame(self, outputs: dict[str, torch.Tensor] | torch.Tensor) -> list[dict[str, object]]:
        """Named outputs `[N]` -> each frame's numbers; end-to-end detections `Tensor[N, K, 6+]`
        (x1, y1, x2, y2, score, class, ...) -> each frame's rows above `score_threshold`, cut to
        box, score and class."""
        if isinstance(outputs, dict):
            host = {name: value.tolist() for name, value in outputs.items()}
            count = len(next(iter(host.values()))) if host else 0
            return [{"outputs": {k: v[i] for k, v in host.items()}} for i in range(count)]
        rows = outputs[..., :6]
        keep = rows[..., 4] > self.score_threshold
        return [{"detections": rows[i][keep[i]].tolist()} for i in range(rows.shape[0])]

    def _buffer(self, size: int) -> np.ndarray:
        """This thread's reused uint8 decode buffer, at least `size` bytes."""
        buffer: np.ndarray | None = getattr(self._scratch, "buffer", None)
        if buffer is None or buffer.size < size:
            buffer = self._scratch.buffer = np.empty(size, dtype=np.uint8)
        return buffer
