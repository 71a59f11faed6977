"""The recordings' API (`ingest.web.recordings`) of a real web server in front of a real recorder:
the scripted scene (tests/scenes.py) cut by the bridge's own segmenter into a recorder on a
temporary directory, events written through the bridge's `Lines` (tests/recordings.py), clips and
snapshots made by the recorder itself. Lists, pages and filters; 400s that name the fix, 401s, 404s;
byte ranges equal to the file's bytes there; signed addresses, tampered and expired ones refused;
an export that ffprobe decodes frame by frame; a delete that frees the files."""

from __future__ import annotations

import subprocess
import time

import pytest
import requests

from ingest import config
from ingest.record.settings import RecordMode, RecordSettings
from ingest.web import access
from ingest.web import server as web
from ingest.web.editor import Editor
from ingest.web.view import View
from tests import recordings, scenes

TOKEN = "t" * 24
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECONDS = 8
#: (camera, seconds in, kind, place, label, track)
EVENTS = [("gate-1", 1.5, "entered", "door", "person", 1), ("gate-1", 3.0, "crossed", "gate", "car", 2),
          ("gate-1", 4.5, "crossed", "gate", "person", 1), ("lobby", 2.0, "entered", "hall", "person", 5),
          ("lobby", 6.0, "left", "hall", "person", 5)]
CAMERAS = "cameras:\n  - {name: gate-1, url: 'rtsp://gate.example/s'}\n  - {name: lobby, url: 'rtsp://lobby.example/s'}\n"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("recordings")
    video = scenes.make(tmp / "scene.ts", [(320, 240, scenes.FPS * SECONDS)])
    start = round(time.time()) - 3600.0  # an hour ago: in the timeline's last day
    feed = recordings.record(tmp, {"gate-1": video, "lobby": video}, start,
                             RecordSettings(mode=RecordMode.CONTINUOUS, pre_seconds=1, post_seconds=1))
    ids = [feed.event(camera, at, kind, place, label, track) for camera, at, kind, place, label, track in EVENTS]
    feed.made(*ids)
    (tmp / "cameras.yaml").write_text(CAMERAS)
    views = View()
    views.configure(config.load(tmp / "cameras.yaml", {}))
    server = web.WebServer(("127.0.0.1", 0), access.Token(TOKEN, made=True), views, Editor(None),
                           feed.recorder).start()
    try:
        yield {"url": f"http://127.0.0.1:{server.port}", "feed": feed, "ids": ids, "start": start, "server": server}
    finally:
        server.close()
        feed.recorder.close()
        feed.lines.close()


def get(served, path, token=True, **kwargs):
    return requests.get(served["url"] + path, headers={**(AUTH if token else {}), **kwargs.pop("headers", {})},
                        timeout=30, **kwargs)


def ids_of(answer):
    return [e["id"] for e in answer.json()["events"]]


def test_events_come_newest_first_a_page_at_a_time_and_filtered(served):
    ids, start = served["ids"], served["start"]
    newest_first = [ids[i] for i in sorted(range(len(EVENTS)), key=lambda i: EVENTS[i][1], reverse=True)]
    whole = get(served, "/api/events").json()
    assert [e["id"] for e in whole["events"]] == newest_first and whole["next"] is None
    paged, before = [], ""
    for _ in range(len(EVENTS)):
        page = get(served, f"/api/events?limit=2{before}").json()
        paged += [e["id"] for e in page["events"]]
        if page["next"] is None:
            break
        before = f"&before={page['next']}"
    assert paged == newest_first
    assert ids_of(get(served, "/api/events?camera=lobby")) == [ids[4], ids[3]]
    assert ids_of(get(served, "/api/events?label=car")) == [ids[1]]
    assert ids_of(get(served, "/api/events?place=gate&label=person")) == [ids[2]]
    assert ids_of(get(served, f"/api/events?since={start + 1.9}&until={start + 4}")) == [ids[1], ids[3]]
    one = get(served, f"/api/events/{ids[1]}").json()
    assert (one["camera"], one["type"], one["label"], one["place"], one["track_id"]) == ("gate-1", "crossed", "car",
                                                                                       "gate", 2)
    assert one["has_clip"] and one["clip_url"] and one["snapshot_url"] and "snapshot" not in one
    assert abs(one["at"] - (start + 3.0)) < 1e-6


