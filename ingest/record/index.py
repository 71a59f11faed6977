"""The recordings' index: SQLite (the standard library's `sqlite3`), WAL, at `DIR/index.sqlite3`.

Files hold segments back to back (`DIR/CAMERA/YYYY-MM-DD/HH/<start>.ts`, each at most
`FILE_SECONDS` long); a segment's row is committed before its bytes are written, so after a crash
only a file's last segment can be short (`ingest.record.reconcile`). Times are the cameras'
capture times (seconds since the epoch). One writer (the recorder's thread) and any readers (the
web view's threads, each its own connection).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, camera TEXT NOT NULL, start REAL NOT NULL,
    end REAL NOT NULL, bytes INTEGER NOT NULL, keep_until REAL NOT NULL);
CREATE INDEX IF NOT EXISTS files_start ON files (start);
CREATE INDEX IF NOT EXISTS files_keep ON files (keep_until);
CREATE TABLE IF NOT EXISTS segments (id INTEGER PRIMARY KEY, camera TEXT NOT NULL, start REAL NOT NULL,
    end REAL NOT NULL, path TEXT NOT NULL, offset INTEGER NOT NULL, bytes INTEGER NOT NULL, pts REAL NOT NULL,
    codec TEXT NOT NULL, width INTEGER NOT NULL, height INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS segments_camera_start ON segments (camera, start);
CREATE INDEX IF NOT EXISTS segments_path ON segments (path);
CREATE TABLE IF NOT EXISTS clips (id INTEGER PRIMARY KEY, camera TEXT NOT NULL, track_id INTEGER,
    start REAL NOT NULL, end REAL NOT NULL, path TEXT, bytes INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL DEFAULT 'pending', built REAL);
CREATE INDEX IF NOT EXISTS clips_state ON clips (state, end);
CREATE TABLE IF NOT EXISTS events (id TEXT PRIMARY KEY, camera TEXT NOT NULL, type TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '', place TEXT NOT NULL DEFAULT '', direction TEXT, track_id INTEGER,
    at REAL NOT NULL, start REAL NOT NULL, end REAL NOT NULL, box TEXT, snapshot TEXT,
    snapshot_bytes INTEGER NOT NULL DEFAULT 0, clip INTEGER, told INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS events_at ON events (at DESC, id DESC);
CREATE INDEX IF NOT EXISTS events_camera_at ON events (camera, at DESC, id DESC);
CREATE INDEX IF NOT EXISTS events_clip ON events (clip);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

#: The events that get a snapshot and a clip.
EVENTS = ("entered", "left", "crossed")
#: Events a page of the list holds at most.
MAX_PAGE = 200
#: Seconds a segment lasts at most (600 packets: `ingest.cameras.segments.MAX_PACKETS`, at 1 fps):
#: a bound on the index's search back from a time (without it, a query walks the camera's history).
MAX_SEGMENT_S = 600.0
#: Seconds a clip grows to at most by taking in its track's overlapping events (then a new one starts).
MAX_CLIP_S = 120.0


@dataclass(frozen=True, slots=True)
class Segment:
    """One recorded segment: `bytes` bytes at `offset` of `path` (relative to the directory)."""

    id: int
    camera: str
    start: float
    end: float
    path: str
    offset: int
    bytes: int
    pts: float
    codec: str
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class Clip:
    id: int
    camera: str
    track_id: int | None
    start: float
    end: float
    path: str | None
    bytes: int
    state: str


class Index:
    """The index at `path`: a write connection (under a lock) and one read connection per thread."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._write = self._connect()
        self._write.executescript(SCHEMA)
        self._local = threading.local()

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")  # a committed row survives a crash of the process
        connection.row_factory = sqlite3.Row
        return connection

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """One transaction of the writer, committed at the end (rolled back on an exception)."""
        with self._lock:
            self._write.execute("BEGIN IMMEDIATE")
            try:
                yield self._write
            except BaseException:
                self._write.execute("ROLLBACK")
                raise
            self._write.execute("COMMIT")

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Rows of a query, on this thread's own connection (readers never wait for the writer)."""
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._connect()
        return connection.execute(sql, args).fetchall()

    def close(self) -> None:
        with self._lock:
            self._write.close()

    # --- segments and files ---------------------------------------------------------------

    def add_segment(self, camera: str, start: float, end: float, path: str, offset: int, size: int, pts: float,
                    codec: str, width: int, height: int, keep_until: float) -> int:
        """The row of a segment about to be written (and its file's, made or grown)."""
        with self.writing() as db:
            db.execute("INSERT INTO files VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET "
                       "end = max(end, excluded.end), bytes = bytes + excluded.bytes, "
                       "keep_until = max(keep_until, excluded.keep_until)",
                       (path, camera, start, end, size, keep_until))
            cursor = db.execute("INSERT INTO segments (camera, start, end, path, offset, bytes, pts, codec, width, "
                                "height) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                (camera, start, end, path, offset, size, pts, codec, width, height))
            return int(cursor.lastrowid or 0)

    def keep(self, camera: str, start: float, end: float, until: float) -> None:
        """Files of `camera` holding video of [start, end] are kept at least `until`."""
        with self.writing() as db:
            db.execute("UPDATE files SET keep_until = ? WHERE camera = ? AND end >= ? AND start <= ? "
                       "AND keep_until < ?", (until, camera, start, end, until))

    def segments(self, camera: str, start: float, end: float) -> list[Segment]:
        """The camera's segments holding video of [start, end], in order, from the one holding `start`."""
        rows = self.read("SELECT * FROM segments WHERE camera = ? AND start > ? AND start <= ? AND end > ? "
                         "ORDER BY start", (camera, start - MAX_SEGMENT_S, end, start))
        return [Segment(**dict(row)) for row in rows]

    def spans(self, camera: str, start: float, end: float, gap: float = 2.0) -> list[tuple[float, float]]:
        """The camera's recorded time in [start, end], runs closer than `gap` joined (a timeline)."""
        out: list[list[float]] = []
        for row in self.read("SELECT start, end FROM segments WHERE camera = ? AND start > ? AND start < ? "
                             "AND end > ? ORDER BY start", (camera, start - MAX_SEGMENT_S, end, start)):
            if out and row["start"] - out[-1][1] <= gap:
                out[-1][1] = max(out[-1][1], row["end"])
            else:
                out.append([row["start"], row["end"]])
        return [(a, b) for a, b in out]

    # --- events and clips -----------------------------------------------------------------

    def add_event(self, event: dict[str, Any]) -> bool:
        """An event's row (`id`, `camera`, `type`, `label`, `place`, `direction`, `track_id`, `at`,
        `start`, `end`, `box`); False if it was there already."""
        row = {**event, "box": json.dumps(event["box"]) if event.get("box") is not None else None}
        with self.writing() as db:
            cursor = db.execute("INSERT OR IGNORE INTO events (id, camera, type, label, place, direction, track_id, "
                                "at, start, end, box) VALUES (:id, :camera, :type, :label, :place, :direction, "
                                ":track_id, :at, :start, :end, :box)", row)
            return cursor.rowcount == 1

    def clip_for(self, event_id: str, camera: str, track_id: int | None, start: float, end: float) -> int:
        """The event's clip: a clip of the same track whose time overlaps, grown to [start, end]
        (one already made is made again, longer; its file is replaced when that is ready) unless
        that would make it longer than `MAX_CLIP_S`, or a new one."""
        with self.writing() as db:
            found = db.execute("SELECT id FROM clips WHERE camera = ? AND track_id IS ? AND state != 'failed' "
                               "AND start <= ? AND end >= ? AND max(end, ?) - min(start, ?) <= ? "
                               "ORDER BY id DESC LIMIT 1",
                               (camera, track_id, end, start, end, start, MAX_CLIP_S)).fetchone()
            if found is None:
                clip = int(db.execute("INSERT INTO clips (camera, track_id, start, end) VALUES (?, ?, ?, ?)",
                                      (camera, track_id, start, end)).lastrowid or 0)
            else:
                clip = int(found["id"])
                db.execute("UPDATE clips SET start = min(start, ?), end = max(end, ?), state = 'pending' WHERE id = ?",
                           (start, end, clip))
            db.execute("UPDATE events SET clip = ? WHERE id = ?", (clip, event_id))
            return clip

    def pending_clips(self) -> list[Clip]:
        return [Clip(**{k: row[k] for k in Clip.__slots__})
                for row in self.read("SELECT * FROM clips WHERE state = 'pending' ORDER BY end")]

    def clip(self, clip_id: int) -> Clip | None:
        rows = self.read("SELECT * FROM clips WHERE id = ?", (clip_id,))
        return Clip(**{k: rows[0][k] for k in Clip.__slots__}) if rows else None

    def clip_done(self, clip_id: int, path: str | None, size: int, state: str, built: float,
                  start: float | None = None) -> list[str] | None:
        """The clip made (`ready`, its video from `start`: the key frame at or before the start
        asked) or not (`failed`); returns the ids of its events not yet told of it (None: the
        clip was deleted meanwhile)."""
        with self.writing() as db:
            if db.execute("UPDATE clips SET path = ?, bytes = ?, state = ?, built = ?, start = coalesce(?, start) "
                          "WHERE id = ?", (path, size, state, built, start, clip_id)).rowcount == 0:
                return None
            told = [row["id"] for row in db.execute("SELECT id FROM events WHERE clip = ? AND told = 0 ORDER BY at",
                                                     (clip_id,))]
            if state == "ready":
                db.execute("UPDATE events SET told = 1 WHERE clip = ?", (clip_id,))
            return told

    def snapshot_done(self, event_id: str, path: str, size: int) -> bool:
        """The event's snapshot written; False if the event was deleted meanwhile."""
        with self.writing() as db:
            return db.execute("UPDATE events SET snapshot = ?, snapshot_bytes = ? WHERE id = ?",
                              (path, size, event_id)).rowcount == 1

    def event(self, event_id: str) -> dict[str, Any] | None:
        rows = self.read("SELECT e.*, c.state AS clip_state, c.path AS clip_path, c.start AS clip_start, "
                         "c.end AS clip_end FROM events e LEFT JOIN clips c ON c.id = e.clip WHERE e.id = ?",
                         (event_id,))
        return _event(rows[0]) if rows else None

    def events(self, camera: str | None = None, label: str | None = None, place: str | None = None,
               since: float | None = None, until: float | None = None, before: tuple[float, str] | None = None,
               limit: int = 50) -> list[dict[str, Any]]:
        """Events newest first, filtered; `before` (at, id) is the last of the previous page (keyset
        paging: a page costs the same however deep)."""
        where: list[str] = []
        args: list[Any] = []
        for column, value in (("e.camera", camera), ("e.label", label), ("e.place", place)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if since is not None:
            where.append("e.at >= ?")
            args.append(since)
        if until is not None:
            where.append("e.at <= ?")
            args.append(until)
        if before is not None:
            where.append("(e.at < ? OR (e.at = ? AND e.id < ?))")
            args += [before[0], before[0], before[1]]
        sql = ("SELECT e.*, c.state AS clip_state, c.path AS clip_path, c.start AS clip_start, c.end AS clip_end "
               "FROM events e LEFT JOIN clips c ON c.id = e.clip"
               + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY e.at DESC, e.id DESC LIMIT ?")
        return [_event(row) for row in self.read(sql, [*args, max(1, min(limit, MAX_PAGE))])]

    def delete_event(self, event_id: str) -> tuple[str, list[str], int] | None:
        """The event's row gone: its camera, the files no row needs any more (its snapshot, and
        its clip when no other event shares it) to delete, and their bytes; None if it was gone."""
        with self.writing() as db:
            row = db.execute("SELECT camera, snapshot, snapshot_bytes, clip FROM events WHERE id = ?",
                             (event_id,)).fetchone()
            if row is None:
                return None
            db.execute("DELETE FROM events WHERE id = ?", (event_id,))
            gone, size = ([row["snapshot"]] if row["snapshot"] else []), int(row["snapshot_bytes"])
            if row["clip"] is not None and db.execute("SELECT 1 FROM events WHERE clip = ?", (row["clip"],)).fetchone() is None:
                clip = db.execute("SELECT path, bytes FROM clips WHERE id = ?", (row["clip"],)).fetchone()
                db.execute("DELETE FROM clips WHERE id = ?", (row["clip"],))
                if clip is not None and clip["path"]:
                    gone.append(clip["path"])
                    size += int(clip["bytes"])
            return str(row["camera"]), gone, size

    def meta(self, key: str) -> str | None:
        rows = self.read("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0]["value"]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self.writing() as db:
            db.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                       (key, value))


def _event(row: sqlite3.Row) -> dict[str, Any]:
    out = {key: row[key] for key in row.keys() if key not in ("box", "snapshot_bytes", "clip_path", "told")}  # noqa: SIM118 (a Row iterates values)
    out["box"] = json.loads(row["box"]) if row["box"] else None
    out["has_snapshot"] = bool(row["snapshot"])
    out["has_clip"] = bool(row["clip_path"])  # made (a clip growing for a later event of its track too)
    return out


def event_row(line: Mapping[str, Any], box: tuple[list[float], int, int] | None) -> dict[str, Any]:
    """An event line (`entered`, `left`, `crossed`) as its index row."""
    at = float(line["capture_time"])
    return {"id": line["event_id"], "camera": line["camera"], "type": line["event"], "label": line.get("label") or "",
            "place": line.get("zone") or line.get("line") or "", "direction": line.get("direction"),
            "track_id": line.get("track_id"), "at": at, "start": at - float(line.get("dwell_s") or 0.0), "end": at,
            "box": None if box is None else {"box": box[0], "width": box[1], "height": box[2]}}
