"""Segments mode: H.264/H.265 packets remuxed, never decoded, into MPEG-TS cut at key frames.

While someone watches the camera in the web view, the same packets are also remuxed into a
fragmented MP4 (`Unit.preview`), which a browser plays through Media Source Extensions.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ingest.cameras.clock import CaptureClock
from ingest.cameras.units import Unit

if TYPE_CHECKING:
    import av
    import av.container

#: Codecs MPEG-TS carries that the server decodes; others go in frames mode.
REMUXABLE = ("h264", "hevc")
#: A segment that reaches this many packets without a key frame to cut at is thrown away.
MAX_PACKETS = 600
#: Each preview is a whole fragmented MP4 (its own init segment), played one after another.
MP4_FLAGS = {"movflags": "frag_keyframe+empty_moov+default_base_moof"}

logger = logging.getLogger(__name__)


def pts_seconds(packet: av.Packet[Any]) -> float | None:
    """The packet's presentation time in seconds (its decode time when it has none)."""
    stamp = packet.pts if packet.pts is not None else packet.dts
    if stamp is None or packet.time_base is None:
        return None
    return float(stamp * packet.time_base)


class _Muxer:
    """A container over a memory buffer, with one stream copied from `template`."""

    def __init__(self, template: av.VideoStream, format: str, options: dict[str, str] | None = None) -> None:
        import av

        self.buffer = io.BytesIO()
        self.container = av.open(self.buffer, "w", format=format, options=options or {})
        self.stream = self.container.add_stream_from_template(template)

    def mux(self, packet: av.Packet[Any]) -> None:
        packet.stream = self.stream
        self.container.mux(packet)

    def close(self) -> bytes:
        self.container.close()
        return self.buffer.getvalue()


class _Open:
    """The segment being written: its MPEG-TS, and its MP4 preview while someone watches."""

    def __init__(self, template: av.VideoStream, pts: float, preview: bool) -> None:
        self.ts = _Muxer(template, "mpegts")
        self.mp4 = _Muxer(template, "mp4", MP4_FLAGS) if preview else None
        self.pts, self.packets = pts, 0
        self.arrivals: list[tuple[float, float]] = []  # (pts, arrival) of each packet

    def mux(self, packet: av.Packet[Any]) -> None:
        self.ts.mux(packet)
        if self.mp4 is not None:
            try:
                self.mp4.mux(packet)
            except Exception as exc:  # the preview must never cost the camera its segment
                logger.warning("web view: this segment has no preview (%s: %s)", type(exc).__name__, exc)
                self.mp4 = None

    def close(self) -> tuple[bytes, bytes | None]:
        body = self.ts.close()
        if self.mp4 is None:
            return body, None
        try:
            return body, self.mp4.close()
        except Exception as exc:
            logger.warning("web view: this segment has no preview (%s: %s)", type(exc).__name__, exc)
            return body, None


class Segmenter:
    """Cuts one connection's packets into segments.

    Args:
        stream: the input's video stream (the template of each segment's stream).
        segment_seconds: a segment is cut at the first key frame this long after its start.
        clock: the camera's capture clock.
        issue: hands out the camera's next sequence number.
        sample_fps: `X-Sample-Fps` for the server, or None for every frame.
        oversized: called when a segment is thrown away for lack of key frames.
        preview: whether someone watches the camera (asked at each segment's first packet):
            then the segment gets its MP4 preview too.
    """

    def __init__(self, stream: av.VideoStream, segment_seconds: float, clock: CaptureClock,
                 issue: Callable[[], int], sample_fps: float | None = None,
                 oversized: Callable[[], None] = lambda: None,
                 preview: Callable[[], bool] = lambda: False) -> None:
        self._template = stream
        self._seconds = segment_seconds
        self._clock = clock
        self._issue = issue
        self._fps = sample_fps
        self._oversized = oversized
        self._preview = preview
        self._open: _Open | None = None
        self.recorded: Callable[[Unit], None] | None = None  # `--record`: told of each segment made

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
            self._open = _Open(self._template, pts, self._preview())
        self._open.mux(packet)
        self._open.packets += 1
        self._open.arrivals.append((pts, arrived))
        if self._open.packets >= MAX_PACKETS:
            self._open.close()
            self._open = None
            self._oversized()
        return done

    def flush(self) -> list[Unit]:
        """The segment being written, closed (at a cut, or at the end of a connection)."""
        segment, self._open = self._open, None
        if segment is None:
            return []
        body, preview = segment.close()
        # Stamped now: the offset has seen every packet of the segment (and of a burst it came in).
        times = tuple((pts, self._clock.capture(pts, arrived)) for pts, arrived in sorted(segment.arrivals))
        unit = Unit(self._issue(), body, "video/mp2t", times[0][1], segment.pts, segment.packets, self._fps, times,
                    preview=preview)
        if self.recorded is not None:
            self.recorded(unit)
        return [unit]
