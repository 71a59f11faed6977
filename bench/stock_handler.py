"""A stock-style TorchServe handler (`bench.stock`), packaged by the bench for comparison.

TorchServe takes the one class defined here; the stages live in `bench/stock.py`, shipped
beside it in the archive.
"""

from __future__ import annotations

import os

import torch
from ts.torch_handler.base_handler import BaseHandler

from bench import stock


class StockVisionHandler(BaseHandler):
    """Per-frame decode to float, per-frame `.to(device)`, `torch.stack`, one JSON per request."""

    def initialize(self, context) -> None:
        properties = context.system_properties
        gpu = properties.get("gpu_id")
        self.device = torch.device(f"cuda:{gpu}" if torch.cuda.is_available() and gpu is not None else "cpu")
        path = os.path.join(properties["model_dir"], context.manifest["model"]["serializedFile"])
        self.model = torch.jit.load(path, map_location=self.device).eval()
        self.initialized = True

    def handle(self, data, context) -> list[str]:
        bodies = [row.get("body") or row.get("data") for row in data]
        types = [_content_type(context, i) for i in range(len(data))]
        return stock.handle(bodies, types, self.model, self.device)


def _content_type(context, idx: int) -> str | None:
    headers = context.get_all_request_header(idx) or {}
    return next((v for k, v in headers.items() if str(k).lower() == "content-type" and isinstance(v, str)), None)
