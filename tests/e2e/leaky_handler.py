"""A deliberately leaking handler: keeps every request body. The soak check must catch it."""

from handler.service import VideoFrameHandler


class LeakyFrameHandler(VideoFrameHandler):
    def handle(self, data, context):
        self.__dict__.setdefault("kept", []).append([bytes(row.get("body") or b"") for row in data])
        return super().handle(data, context)
