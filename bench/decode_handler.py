"""A decode-only TorchServe handler: our decode step (same decoder, same threads), then `{sizes}`.

The baseline for "what the handler adds beyond decoding": it decodes every request exactly as
the video handler does (the same doors, `handler.doors.route.read`, then `Request.decode`:
libjpeg-turbo for JPEG, `decode_threads` threads, the archive's own limits) and answers each
frame's size, with no planning, collating, model or outputs. TorchServe takes the one class defined here.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from ts.torch_handler.base_handler import BaseHandler

from handler.clip import Request
from handler.config import HandlerConfig
from handler.doors import route
from handler.errors import FrameError


class DecodeOnlyHandler(BaseHandler):
    """Decodes each request like the video handler; answers sizes, one status per request."""

    def initialize(self, context) -> None:
        self.config = HandlerConfig.from_mapping((context.model_yaml_config or {}).get("handler")).resolved(cuda=False)
        self.pool = ThreadPoolExecutor(self.config.threads, thread_name_prefix="decode")
        self.initialized = True

    def handle(self, data, context) -> list[str]:
        requests = [route.read(item, context.get_all_request_header(idx) or {}, context.model_name, self.config)[1]
                    for idx, item in enumerate(data)]
        bodies = []
        for idx, answer in enumerate(self.pool.map(self._one, requests)):
            status, body = answer
            context.set_response_status(status, "OK" if status == 200 else "Error", idx)
            context.set_response_content_type(idx, "application/json")
            bodies.append(body)
        return bodies

    def _one(self, request: Request) -> tuple[int, str]:
        try:
            clip = request.decode(self.config)
        except FrameError as err:
            return err.status, json.dumps({"code": err.status, "type": err.kind, "message": str(err)})
        sizes = clip.own_sizes
        return 200, json.dumps({"frames": [{"width": w, "height": h} for h, w in sizes]})
