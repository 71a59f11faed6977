"""What the recorder deletes, on its writer's thread (never under a file being written): by age,
then oldest first under `--record-cap`; a disk that fills anyway (another program) is warned of
once and freed oldest first, and the cameras go on. A row goes before its file: a crash between
leaves a file without a row, which the next start deletes (`ingest.record.reconcile`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import shutil
import sqlite3
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest.record.store import Store

logger = logging.getLogger(__name__)

#: Files (or events) deleted at most per pass, so that the writer never stalls long.
BATCH = 200


def _gone(recorder: Store, camera: str, size: int, reason: str) -> None:
    recorder.add_used(-size)
    recorder.metrics.deleted.labels(camera, reason).inc(size)


def _unlink(recorder: Store, rel: str) -> None:
    path = recorder.directory / rel
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    for parent in list(path.parents)[:2]:  # an hour's and a day's folder, once empty
        if parent == recorder.directory or recorder.directory not in parent.parents:
            break
        with contextlib.suppress(OSError):
            parent.rmdir()


def delete_file(recorder: Store, rel: str, reason: str) -> int:
    """A recording file and its segments' rows; returns its bytes. On a disk so full that the index
    cannot record the deletion, the file goes first and its rows then (the next start would
    delete rows without a file)."""
    try:
        row = _delete_rows(recorder, rel)
    except sqlite3.OperationalError as exc:
        if not disk_is_full(exc):
            raise
        _unlink(recorder, rel)
        row = _delete_rows(recorder, rel)
    _unlink(recorder, rel)
    if row is None:
        return 0
    _gone(recorder, row["camera"], row["bytes"], reason)
    return int(row["bytes"])


def _delete_rows(recorder: Store, rel: str) -> Any:
    with recorder.index.writing() as db:
        row = db.execute("SELECT camera, bytes FROM files WHERE path = ?", (rel,)).fetchone()
        db.execute("DELETE FROM segments WHERE path = ?", (rel,))
        db.execute("DELETE FROM files WHERE path = ?", (rel,))
    return row


def delete_event(recorder: Store, event_id: str, reason: str) -> int:
    """An event, its snapshot, and its clip unless another event shares it; returns the bytes freed
    (0: it was gone already; what the index removed, counted once whoever deleted it)."""
    deleted = recorder.index.delete_event(event_id)
    if deleted is None:
        return 0
    camera, files, size = deleted
    for rel in files:
        _unlink(recorder, rel)
    _gone(recorder, camera, size, reason)
    return size


def drop_segment(recorder: Store, camera: str, rel: str, offset: int, size: int) -> None:
    """A segment whose bytes the disk refused: its row goes (the file was cut back to `offset`)."""
    with recorder.index.writing() as db:
        db.execute("DELETE FROM segments WHERE path = ? AND offset = ?", (rel, offset))
        db.execute("UPDATE files SET bytes = bytes - ? WHERE path = ?", (size, rel))


def by_age(recorder: Store, now: float) -> None:
    """Recordings past their `keep_until` (none a clip still needs), events past `retain_days`."""
    open_files = recorder.open_files()
    rows = recorder.index.read(
        "SELECT path FROM files f WHERE keep_until < ? AND NOT EXISTS (SELECT 1 FROM clips c WHERE "
        "c.state = 'pending' AND c.camera = f.camera AND c.start <= f.end AND c.end >= f.start) "
        "ORDER BY start LIMIT ?", (now, BATCH))
    for row in rows:
        if row["path"] not in open_files:
            delete_file(recorder, row["path"], "age")
    for camera, settings in recorder.recording():  # a camera not recording now: its events stay (or the cap)
        days = settings.retain_events
        for row in recorder.index.read("SELECT id FROM events WHERE camera = ? AND at < ? LIMIT ?",
                                       (camera, now - days * 86400, BATCH)):
            delete_event(recorder, row["id"], "age")
    usage = shutil.disk_usage(recorder.directory)
    recorder.metrics.free.set(usage.free)
    recorder.metrics.disk.set(usage.total)


def under_cap(recorder: Store, needed: int, reason: str = "cap") -> None:
    """Deletes the oldest recordings (then the oldest events) until `needed` more bytes fit the cap."""
    for _ in range(BATCH):
        if recorder.used + needed <= recorder.cap:
            return
        if not _delete_oldest(recorder, reason):
            logger.warning("recorder: %d bytes held, over the cap of %d, and nothing left to delete", recorder.used,
                           recorder.cap)
            return


def _delete_oldest(recorder: Store, reason: str, exclude: frozenset[str] = frozenset(), events: bool = True) -> bool:
    skip = recorder.open_files() | exclude
    for row in recorder.index.read("SELECT path FROM files ORDER BY start LIMIT ?", (len(skip) + 1,)):
        if row["path"] not in skip:
            delete_file(recorder, row["path"], reason)
            return True
    oldest = recorder.index.read("SELECT id FROM events ORDER BY at LIMIT 1") if events else []
    if oldest:
        delete_event(recorder, oldest[0]["id"], reason)
        return True
    return False


def disk_is_full(exc: BaseException) -> bool:
    """Whether `exc` says the disk is full (a write, or SQLite's)."""
    if isinstance(exc, sqlite3.OperationalError):
        return "full" in str(exc)
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def warn_full(recorder: Store) -> None:
    """Says once that the disk is full."""
    if not recorder.warned_full:
        logger.warning("recorder: the disk of %s is full (another program, or a cap above the free space): deleting "
                       "the oldest recordings; detection and publishing go on. Free the disk or lower --record-cap",
                       recorder.directory)
        recorder.warned_full = True


def disk_full(recorder: Store, needed: int, exclude: set[str]) -> None:
    """The disk refused a write: warned once, the oldest recordings (never events) deleted to free
    `needed` bytes (at least one file); the camera goes on (its segment is tried once more)."""
    warn_full(recorder)
    freed = 0
    try:
        while freed < needed * 4:
            before = recorder.used
            if not _delete_oldest(recorder, "disk_full", frozenset(exclude), events=False):
                return
            freed += before - recorder.used
    except (OSError, sqlite3.OperationalError) as exc:  # the index could not even record a deletion
        logger.debug("recorder: freeing the full disk failed: %s", exc)
