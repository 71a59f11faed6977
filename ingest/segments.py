"""Segments mode: H.264/H.265 packets remuxed, never decoded, into MPEG-TS cut at key frames."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ingest.clock import CaptureClock
from ingest.units import Unit

if TYPE_CHECKING:
    import av
    import av.container

#: Codecs MPEG-TS carries that the server decodes; others go in frames mode.
REMUXABLE = ("h264", "hevc")
#: A segment that reaches this many packets without a key frame to cut at is thrown away.
MAX_PACKETS = 600


def pts_seconds(packet: av.Packet[Any]) -> float | None:
    """The packet's presentation time in seconds (its decode time when it has none)."""
    stamp = packet.pts if packet.pts is not None else packet.dts
    if stamp is None or packet.time_base is None:
        return None
    return float(stamp * packet.time_base)


class _Open:
    """The segment being written: its muxer over a memory buffer."""

    def __init__(self, template: av.VideoStream, pts: float) -> None:
        import av

        self.buffer = io.BytesIO()
        self.container = av.open(self.buffer, "w", format="mpegts")
        self.stream = self.container.add_stream_from_template(template)
        self.pts, self.packets = pts, 0
        self.arrivals: list[tuple[float, float]] = []  # (pts, arrival) of each packet

    def close(self) -> bytes:
        self.container.close()
        return self.buffer.getvalue()


class Segmenter:
    """Cuts one connection's packets into segments.

    Args:
        stream: the input's video stream (the template of each segment's stream).
        segment_seconds: a segment is cut at the first key frame this long after its start.
        clock: the camera's capture clock.
        issue: hands out the camera's next sequence number.
        sample_fps: `X-Sample-Fps` for the server, or None for every frame.
        oversized: called when a segment is thrown away for lack of key frames.
    """

    def __init__(self, stream: av.VideoStream, segment_seconds: float, clock: CaptureClock,
                 issue: Callable[[], int], sample_fps: float | None = None,
                 oversized: Callable[[], None] = lambda: None) -> None:
        self._template = stream
        self._seconds = segment_seconds
        self._clock = clock
        self._issue = issue
        self._fps = sample_fps
        self._oversized = oversized
        self._open: _Open | None = None

    def push(self, packet: av.Packet[Any]) -> list[Unit]:
        """Takes one packet; returns the segment it completed, if any."""
        pts = pts_seconds(packet)
        if pts is None or packet.size == 0:
            return []
        arrived = self._clock.observe(pts)
        done = []
        if self._open is not None and packet.is_keyframe and pts - self._open.pts >= self._seconds * 0.999:
            done = self.flush()
        if self._open is None:
            if not packet.is_keyframe:
                return done  # a segment starts at a key frame: the server decodes it alone
            self._open = _Open(self._template, pts)
        packet.stream = self._open.stream
        self._open.container.mux(packet)
        self._open.packets += 1
        self._open.arrivals.append((pts, arrived))
        if self._open.packets >= MAX_PACKETS:
            self._open.container.close()
            self._open = None
            self._oversized()
        return done

    def flush(self) -> list[Unit]:
        """The segment being written, closed (at a cut, or at the end of a connection)."""
        segment, self._open = self._open, None
        if segment is None:
            return []
        body = segment.close()
        # Stamped now: the offset has seen every packet of the segment (and of a burst it came in).
        times = tuple((pts, self._clock.capture(pts, arrived)) for pts, arrived in sorted(segment.arrivals))
        return [Unit(self._issue(), body, "video/mp2t", times[0][1], segment.pts, segment.packets, self._fps, times)]
