"""A camera's reader: connect, demux, cut or sample into units; reconnect with backoff, forever."""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from ingest.cameras.backoff import Backoff
from ingest.cameras.clock import CaptureClock
from ingest.cameras.frames import FrameSender, arrival_timing
from ingest.cameras.looking import Looking
from ingest.cameras.segments import REMUXABLE, Segmenter, pts_seconds
from ingest.cameras.source import Pacer, open_camera
from ingest.cameras.units import END_OF_STREAM, Recorded, Unit
from ingest.config import Camera, Mode
from ingest.shared import Shared

if TYPE_CHECKING:
    import av

logger = logging.getLogger(__name__)

#: Demuxers whose timestamps are made up (HTTP MJPEG: 25 fps whatever the camera sends).
UNTIMED = ("mpjpeg",)
#: Packets (frames mode) or segments (answered 400 CorruptFrame) in a row that do not decode
#: before the connection is made again: a camera that changed codec or profile mid-stream.
UNDECODABLE_IN_A_ROW = 30


class Cutter(Protocol):
    """Turns packets into units (segments or frames)."""

    def push(self, packet: av.Packet[Any]) -> list[Unit]: ...

    def flush(self) -> list[Unit]: ...


class Recording:
    """Frames mode's recording: the packets read, remuxed into segments for `--record` (after the
    frame sender has decoded them: muxing moves a packet's times)."""

    def __init__(self, segmenter: Segmenter | None, keep: Callable[[Unit], None] = lambda unit: None) -> None:
        self._segmenter, self._keep = segmenter, keep

    def push(self, packet: av.Packet[Any]) -> None:
        if self._segmenter is not None:
            for unit in self._segmenter.push(packet):
                self._keep(unit)

    def flush(self) -> None:
        if self._segmenter is not None:
            for unit in self._segmenter.flush():
                self._keep(unit)


