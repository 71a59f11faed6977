"""A decode-only TorchServe handler in the stock style: Pillow for images, `np.load` for npy.

The second decode-only baseline: `bench.stock.decode_frame` without the float conversion (one
`BytesIO` + Pillow + `np.asarray` per request, one thread), answering each frame's size; what a
stock-style handler spends before its model. TorchServe takes the one class defined here.
"""

from __future__ import annotations

import io
import json

import numpy as np
from PIL import Image
from ts.torch_handler.base_handler import BaseHandler


class PillowDecodeHandler(BaseHandler):
    """Decodes each request with Pillow / NumPy; answers `{"frames": [{"width", "height"}]}`."""

    def initialize(self, context) -> None:
        self.initialized = True

    def handle(self, data, context) -> list[str]:
        out = []
        for idx, row in enumerate(data):
            body = row.get("body") or row.get("data")
            headers = context.get_all_request_header(idx) or {}
            content_type = next((v for k, v in headers.items() if str(k).lower() == "content-type"), "")
            if content_type == "application/x-npy":
                pixels = np.load(io.BytesIO(bytes(body)), allow_pickle=False)
            else:
                pixels = np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))
            context.set_response_content_type(idx, "application/json")
            out.append(json.dumps({"frames": [{"width": pixels.shape[1], "height": pixels.shape[0]}]}))
        return out
