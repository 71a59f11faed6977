"""The zone editor of the real `video-ingest --web` (a subprocess), over real HTTP, on real files:
a scene is served from what the bridge holds (the camera list is parsed at start, at a save and
when it changes on disk, never per view), a save is refused by the same check as start and reload
(`--mqtt`'s topic names, against a real Mosquitto), and a save writes what it says: through a
symlink, never over a read-only file, with the owner and mode kept, with `[]` where `defaults:`
would bring zones back, and never from an older version of the file. Cameras point at a port
where nothing listens: no camera server or TorchServe is needed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import requests

from tests.editor_bridge import DOOR, TOKEN, Bridge, camera_list, version_of
from tests.mosquitto import Mosquitto
from tests.rtsp_server import free_port


@pytest.fixture
def start(tmp_path):
    bridges: list[Bridge] = []

    def started(config: Path, *extra: str) -> Bridge:
        bridges.append(Bridge(tmp_path, config, *extra))
        return bridges[-1]

    yield started
    for bridge in bridges:
        bridge.close()


def test_views_of_every_scene_parse_nothing_and_a_hand_edit_is_read_once_and_shown(tmp_path, start):
    names = [f"cam-{i}" for i in range(8)]
    config = tmp_path / "cameras.yaml"
    config.write_text(camera_list(names, free_port()))
    bridge = start(config)
    at_start = bridge.parses()
    for _ in range(5):  # five rounds of the page's refresh of every tile's scene
        scenes = [bridge.scene(name) for name in names]
    assert bridge.parses() == at_start == 1  # once, at start
    assert scenes[3] == {
        "zones": [{"name": "door", "polygon": [[0.1, 0.1], [0.4, 0.1], [0.4, 0.9]], "anchor": ["bottom_center"]},
                  {"name": "yard", "polygon": [[0.5, 0.1], [0.9, 0.1], [0.9, 0.9]], "anchor": ["bottom_center"]}],
        "lines": [{"name": "gate", "from": [0.5, 0.0], "to": [0.5, 1.0],
                   "anchors": ["top_left", "top_right", "bottom_left", "bottom_right"], "min_frames": 1}],
        "track": True, "snapshot_seconds": 10.0, "motion": {"on": True, "mask": []}, "editable": True,
        "read_only_reason": None,
        "version": version_of(config.read_text())}
    edited = config.read_text().replace("  - name: cam-7\n", "  - name: cam-8\n")  # a hand edit: renamed
    config.write_text(edited)
    bridge.wait("the rename applied", lambda: "cam-8" in requests.get(
        f"http://127.0.0.1:{bridge.port}/api/cameras", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).text)
    bridge.wait("the editor's new reading", lambda: bridge.scene("cam-8")["version"] == version_of(edited))
    assert bridge.scene("cam-8")["editable"] is True and bridge.scene("cam-0")["version"] == version_of(edited)
    assert bridge.parses() == 2  # the change, once
    for _ in range(5):
        for name in [*names[:7], "cam-8"]:
            bridge.scene(name)
    assert bridge.parses() == 2


def test_a_save_the_bridge_would_not_run_with_mqtt_is_refused_with_its_message(tmp_path, start):
    broker = Mosquitto(tmp_path / "broker").start()
    try:
        config = tmp_path / "cameras.yaml"
        config.write_text(camera_list(["dock"], free_port()))
        before = config.read_text()
        bridge = start(config, "--mqtt", broker.url)
        zone = {**DOOR, "classes": ["car/truck"]}
        refused = bridge.put("dock", {"zones": [zone], "lines": []})
        assert refused.status_code == 400
        assert refused.json() == {"code": 400, "type": "InvalidScene", "message":
                                  "camera 'dock': class 'car/truck' cannot be an MQTT topic level (it holds '/'): "
                                  "rename it with letters, digits, '_', '.' or '-'"}
        assert config.read_text() == before
        saved = bridge.put("dock", {"zones": [{**DOOR, "classes": ["car"]}], "lines": []})
        assert saved.status_code == 200 and "classes: [car]" in config.read_text()
    finally:
        broker.stop()


def test_a_save_through_a_symlink_writes_its_target_and_the_link_stays(tmp_path, start):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "cameras.yaml"
    target.write_text(camera_list(["dock"], free_port()))
    link = tmp_path / "cameras.yaml"
    link.symlink_to(target)
    bridge = start(link)
    saved = bridge.put("dock", {"zones": [DOOR], "lines": []})
    assert saved.status_code == 200, saved.text
    assert link.is_symlink() and link.resolve() == target
    assert "yard" not in target.read_text() and "gate" not in target.read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert sorted(p.name for p in target.parent.iterdir()) == ["cameras.yaml"]  # no temporary file left


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may give a file to another user")
def test_a_save_keeps_the_files_owner_and_mode(tmp_path, start):
    config = tmp_path / "cameras.yaml"
    config.write_text(camera_list(["dock"], free_port()))
    config.chmod(0o640)
    os.chown(config, 1234, 1235)  # another user's file, saved by a bridge running as root
    bridge = start(config)
    saved = bridge.put("dock", {"zones": [DOOR], "lines": []})
    assert saved.status_code == 200, saved.text
    assert "yard" not in config.read_text()
    after = config.stat()
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (1234, 1235, 0o640)


def test_a_read_only_camera_list_is_refused_with_the_path_and_the_fix(tmp_path, start):
    config = tmp_path / "cameras.yaml"
    config.write_text(camera_list(["dock"], free_port()))
    config.chmod(0o444)
    before = config.read_text()
    bridge = start(config)
    refused = bridge.put("dock", {"zones": [], "lines": []})
    assert refused.status_code == 403
    assert refused.json() == {"code": 403, "type": "NotWritable", "message":
                              f"the camera list {config} is read-only (mode 0444): make it writable "
                              f"(chmod u+w {config}) to save from the page, or edit it by hand"}
    assert config.read_text() == before and stat.S_IMODE(config.stat().st_mode) == 0o444
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".cameras")] == []


def test_removing_every_zone_given_by_the_defaults_writes_an_empty_list(tmp_path, start):
    config = tmp_path / "cameras.yaml"
    text = (f"defaults:\n  track: true\n  zones:\n    - name: door\n      polygon: {DOOR['polygon']}\n"
            f"cameras:\n  - name: dock\n    url: rtsp://127.0.0.1:{free_port()}/dock\n")
    config.write_text(text)
    bridge = start(config)
    assert [z["name"] for z in bridge.scene("dock")["zones"]] == ["door"]
    saved = bridge.put("dock", {"zones": [], "lines": []})
    assert saved.status_code == 200, saved.text
    assert config.read_text() == text + "    zones: []\n"  # without it, the defaults' door comes back
    bridge.wait("the camera without zones", lambda: bridge.scene("dock")["zones"] == [])
    assert bridge.scene("dock")["lines"] == []


def test_a_save_made_from_an_older_version_of_the_file_is_refused(tmp_path, start):
    config = tmp_path / "cameras.yaml"
    config.write_text(camera_list(["dock"], free_port()))
    bridge = start(config)
    first_tab = second_tab = bridge.scene("dock")["version"]
    saved = bridge.put("dock", {"zones": [DOOR], "lines": [], "version": first_tab})
    assert saved.status_code == 200 and saved.json()["version"] == version_of(config.read_text())
    after = config.read_text()
    stale = bridge.put("dock", {"zones": [], "lines": [], "version": second_tab})
    assert stale.status_code == 409
    assert stale.json() == {"code": 409, "type": "Conflict", "message":
                            f"{config} changed since this page read it (another tab or a hand edit): "
                            "reload the camera's scene and make the change again"}
    assert config.read_text() == after
    again = bridge.put("dock", {"zones": [], "lines": [], "version": saved.json()["version"]})
    assert again.status_code == 200 and "door" not in config.read_text()
