"""The recorder's Prometheus metrics, on the bridge's registry (`--metrics-port`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 80)


class RecordMetrics:
    """`video_ingest_record_*`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry()
        self.written = Counter("video_ingest_record_bytes_written", "bytes of video recorded", ["camera"], registry=r)
        self.deleted = Counter("video_ingest_record_bytes_deleted",
                               "bytes of recordings, clips and snapshots deleted, by why (age, cap, disk_full, "
                               "deleted: by a user)", ["camera", "reason"], registry=r)
        self.dropped = Counter("video_ingest_record_segments_dropped",
                               "segments not recorded (disk: the disk refused them; behind: the writer's queue was full)",
                               ["camera", "reason"], registry=r)
        self.clips = Counter("video_ingest_record_events_with_clips", "events whose clip was made", ["camera"],
                             registry=r)
        self.clip_failures = Counter("video_ingest_record_clip_failures", "clips that could not be made", ["camera"],
                                     registry=r)
        self.build = Histogram("video_ingest_record_clip_build_seconds", "seconds to remux a clip", buckets=_BUCKETS,
                               registry=r)
        self.ready = Histogram("video_ingest_record_clip_ready_seconds",
                               "seconds from an event's capture to its clip being ready (post_seconds included)",
                               buckets=_BUCKETS, registry=r)
        self.used = Gauge("video_ingest_record_bytes", "bytes the recordings, clips and snapshots hold", registry=r)
        self.cap = Gauge("video_ingest_record_cap_bytes", "--record-cap: the most they may hold", registry=r)
        self.free = Gauge("video_ingest_record_disk_free_bytes", "free bytes on the recordings' file system",
                          registry=r)
        self.disk = Gauge("video_ingest_record_disk_bytes", "size of the recordings' file system", registry=r)