class Reader:
    """Reads one camera until stopped, handing each unit to `emit`.

    Args:
        camera: the camera.
        shared: the process's services.
        issue: the camera's next sequence number.
        emit: takes each unit (queues it; may wait under the `every` policy).
        dropped: counts a unit lost before it existed (reason).
        ended: called when a connection has ended (after its last unit was emitted).
    """

    def __init__(self, camera: Camera, shared: Shared, issue: Callable[[], int], emit: Callable[[Unit], None],
                 dropped: Callable[[str], None], ended: Callable[[], None] = lambda: None) -> None:
        self.camera = camera
        self._shared = shared
        self._issue = issue
        self._emit = emit
        self._dropped = dropped
        self._ended = ended
        self._clock = CaptureClock(shared.now)
        self.stop = threading.Event()
        self._renew: str | None = None  # why the connection should be made again (set by the senders)
        self._connections = 0  # connections made
        settings = camera.effective_motion
        self._looking = Looking(settings) if settings is not None else None

    def renew(self, reason: str) -> None:
        """Asks for a new connection (the stream no longer decodes: a codec change, say)."""
        self._renew = reason

    def _take_renew(self) -> str | None:
        reason, self._renew = self._renew, None
        return reason

    def run(self) -> None:
        """Connects and reads until `stop` (or the end of a file that does not loop)."""
        backoff = Backoff()
        name, lines = self.camera.name, self._shared.lines
        while not self.stop.is_set():
            started = time.monotonic()
            reason = self._session()
            self._shared.metrics.up(name, False)
            self._ended()
            if reason is not None:
                lines.event(name, "disconnected", reason=reason)
            if self.stop.is_set() or (reason == END_OF_STREAM and self.camera.is_file and not self.camera.loop):
                return
            if reason == END_OF_STREAM and self.camera.loop:
                continue  # a looping file starts again at once
            delay = backoff.next_delay(time.monotonic() - started)
            self._shared.metrics.reconnect(name)
            lines.event(name, "reconnecting", attempt=backoff.attempts, delay_s=round(delay, 3))
            self.stop.wait(delay)

    def _session(self) -> str | None:
        """One connection; returns why it ended (None: stopped)."""
        try:
            container = open_camera(self.camera)
        except Exception as exc:  # whatever the camera did: try again later
            return self._reason(exc)
        try:
            return self._demux(container)
        except Exception as exc:
            return self._reason(exc)
        finally:
            container.close()

    def _demux(self, container: av.container.InputContainer) -> str | None:
        if not container.streams.video:
            return "the source has no video stream"
        stream = container.streams.video[0]
        cutter = self._cutter(stream, container.format.name)
        record = self._recording(stream, cutter)
        self._clock.reconnected()
        if self._looking is not None:
            self._looking.reconnected()
        self._connections += 1
        self._renew = None
        self._shared.metrics.up(self.camera.name, True)
        context = stream.codec_context
        self._shared.lines.event(self.camera.name, "connected", url=self.camera.display_url, codec=context.name,
                                 width=context.width, height=context.height,
                                 mode=Mode.FRAMES.value if isinstance(cutter, FrameSender) else Mode.SEGMENTS.value)
        pacer = Pacer() if self.camera.is_file else None
        packets = 0
        try:
            for packet in container.demux(stream):
                packets += 1
                if self.stop.is_set():
                    return None
                renew = self._take_renew()
                if renew is not None:
                    return renew
                if pacer is not None:
                    pacer.wait(pts_seconds(packet), self.stop)
                for unit in cutter.push(packet):
                    self._emit(self._stamped(unit))
                record.push(packet)
        finally:
            for unit in cutter.flush():
                self._emit(self._stamped(unit))
            record.flush()
        if self.stop.is_set():
            return None
        return END_OF_STREAM if packets else "the stream ended before its first packet"

    def _recording(self, stream: av.VideoStream, cutter: Cutter) -> Recording:
        """What of this connection goes to `--record`: the segments sent (segments mode), or the
        stream remuxed into segments as it is read (frames mode), or nothing."""
        recorder, context, name = self._shared.recorder, stream.codec_context, self.camera.name
        if recorder is None or recorder.settings(name) is None:
            return Recording(None)
        if context.name not in REMUXABLE:
            logger.warning("camera %s sends %s: recordings and clips are of H.264 or H.265 only: not recorded",
                           name, context.name)
            return Recording(None)
        shape = Recorded(context.name, context.width, context.height)
        keep = functools.partial(recorder.segment, name, stream=shape)
        if isinstance(cutter, Segmenter):
            cutter.recorded = keep
            return Recording(None)
        counter = itertools.count(1)
        return Recording(Segmenter(stream, self.camera.segment_seconds, CaptureClock(self._shared.now),
                                   lambda: next(counter)), keep)

    def _stamped(self, unit: Unit) -> Unit:
        """The unit with its connection and, for a segment with motion on, its `X-Motion`."""
        if self._looking is not None and unit.content_type == "video/mp2t":
            return replace(unit, session=self._connections, motion=self._looking.segment(unit.pts))
        return replace(unit, session=self._connections)

    def _cutter(self, stream: av.VideoStream, demuxer: str) -> Cutter:
        camera = self.camera
        if camera.mode is Mode.SEGMENTS and stream.codec_context.name in REMUXABLE:
            view = self._shared.view
            return Segmenter(stream, camera.segment_seconds, self._clock, self._issue, camera.sample_fps,
                             oversized=lambda: self._dropped("no_key_frame"),
                             preview=(lambda: view.watched(camera.name)) if view is not None else lambda: False)
        if camera.mode is Mode.SEGMENTS:
            logger.warning("camera %s sends %s, which MPEG-TS segments do not carry: sending frames instead",
                           camera.name, stream.codec_context.name)
        fps = camera.effective_sample_fps or 5.0
        timing = arrival_timing() if demuxer in UNTIMED else pts_seconds
        web = self._shared.view
        return FrameSender(stream, fps, self._clock, self._issue, corrupt=self._corrupt, timing=timing,
                           looking=self._looking,
                           preview=(lambda: web.watched(camera.name)) if web is not None else lambda: False)

    def _corrupt(self, in_a_row: int) -> None:
        self._dropped("corrupt")
        if in_a_row >= UNDECODABLE_IN_A_ROW:
            self.renew(f"reconnect: {in_a_row} packets in a row do not decode")

    def _reason(self, exc: BaseException) -> str:
        import av

        if isinstance(exc, av.error.ExitError):
            return f"stalled: no data for {self.camera.stall_seconds:g} s"
        if not isinstance(exc, (av.error.FFmpegError, OSError)):
            logger.warning("camera %s: unexpected %s", self.camera.name, type(exc).__name__, exc_info=exc)
        text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return self._shared.redact(f"{type(exc).__name__}: {text}".replace(self.camera.url, self.camera.display_url))
