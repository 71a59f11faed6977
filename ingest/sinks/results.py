"""An answer -> the result lines of DESIGN section 4c: one per frame, or one for an error."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ingest.cameras.client import Answer
from ingest.cameras.units import Unit

_ANSWERS = ("outputs", "detections", "classes", "segments")
#: What the handler says of a frame when the camera's motion is on (`X-Motion`; issue 48).
_MOTION = ("looked", "regions", "motion", "lighting")


def result_lines(camera: str, unit: Unit, answer: Answer, now: float) -> list[dict[str, Any]]:
    """Each answered frame as a line, or one line with the error's `type` and `message`.

    A frame's `pts` is the unit's first pts plus the frame's distance from the answer's first pts
    (the server's container may shift all times); its `capture_time` is the one the unit holds
    for that pts.

    Args:
        camera: the camera's name.
        unit: what was sent.
        answer: TorchServe's answer (status None: nothing answered).
        now: the wall clock when the answer came.
    """
    frames = (answer.body or {}).get("frames") if answer.status == 200 else None
    if not isinstance(frames, list) or not frames:
        return [_error(camera, unit, answer, now)]
    times = [f.get("pts") for f in frames]
    first = min((t for t in times if isinstance(t, (int, float))), default=None)
    lines = []
    for frame, pts in zip(frames, times):
        offset = pts - first if first is not None and isinstance(pts, (int, float)) else 0.0
        capture = unit.capture_at(unit.pts + offset)
        line = {"camera": camera, "segment": unit.seq, "pts": round(unit.pts + offset, 6),
                "capture_time": round(capture, 6), "status": 200, "width": frame.get("width"),
                "height": frame.get("height")}
        # The answer as the server gave it: `outputs` (task: raw), or `detections`, `classes`, `segments`;
        # with motion on, what the model looked at (a frame with `looked: false` has no answer).
        line.update({key: value for key, value in frame.items() if key in _ANSWERS or key in _MOTION})
        line["latency_ms"] = round((now - capture) * 1000, 1)
        lines.append(line)
    return lines


def unlooked_line(camera: str, unit: Unit, width: int, height: int, motion: Sequence[Sequence[int]],
                  now: float) -> dict[str, Any]:
    """The line of a frame the bridge did not send (frames mode, motion on, nothing worth a look):
    a 200 the model never saw, so `looked: false` and no `detections` (it is not a frame without
    objects: the tracker keeps its tracks as they were).

    Args:
        camera: the camera's name.
        unit: the frame, as it would have been sent (its `seq`, `pts`, `capture_time`, `session`).
        width: the frame's width, pixels.
        height: the frame's height, pixels.
        motion: the motion boxes found in it (x1, y1, x2, y2), frame pixels; `[]` for none.
        now: the wall clock when it was decided.
    """
    return {"camera": camera, "segment": unit.seq, "pts": round(unit.pts, 6),
            "capture_time": round(unit.capture_time, 6), "status": 200, "width": width, "height": height,
            "looked": False, "regions": [], "motion": [[int(v) for v in box] for box in motion],
            "latency_ms": round((now - unit.capture_time) * 1000, 1)}


def _error(camera: str, unit: Unit, answer: Answer, now: float) -> dict[str, Any]:
    """The error line; a 200 without frames (its body not strict JSON, or no `frames` in it) is
    a `BadAnswer`, saying why."""
    body = answer.body or {}
    if answer.status == 200:
        kind, message = "BadAnswer", answer.error or "the answer holds no `frames` list with a frame in it"
    else:
        kind = body.get("type") or ("Unavailable" if answer.status is None else f"HTTP{answer.status}")
        message = body.get("message") or answer.error or ""
    return {"camera": camera, "segment": unit.seq, "pts": round(unit.pts, 6),
            "capture_time": round(unit.capture_time, 6), "status": answer.status, "type": str(kind),
            "message": str(message)[:500], "latency_ms": round((now - unit.capture_time) * 1000, 1)}
