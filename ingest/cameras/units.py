"""What a camera sends: one `Unit` per request (a segment or a frame)."""

from __future__ import annotations

from dataclasses import dataclass

#: Why a connection ended when its source ran out (`disconnected`'s reason): a file's end, no error.
END_OF_STREAM = "end of stream"


@dataclass(frozen=True, slots=True)
class Unit:
    """One request's body and what the results need to know about it.

    Attributes:
        seq: the camera's sequence number (`X-Frame-Id`, the results' `segment`); never reused.
        body: the bytes to POST.
        content_type: `video/mp2t` or `image/jpeg`.
        capture_time: wall clock of its first frame (`X-Capture-Time`).
        pts: stream time of its first frame, seconds.
        frames: frames in it (before any sampling by the server).
        sample_fps: `X-Sample-Fps`, or None.
        frame_times: (pts, capture time) of each frame, in presentation order (segments).
        session: the camera's connection it came from (1 for the first): a tracker starts anew
            with each connection.
        preview: the segment remuxed into fragmented MP4 for the web view (`ingest.web.view`), made
            only while someone watches the camera; None otherwise.
        motion: `X-Motion` (`ingest.cameras.looking`), or None (motion off).
        still: a frames-mode frame nobody needs to look at, not sent: its (width, height), motion
            boxes and whether lighting changed; None for a unit to send.
    """

    seq: int
    body: bytes
    content_type: str
    capture_time: float
    pts: float
    frames: int
    sample_fps: float | None = None
    frame_times: tuple[tuple[float, float], ...] = ()
    session: int = 0
    preview: bytes | None = None
    motion: str | None = None
    still: tuple[int, int, tuple[tuple[int, int, int, int], ...], bool] | None = None

    def capture_at(self, pts: float) -> float:
        """The capture time of the unit's frame nearest to stream time `pts`."""
        if not self.frame_times:
            return self.capture_time
        return min(self.frame_times, key=lambda t: abs(t[0] - pts))[1]

    def headers(self, camera: str) -> dict[str, str]:
        """The request headers of DESIGN section 4 for this unit of `camera`."""
        out = {"Content-Type": self.content_type, "X-Stream-Id": camera, "X-Frame-Id": str(self.seq),
               "X-Capture-Time": f"{self.capture_time:.6f}"}
        if self.sample_fps:
            out["X-Sample-Fps"] = f"{self.sample_fps:g}"
        if self.motion is not None:
            out["X-Motion"] = self.motion
        return out


@dataclass(frozen=True, slots=True)
class Recorded:
    """What the reader hands `--record` with each segment: its stream's codec and picture size."""

    codec: str
    width: int
    height: int
