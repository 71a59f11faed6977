"""A handler that does nothing but answer `{}`: the transport's ceiling, for comparison."""

from __future__ import annotations

from ts.torch_handler.base_handler import BaseHandler


class NoopHandler(BaseHandler):
    """Reads nothing, runs nothing; one `{}` per request."""

    def initialize(self, context) -> None:
        self.initialized = True

    def handle(self, data, context) -> list[str]:
        for idx in range(len(data)):
            context.set_response_content_type(idx, "application/json")
        return ["{}"] * len(data)
