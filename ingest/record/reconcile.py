"""At start, the index and the disk made to agree (a crash or SIGKILL may have stopped anything
half-way), before anything is written:

- a row whose file is gone goes; a file shorter than its rows say (the last segment was being
  written) keeps its last segment's complete 188-byte MPEG-TS packets, or drops it if none;
- a recording, clip or snapshot file no row names goes, as do half-written `.part` files;
- a clip marked ready whose file is gone is made again;
- every event of the results file after the last checkpoint that the index lacks is added, with
  its clip and snapshot to make (the results line is written before the recorder sees it); the
  snapshots of the newest events that lack one are made.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from typing import TYPE_CHECKING

from ingest.record.index import EVENTS, Index, event_row

if TYPE_CHECKING:
    from ingest.record.store import Store

logger = logging.getLogger(__name__)

TS_PACKET = 188


def reconcile(recorder: Store) -> tuple[int, list[str]]:
    """Makes the index and `recorder.directory` agree; returns the bytes they hold and the events
    whose snapshot is still to make (the newest 1000: the process stopped before they were)."""
    index = recorder.index
    fixed = sum(_file(recorder, row["path"]) for row in index.read("SELECT path FROM files"))
    fixed += _orphans(recorder)
    with index.writing() as db:
        for row in db.execute("SELECT id, path FROM clips WHERE state = 'ready'").fetchall():
            if not (recorder.directory / row["path"]).is_file():
                db.execute("UPDATE clips SET state = 'pending', path = NULL, bytes = 0 WHERE id = ?", (row["id"],))
                fixed += 1
    fixed += _results(recorder)
    snapshots = [row["id"] for row in index.read("SELECT id FROM events WHERE snapshot IS NULL ORDER BY at DESC "
                                                   "LIMIT 1000")]
    for row in index.read("SELECT camera, max(end) AS end FROM segments GROUP BY camera"):
        recorder.recorded_to[row["camera"]] = row["end"]
    if fixed:
        logger.warning("recorder: %d things in %s did not agree with the index (a crash?): fixed", fixed,
                       recorder.directory)
    used = sum(int(index.read(sql)[0][0] or 0) for sql in (
        "SELECT sum(bytes) FROM files", "SELECT sum(bytes) FROM clips", "SELECT sum(snapshot_bytes) FROM events"))
    return used, snapshots


def _file(recorder: Store, rel: str) -> int:
    """One recording file against its segments' rows; returns how many things were fixed."""
    index: Index = recorder.index
    path = recorder.directory / rel
    size = path.stat().st_size if path.is_file() else -1
    rows = index.read("SELECT id, offset, bytes FROM segments WHERE path = ? ORDER BY offset", (rel,))
    kept, fixed = 0, 0
    with index.writing() as db:
        for row in rows:
            if row["offset"] + row["bytes"] <= size and row["offset"] == kept:
                kept = row["offset"] + row["bytes"]
                continue
            whole = (size - row["offset"]) // TS_PACKET * TS_PACKET if row["offset"] == kept and size > kept else 0
            if whole > 0:
                db.execute("UPDATE segments SET bytes = ? WHERE id = ?", (whole, row["id"]))
                kept += whole
            else:
                db.execute("DELETE FROM segments WHERE id = ?", (row["id"],))
            fixed += 1
        if kept == 0:
            db.execute("DELETE FROM files WHERE path = ?", (rel,))
        else:
            db.execute("UPDATE files SET bytes = ? WHERE path = ?", (kept, rel))
    if kept == 0 and size >= 0:
        path.unlink()
        fixed += 1
    elif size > kept:
        os.truncate(path, kept)
        fixed += 1
    return fixed + (size < 0)


def _orphans(recorder: Store) -> int:
    """Files no row names (and `.part` files) deleted; returns how many."""
    index = recorder.index
    named = {row[0] for row in index.read("SELECT path FROM files UNION ALL SELECT path FROM clips WHERE path "
                                          "IS NOT NULL UNION ALL SELECT snapshot FROM events WHERE snapshot IS NOT NULL")}
    gone = 0
    for camera in [p for p in recorder.directory.iterdir() if p.is_dir()]:
        for path in camera.rglob("*"):
            rel = path.relative_to(recorder.directory).as_posix()
            if path.is_file() and rel not in named and path.suffix in (".ts", ".mp4", ".jpg", ".part"):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                gone += 1
    return gone


def _results(recorder: Store) -> int:
    """Events of the results file (after the last checkpoint) the index lacks, added; how many."""
    path = recorder.results
    if path is None or not path.is_file():
        return 0
    size = path.stat().st_size
    stored, _, offset = (recorder.index.meta("results") or "").partition("\t")
    start = int(offset) if stored == str(path) and offset.isdigit() and int(offset) <= size else 0
    added = 0
    with path.open("rb") as file:
        file.seek(start)
        for raw in file:
            if b'"event_id"' not in raw or not raw.endswith(b"\n"):
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            settings = recorder.settings(line.get("camera"))
            if line.get("event") not in EVENTS or settings is None:
                continue
            row = event_row(line, None)
            if recorder.index.add_event(row):
                recorder.index.clip_for(row["id"], row["camera"], row["track_id"], row["at"] - settings.pre_seconds,
                                        row["at"] + settings.post_seconds)
                added += 1
    return added
