"""Recorded segments remuxed (never re-encoded) into one MP4 a browser plays, and event snapshots.

A clip starts at the key frame at or before its start (every recorded segment starts with one) and
ends with the last frame at or before its end; `faststart` puts the index first, so a browser
plays while it downloads and seeks by range requests.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ingest.record.index import Segment

MP4_OPTIONS = {"movflags": "+faststart"}
#: Seconds a segment's capture times may stray from its stream times before it counts as a new
#: connection's (a reconnect restarts pts): then its frames are placed by capture time.
DISCONTINUITY_S = 0.5


def read_segment(directory: Path, segment: Segment) -> bytes:
    with (directory / segment.path).open("rb") as file:
        file.seek(segment.offset)
        return file.read(segment.bytes)


def runs(segments: Sequence[Segment]) -> list[list[Segment]]:
    """`segments` in runs whose stream time goes on unbroken (one connection's, back to back):
    each run is read as one MPEG-TS (opening a container costs tens of milliseconds at 1080p;
    copying a second of packets, about one)."""
    out: list[list[Segment]] = []
    for segment in segments:
        run = out[-1] if out else None
        if run is not None and abs((segment.start - run[0].start) - (segment.pts - run[0].pts)) <= DISCONTINUITY_S \
                and segment.start - run[-1].end <= DISCONTINUITY_S:
            run.append(segment)
        else:
            out.append([segment])
    return out


def remux(directory: Path, segments: Sequence[Segment], start: float, end: float, out: Path) -> float:
    """Writes the video of [start, end] (capture times) from `segments` (in order, the first
    holding `start`) to `out` as MP4; returns its first frame's capture time.

    Segments of another codec or size than the first are left out (a clip has one stream).

    Raises:
        ValueError: no segment has video of the range.
        av.error.FFmpegError, OSError: a segment does not read or the file does not write.
    """
    import av

    usable = [s for s in segments if s.end > start and s.start <= end]
    if not usable:
        raise ValueError("no recording holds this time (deleted, or never recorded)")
    first = usable[0]
    same = [s for s in usable if (s.codec, s.width, s.height) == (first.codec, first.width, first.height)]
    partial = out.with_name(f".{out.name}.part")
    with av.open(str(partial), "w", format="mp4", options=MP4_OPTIONS) as output:
        stream = None
        last_dts = -1
        for run in runs(same):
            body = b"".join(read_segment(directory, segment) for segment in run)
            with av.open(io.BytesIO(body), "r", format="mpegts") as source:
                video = source.streams.video[0]
                if stream is None:
                    stream = output.add_stream_from_template(video)
                # Seconds added to a packet's stream time to place it on the clip's time.
                shift = run[0].start - first.start - run[0].pts
                last_dts = _copy(output, stream, source.demux(video), run[0], shift, end, last_dts)
    os.replace(partial, out)
    return first.start


def _copy(output: Any, stream: Any, packets: Any, segment: Segment, shift: float, end: float, last_dts: int) -> int:
    """Muxes a run's packets up to `end` (`segment`: its first), their times moved by `shift`;
    returns the last dts."""
    for packet in packets:
        if packet.dts is None or packet.time_base is None:
            continue  # the demuxer's flush packet
        base = packet.time_base
        if segment.start + float(packet.dts * base) - segment.pts > end:
            break
        step = round(shift / base)
        dts = packet.dts + step
        if dts <= last_dts:  # a new connection's first packet must still come after the last
            step += last_dts + 1 - dts
            dts = last_dts + 1
        packet.dts = dts
        packet.pts = (packet.pts if packet.pts is not None else packet.dts - step) + step
        packet.stream = stream
        output.mux(packet)
        last_dts = dts
    return last_dts


def frame_at(directory: Path, segment: Segment, at: float) -> Any:
    """The segment's frame nearest capture time `at`, as a PIL image (None: none decodes)."""
    import av

    best, best_gap = None, float("inf")
    with av.open(io.BytesIO(read_segment(directory, segment)), "r", format="mpegts") as source:
        for frame in source.decode(video=0):
            if frame.time is None:
                continue
            gap = abs(segment.start + float(frame.time) - segment.pts - at)
            if gap > best_gap:
                break
            best, best_gap = frame, gap
    return None if best is None else best.to_image()
