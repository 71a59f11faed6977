"""The bridge's Prometheus metrics (`--metrics-port`, on 127.0.0.1 unless told), labelled by camera name only."""

from __future__ import annotations

import contextlib
import threading
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector, start_http_server


class CountWatcher(Protocol):
    """Told of each zone count and line crossing as the metrics take it."""

    def zone(self, camera: str, zone: str, label: str, objects: int) -> None: ...

    def crossed(self, camera: str, line: str, direction: str, label: str) -> None: ...

    def zone_removed(self, camera: str, zone: str) -> None: ...


class Metrics:
    """Declared once; a removed camera's series are removed with it. Never raises into a camera."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)  # process_resident_memory_bytes, _open_fds, _cpu_seconds_total: for a memory alert
        self._up = Gauge("video_ingest_up", "1 while the camera is connected", ["camera"], registry=r)
        self._reconnects = Counter("video_ingest_reconnects", "reconnect attempts", ["camera"], registry=r)
        self._segments = Counter("video_ingest_segments", "segments answered, by HTTP status (bad_answer: a 200 refused)",
                                 ["camera", "status"], registry=r)
        self._frames = Counter("video_ingest_frames", "frames answered, by HTTP status (bad_answer: a 200 refused)",
                               ["camera", "status"], registry=r)
        self._dropped = Counter("video_ingest_dropped", "segments or frames dropped before an answer",
                                ["camera", "reason"], registry=r)
        self._lag = Gauge("video_ingest_lag_seconds", "capture to answer of the camera's latest answer",
                          ["camera"], registry=r)
        self._zone_objects = Gauge("video_ingest_zone_objects", "tracked objects in the zone now",
                                   ["camera", "zone", "label"], registry=r)
        self._crossings = Counter("video_ingest_line_crossings", "tracks that crossed the line",
                                  ["camera", "line", "direction", "label"], registry=r)
        self._tracks = Gauge("video_ingest_tracks_active", "tracked objects in the latest answered frame (with "
                             "motion on, those out of what the model looked at too)", ["camera"], registry=r)
        self._detections_dropped = Counter("video_ingest_detections_dropped",
                                           "detections past the tracker's cap a frame (the lowest-scoring; "
                                           "not tracked, written nor counted)", ["camera"], registry=r)
        self._motion_frames = Counter("video_ingest_motion_frames",
                                      "frames of a camera with motion on the model looked at (true) or skipped, "
                                      "nothing having moved (false: model frames saved)", ["camera", "looked"],
                                      registry=r)
        self._motion_regions = Counter("video_ingest_motion_regions",
                                       "regions the model looked at (a whole frame is one; per looked frame: "
                                       "this / video_ingest_motion_frames_total{looked=\"true\"})", ["camera"],
                                       registry=r)
        self._analytics_errors = Counter("video_ingest_analytics_errors",
                                         "frames a stage of tracking and counting failed on (a bug; logged)",
                                         ["camera", "stage"], registry=r)
        self._mqtt_up = Gauge("video_ingest_mqtt_connected", "1 while connected to the MQTT broker", registry=r)
        self._mqtt_failures = Counter("video_ingest_mqtt_connect_failures",
                                      "MQTT connections refused (login), unreachable or unanswered",
                                      ["reason"], registry=r)
        self._published = Counter("video_ingest_events_published", "events the sink delivered (acknowledged)",
                                  ["sink"], registry=r)
        self._events_dropped = Counter("video_ingest_events_dropped", "events a full sink queue dropped (oldest first)",
                                       ["sink"], registry=r)
        self._queued = Gauge("video_ingest_events_queued", "events waiting in the sink, or sent and not acknowledged",
                             ["sink"], registry=r)
        self._lock = threading.Lock()
        self._series: dict[str, set[tuple[Counter | Gauge, tuple[str, ...]]]] = {}
        self._watchers: list[CountWatcher] = []
        self._sink_children: dict[tuple[Counter | Gauge, str], object] = {}

    def serve(self, port: int, address: str = "127.0.0.1") -> None:
        """Serves `/metrics` on `address`:`port`."""
        start_http_server(port, addr=address, registry=self.registry)

    def _child(self, metric: Counter | Gauge, *labels: str):  # type: ignore[no-untyped-def]
        with self._lock:
            self._series.setdefault(labels[0], set()).add((metric, labels))
        return metric.labels(*labels)

    def add(self, camera: str) -> None:
        """A camera starts: down until it connects, no reconnects yet."""
        self._child(self._up, camera).set(0)
        self._child(self._reconnects, camera)

    def up(self, camera: str, connected: bool) -> None:
        self._child(self._up, camera).set(1 if connected else 0)

    def reconnect(self, camera: str) -> None:
        self._child(self._reconnects, camera).inc()

    def answered(self, camera: str, status: str, frames: int, segment: bool) -> None:
        """One request answered with `status` (the HTTP status, or `bad_answer`: a 200 refused), of `frames` frames."""
        if segment:
            self._child(self._segments, camera, status).inc()
        self._child(self._frames, camera, status).inc(frames)

    def dropped(self, camera: str, reason: str, count: int = 1) -> None:
        self._child(self._dropped, camera, reason).inc(count)

    def lag(self, camera: str, seconds: float) -> None:
        self._child(self._lag, camera).set(seconds)

    def watch(self, watcher: CountWatcher) -> None:
        """`watcher` is told every zone count and line crossing these metrics are (an MQTT sink)."""
        self._watchers.append(watcher)

    def zone_objects(self, camera: str, zone: str, label: str, objects: int) -> None:
        self._child(self._zone_objects, camera, zone, label).set(objects)
        for watcher in self._watchers:
            watcher.zone(camera, zone, label, objects)

    def crossed(self, camera: str, line: str, direction: str, label: str) -> None:
        self._child(self._crossings, camera, line, direction, label).inc()
        for watcher in self._watchers:
            watcher.crossed(camera, line, direction, label)

    def mqtt_connected(self, connected: bool) -> None:
        self._mqtt_up.set(1 if connected else 0)

    def mqtt_connect_failure(self, reason: str) -> None:
        self._sink_child(self._mqtt_failures, reason).inc()

    def events_published(self, sink: str) -> None:
        self._sink_child(self._published, sink).inc()

    def events_dropped(self, sink: str) -> None:
        self._sink_child(self._events_dropped, sink).inc()

    def events_queued(self, sink: str, events: int) -> None:
        self._sink_child(self._queued, sink).set(events)

    def _sink_child(self, metric: Counter | Gauge, label: str):  # type: ignore[no-untyped-def]
        """`metric.labels(label)`, looked up once: a sink counts each event (`labels` costs ~10 us)."""
        key = (metric, label)
        child = self._sink_children.get(key)
        if child is None:
            child = self._sink_children[key] = metric.labels(label)
        return child

    def tracks_active(self, camera: str, tracks: int) -> None:
        self._child(self._tracks, camera).set(tracks)

    def detections_dropped(self, camera: str, count: int) -> None:
        """`count` detections of a frame past the tracker's cap (`ingest.analytics.tracking.MAX_DETECTIONS`)."""
        self._child(self._detections_dropped, camera).inc(count)

    def looked(self, camera: str, looked: bool, regions: int) -> None:
        """A frame of a camera with motion on: looked at in `regions` regions, or skipped (`looked` false)."""
        self._child(self._motion_frames, camera, "true" if looked else "false").inc()
        if looked:
            self._child(self._motion_regions, camera).inc(regions)

    def analytics_error(self, camera: str, stage: str) -> None:
        """A stage (tracking, zone, line, snapshot) failed on a frame."""
        self._child(self._analytics_errors, camera, stage).inc()

    def remove_zone(self, camera: str, zone: str) -> None:
        """A zone gone from the camera (a reload): its series go too."""
        with self._lock:
            series = self._series.get(camera, set())
            gone = {s for s in series if s[0] is self._zone_objects and s[1][1] == zone}
            series -= gone
        for metric, labels in gone:
            with contextlib.suppress(KeyError):
                metric.remove(*labels)
        for watcher in self._watchers:
            watcher.zone_removed(camera, zone)

    def remove(self, camera: str) -> None:
        """A camera is gone from the list: its series go too."""
        with self._lock:
            series = self._series.pop(camera, set())
        for metric, labels in series:
            with contextlib.suppress(KeyError):  # never set for this camera
                metric.remove(*labels)