@pytest.mark.parametrize(("query", "message"), [
    ("limit=0", "limit='0': give a whole number from 1 to 100"),
    ("limit=x", "limit='x': give a whole number from 1 to 100"),
    ("since=yesterday", "since='yesterday': give seconds since the epoch"),
    ("until=2026-12-01T08:00:00", "until='2026-12-01T08:00:00': give seconds since the epoch"),  # no offset
    ("before=bm90IGEgY3Vyc29y", "before: give the `next` of the previous page, as it came"),
    ("colour=red", "unknown parameter colour: use camera, label, place, since, until, before, limit"),
    ("camera=a&camera=b", "give camera once"),
    ("since=20&until=10", "since (20.0) is after until (10.0): swap them"),
])
def test_a_bad_parameter_answers_400_naming_the_fix(served, query, message):
    answer = get(served, f"/api/events?{query}")
    assert answer.status_code == 400
    body = answer.json()
    assert body["code"] == 400 and body["type"] == "BadRequest" and body["message"].startswith(message)


def test_iso_times_and_the_unknown_answer_as_they_should(served):
    start = served["start"]
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + 5))
    assert ids_of(get(served, f"/api/events?since={iso}")) == [served["ids"][4]]
    for path in ("/api/events/nope:gate-1:9", "/api/events/nope:gate-1:9/clip", "/api/events/nope:gate-1:9/snapshot"):
        missing = get(served, path)
        assert missing.status_code == 404 and missing.json()["type"] == "NotFound", path
    for path in ("/api/events", f"/api/events/{served['ids'][0]}", f"/api/events/{served['ids'][0]}/clip",
                 "/api/cameras/gate-1/recordings", "/api/cameras/gate-1/export?since=1&until=2"):
        refused = get(served, path, token=False)
        assert refused.status_code == 401 and refused.json()["type"] == "Unauthorized", path
    assert get(served, "/api/events", headers={"Host": "evil.example"}).status_code == 403


def _clip_file(served, event_id):
    index, directory = served["feed"].recorder.index, served["feed"].recorder.directory
    return (directory / index.clip(index.event(event_id)["clip"]).path).read_bytes()


def test_a_clip_is_served_whole_or_by_byte_ranges(served):
    event_id = served["ids"][2]
    data = _clip_file(served, event_id)
    whole = get(served, f"/api/events/{event_id}/clip")
    assert whole.status_code == 200 and whole.content == data and whole.headers["Content-Type"] == "video/mp4"
    assert whole.headers["Accept-Ranges"] == "bytes"
    size = len(data)
    for asked, first, last in (("100-199", 100, 199), ("-50", size - 50, size - 1), (f"{size - 10}-", size - 10,
                                                                                      size - 1),
                               (f"5-{size + 1000}", 5, size - 1), ("0-0", 0, 0)):
        part = get(served, f"/api/events/{event_id}/clip", headers={"Range": f"bytes={asked}"})
        assert part.status_code == 206, asked
        assert part.headers["Content-Range"] == f"bytes {first}-{last}/{size}", asked
        assert part.content == data[first:last + 1], asked
    past = get(served, f"/api/events/{event_id}/clip", headers={"Range": f"bytes={size}-"})
    assert past.status_code == 416 and past.headers["Content-Range"] == f"bytes */{size}"
    assert past.json()["type"] == "RangeNotSatisfiable"
    several = get(served, f"/api/events/{event_id}/clip", headers={"Range": "bytes=0-1,5-6"})
    assert several.status_code == 200 and several.content == data  # ignored, as RFC 9110 allows
    snapshot = get(served, f"/api/events/{event_id}/snapshot")
    assert snapshot.status_code == 200 and snapshot.headers["Content-Type"] == "image/jpeg"
    assert snapshot.content[:3] == b"\xff\xd8\xff"


def test_signed_addresses_need_no_token_and_a_tampered_or_expired_one_is_refused(served):
    first, second = get(served, f"/api/events/{served['ids'][0]}").json(), get(served, f"/api/events/{served['ids'][1]}").json()
    clip = get(served, first["clip_url"], token=False)
    assert clip.status_code == 200 and clip.content == _clip_file(served, served["ids"][0])
    ranged = get(served, first["clip_url"], token=False, headers={"Range": "bytes=10-19"})
    assert ranged.status_code == 206 and ranged.content == clip.content[10:20]
    assert get(served, first["snapshot_url"], token=False).status_code == 200
    path, query = first["clip_url"].split("?")
    other = second["clip_url"].split("?")[0]
    sig = query.split("sig=")[1]
    tampered = {
        "another event's clip": f"{other}?{query}",
        "the snapshot of the clip's signature": f"{path.replace('/clip', '/snapshot')}?{query}",
        "a later exp": f"{path}?exp={int(time.time()) + 10**6}&sig={sig}",
        "a changed signature": f"{path}?{query[:-1]}{'0' if query[-1] != '0' else '1'}",
        "the event itself": f"{path.removesuffix('/clip')}?{query}",
        "no signature": path,
    }
    for what, address in tampered.items():
        refused = get(served, address, token=False)
        assert refused.status_code == 401 and refused.json()["type"] == "Unauthorized", what
    expired = served["server"].recordings.token.sign(path, {}, time.time() - access.SIGNED_S - 5)
    refused = get(served, expired, token=False)
    assert refused.status_code == 401 and "expired" in refused.json()["message"]


