"""Opening a camera with PyAV: RTSP(S) over TCP or UDP, HTTP MJPEG, or a local file."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ingest.config import Camera

if TYPE_CHECKING:
    import av.container

#: Seconds to connect and read the stream's headers.
OPEN_TIMEOUT_S = 10.0


def options(camera: Camera) -> dict[str, str]:
    """FFmpeg's demuxer options for the camera's URL."""
    scheme = urlsplit(camera.url).scheme.lower()
    if scheme == "rtsp":
        return {"rtsp_transport": camera.transport.value}
    if scheme == "rtsps":  # RTSP over TLS carries RTP interleaved: TCP whatever is asked
        return {"rtsp_transport": "tcp"}
    return {}


def path(camera: Camera) -> str:
    """What FFmpeg opens: the URL, or a file's path (`file://` stripped)."""
    parts = urlsplit(camera.url)
    return parts.path if parts.scheme.lower() == "file" else camera.url


def open_camera(camera: Camera) -> av.container.InputContainer:
    """The camera's input, opened; reads time out after `stall_seconds` without data.

    Raises:
        av.error.FFmpegError: whatever FFmpeg met (its message may hold the URL: redact it).
    """
    import av

    return av.open(path(camera), "r", options=options(camera),
                   timeout=(min(OPEN_TIMEOUT_S, max(camera.stall_seconds, 2.0)), camera.stall_seconds))


class Pacer:
    """Holds a file's packets back to the file's own frame rate (as a camera would send them)."""

    def __init__(self) -> None:
        self._anchor: tuple[float, float] | None = None  # (monotonic time, pts)

    def wait(self, pts: float | None, stop: threading.Event) -> None:
        """Waits until the packet at `pts` seconds is due (or `stop` is set)."""
        if pts is None:
            return
        now = time.monotonic()
        if self._anchor is None or pts < self._anchor[1]:
            self._anchor = (now, pts)
        due = self._anchor[0] + (pts - self._anchor[1])
        if due > now:
            stop.wait(due - now)
