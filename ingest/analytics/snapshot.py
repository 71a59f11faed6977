"""`--snapshot DIR`: every `snapshot_seconds`, `DIR/CAMERA.jpg` shows the camera's last answered
frame with its tracked boxes, track ids, zones and lines drawn, so that an operator sees where a
zone is. Frames mode draws on the JPEG that was sent; segments mode decodes the first frame of
the segment (only when a picture is due). Written to a temporary name, then renamed.

Decoding, drawing and writing happen on the camera's snapshot thread, never on its result path:
a picture that falls due while the previous one is still being made (a slow disk) is skipped.
"""

from __future__ import annotations

import io
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingest.analytics.scene import Scene
from ingest.cameras.units import Unit

if TYPE_CHECKING:
    from PIL import Image

logger = logging.getLogger(__name__)

ZONE_COLOUR = (255, 214, 0)
LINE_COLOUR = (0, 200, 255)
BOX_COLOUR = (60, 255, 60)

#: told of a picture that failed: ("snapshot", the path, the error)
Failed = Callable[[str, str, Exception], None]


class Snapshots:
    """The pictures of one camera, made by one background thread (started with the first).

    Args:
        folder: where `CAMERA.jpg` goes (made if missing).
        camera: the camera's name.
        every_s: seconds between pictures (monotonic clock).
        failed: told of a picture that could not be made (default: logged).
    """

    def __init__(self, folder: Path, camera: str, every_s: float, failed: Failed | None = None) -> None:
        self.path = Path(folder) / f"{camera}.jpg"
        self.every_s = every_s
        self.skipped = 0  # pictures due while the previous one was still being made
        self.written = 0
        self._failed = failed or (lambda _, path, exc: logger.warning("snapshot %s not written: %s: %s", path,
                                                                      type(exc).__name__, exc))
        self._due = 0.0
        self._ready = threading.Condition()
        self._job: tuple[Unit, list[dict[str, Any]], Scene] | None = None
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def offer(self, unit: Unit, line: dict[str, Any], scene: Scene) -> bool:
        """Hands `line` (the unit's first answered frame) to the writer if a picture is due and
        the writer is free; True if handed. Returns at once."""
        now = time.monotonic()
        if now < self._due:
            return False
        with self._ready:
            if self._closed:
                return False
            if self._busy or self._job is not None:
                self.skipped += 1
                return False
            self._due = now + self.every_s
            self._job = (unit, list(line.get("detections") or []), scene)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"snapshot-{self.path.stem}", daemon=True)
                self._thread.start()
            self._ready.notify()
        return True

    def close(self) -> None:
        """No more pictures; the one being made is finished."""
        with self._ready:
            self._closed = True
            self._ready.notify()

    def _run(self) -> None:
        while True:
            with self._ready:
                while self._job is None and not self._closed:
                    self._ready.wait()
                if self._job is None:
                    return
                job, self._job, self._busy = self._job, None, True
            try:
                self._write(*job)
            except Exception as exc:  # a picture must never stop the camera
                self._failed("snapshot", str(self.path), exc)
            finally:
                with self._ready:
                    self._busy = False

    def _write(self, unit: Unit, detections: list[dict[str, Any]], scene: Scene) -> None:
        image = first_frame(unit)
        if image is None:
            return
        data = draw(image, detections, scene)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.path.name}.part")
        partial.write_bytes(data)
        os.replace(partial, self.path)
        self.written += 1


def first_frame(unit: Unit) -> Image.Image | None:
    """The unit's first frame as RGB (a JPEG, or the first decodable frame of a segment)."""
    from PIL import Image

    if unit.content_type == "image/jpeg":
        return Image.open(io.BytesIO(unit.body)).convert("RGB")
    import av

    with av.open(io.BytesIO(unit.body), "r") as container:
        for frame in container.decode(video=0):
            image: Image.Image = frame.to_image()
            return image
    return None


def draw(image: Image.Image, detections: list[dict[str, Any]], scene: Scene) -> bytes:
    """`image` with `scene`'s zones and lines and the tracked `detections`, as JPEG."""
    from PIL import ImageDraw

    pen = ImageDraw.Draw(image)
    size = image.size
    width = max(3, round(min(size) / 160))
    for zone in scene.zones:
        points = zone.polygon.pixels(*size)
        pen.polygon(points, outline=ZONE_COLOUR, width=width)
        pen.text((points[0][0] + 2 * width, points[0][1] + 2 * width), zone.name, fill=ZONE_COLOUR)
    for line in scene.lines:
        start, end = line.segment.pixels(*size)
        pen.line([start, end], fill=LINE_COLOUR, width=width)
        pen.text(((start[0] + end[0]) / 2 + 2 * width, (start[1] + end[1]) / 2), line.name, fill=LINE_COLOUR)
    for detection in detections:
        x1, y1, x2, y2 = detection["box"]
        pen.rectangle((x1, y1, x2, y2), outline=BOX_COLOUR, width=width)
        text = f"#{detection.get('track_id', '?')} {detection.get('label', '')}".strip()
        pen.text((x1 + width, max(0.0, y1 - 12)), text, fill=BOX_COLOUR)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=85)
    return out.getvalue()
