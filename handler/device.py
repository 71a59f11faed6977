"""The worker's GPU: made current in every thread that touches CUDA; out of memory counted by
the allocator.

TorchServe gives each worker a `gpu_id`. `torch.cuda.set_device` is per thread, so the worker's
main thread and each decode thread bind themselves (`bind`); otherwise a thread's current device
is 0, and events, hardware decoders and allocations without an explicit device land there.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

#: The allocator's count of out-of-memory errors so far (`num_ooms`); rises on each one.
OomCount = Callable[[], int]


_worker = [torch.device("cpu")]


def bind(device: torch.device) -> None:
    """Makes `device` the worker's device, and the calling thread's current CUDA device."""
    _worker[0] = device
    if device.type == "cuda":
        torch.cuda.set_device(device)


def worker_device() -> torch.device:
    """The device this worker process serves on (the last `bind`; the CPU before any): a CPU
    worker on a GPU host must not decode on GPU 0 just because CUDA is there."""
    return _worker[0]


def oom_count(device: torch.device) -> OomCount:
    """The allocator's out-of-memory count on `device` (always 0 off CUDA).

    TorchScript's interpreter re-raises every error as a plain `RuntimeError` (pytorch#148642),
    so an out-of-memory error inside a scripted or exported model is recognised by this count
    rising across the call, not by the exception's type.
    """
    if device.type != "cuda":
        return lambda: 0
    return lambda: int(torch.cuda.memory_stats(device).get("num_ooms", 0))