def _frames(path) -> int:
    out = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                          "stream=nb_read_frames,codec_name,width,height", "-of", "csv=p=0", str(path)],
                         capture_output=True, text=True, check=True).stdout.strip()
    codec, width, height, frames = out.split(",")
    assert (codec, width, height) == ("h264", "320", "240")
    return int(frames)


def test_a_timeline_and_an_export_of_its_range_that_plays(served, tmp_path):
    start, ids = served["start"], served["ids"]
    day = get(served, "/api/cameras/gate-1/recordings").json()
    assert len(day["spans"]) == 1 and abs(day["spans"][0][0] - start) < 1e-6
    assert abs(day["spans"][0][1] - (start + SECONDS)) < 0.01
    assert [e["id"] for e in day["events"]] == [ids[2], ids[1], ids[0]] and day["export_url"] is None  # a day: too long
    since, until = start + 1.5, start + 4.5
    ranged = get(served, f"/api/cameras/gate-1/recordings?since={since}&until={until}").json()
    assert [e["id"] for e in ranged["events"]] == [ids[2], ids[1], ids[0]]
    export = get(served, ranged["export_url"], token=False)
    assert export.status_code == 200 and export.headers["Content-Type"] == "video/mp4"
    (tmp_path / "export.mp4").write_bytes(export.content)
    # From the key frame at or before `since` (segments start at 1 s, 2 s, ...) to the last frame at or before `until`.
    assert _frames(tmp_path / "export.mp4") == int(4.5 * scenes.FPS) - 1 * scenes.FPS + 1
    part = get(served, ranged["export_url"], token=False, headers={"Range": "bytes=1000-1999"})
    assert part.status_code == 206 and part.content == export.content[1000:2000]  # the same export, kept
    with_token = get(served, f"/api/cameras/gate-1/export?since={since}&until={until}")
    assert with_token.status_code == 200 and with_token.content == export.content


@pytest.mark.parametrize(("query", "status", "kind", "message"), [
    ("since={s}&until={s_hour}", 400, "BadRequest", "since to until is 61 minutes: export at most 60 minutes"),
    ("since={s}", 400, "BadRequest", "give since and until"),
    ("since={s}&until={s}", 400, "BadRequest", "give since and until, until after since"),
    ("since=1000&until=2000", 404, "NoRecording", "camera gate-1 has no recording from 1000.0 to 2000.0"),
])
def test_an_export_too_long_or_of_nothing_is_refused_with_the_fix(served, query, status, kind, message):
    start = served["start"]
    answer = get(served, "/api/cameras/gate-1/export?" + query.format(s=start, s_hour=start + 3660))
    assert answer.status_code == status and answer.json()["type"] == kind
    assert answer.json()["message"].startswith(message)


def test_a_deleted_event_takes_its_snapshot_and_clip_and_their_bytes(served):
    feed = served["feed"]
    event_id = feed.event("lobby", 4.0, "crossed", "door-line", "parcel", track_id=99)
    made = feed.made(event_id)[0]
    recorder = feed.recorder
    files = [recorder.directory / made["snapshot"], recorder.directory / recorder.index.clip(made["clip"]).path]
    sizes = sum(f.stat().st_size for f in files)
    used = recorder.used
    assert requests.delete(f"{served['url']}/api/events/{event_id}", timeout=30).status_code == 401
    deleted = requests.delete(f"{served['url']}/api/events/{event_id}", headers=AUTH, timeout=30)
    assert deleted.status_code == 200 and deleted.json()["deleted"] == event_id
    assert deleted.json()["freed_bytes"] == sizes > 0
    assert not any(f.exists() for f in files) and recorder.used == used - sizes
    assert get(served, f"/api/events/{event_id}").status_code == 404
    again = requests.delete(f"{served['url']}/api/events/{event_id}", headers=AUTH, timeout=30)
    assert again.status_code == 404 and again.json()["type"] == "NotFound"
    assert event_id not in ids_of(get(served, "/api/events"))


def test_without_record_the_routes_say_how_to_start_it(tmp_path):
    (tmp_path / "cameras.yaml").write_text(CAMERAS)
    views = View()
    views.configure(config.load(tmp_path / "cameras.yaml", {}))
    server = web.WebServer(("127.0.0.1", 0), access.Token(TOKEN, made=True), views, Editor(None)).start()
    try:
        url = f"http://127.0.0.1:{server.port}/api/events"
        answer = requests.get(url, headers=AUTH, timeout=30)
        assert answer.status_code == 404 and answer.json()["type"] == "NotRecording"
        assert "--record DIR" in answer.json()["message"]
        assert requests.get(url, timeout=30).status_code == 401
    finally:
        server.close()

