"""The camera list: settings typed and checked once, errors that name the camera, field and fix,
and `${VAR}` secrets that never show in an error."""

from __future__ import annotations

import pytest

from handler.motion import MotionSettings
from ingest import config
from ingest.config import Camera, ConfigError, Mode, Policy, Transport

ENV = {"GATE1_PASSWORD": "s3cret-gate", "CAM7_URL": "rtsp://admin:hunter22@10.0.0.7/live"}


def parse(*cameras: dict, **top) -> list[Camera]:
    return config.parse({"cameras": list(cameras), **top}, "cameras.yaml", ENV)


def test_the_issue_example_parses_with_defaults_and_expanded_secrets():
    gate, lobby = parse({"name": "gate-1", "url": "rtsp://viewer:${GATE1_PASSWORD}@gate-1.example/stream1",
                         "mode": "segments"},
                        {"name": "lobby", "url": "rtsp://lobby.example/h264", "mode": "frames", "sample_fps": 5})
    assert gate.url == "rtsp://viewer:s3cret-gate@gate-1.example/stream1"
    assert gate.display_url == "rtsp://gate-1.example/stream1"
    assert (gate.mode, gate.segment_seconds, gate.max_in_flight, gate.stall_seconds) == (Mode.SEGMENTS, 1.0, 2, 5.0)
    assert (gate.effective_policy, gate.transport, gate.effective_sample_fps) == (Policy.LATEST, Transport.TCP, None)
    assert set(gate.secrets) == {"viewer:s3cret-gate", "s3cret-gate"}
    assert (lobby.mode, lobby.effective_sample_fps, lobby.secrets) == (Mode.FRAMES, 5.0, [])


def test_a_whole_url_from_the_environment_is_a_secret_and_shown_unexpanded():
    [cam] = parse({"name": "cam7", "url": "${CAM7_URL}"})
    assert cam.url == ENV["CAM7_URL"]
    assert cam.display_url == "${CAM7_URL}"
    assert ENV["CAM7_URL"] in cam.secrets and "hunter22" in cam.secrets


def test_defaults_apply_to_every_camera_and_a_camera_overrides_them():
    a, b = parse({"name": "a", "url": "rtsp://h/a"}, {"name": "b", "url": "rtsp://h/b", "max_in_flight": 4},
                 defaults={"max_in_flight": 3, "transport": "udp"})
    assert (a.max_in_flight, b.max_in_flight, a.transport, b.transport) == (3, 4, Transport.UDP, Transport.UDP)


def test_files_default_to_every_and_may_loop(tmp_path):
    video = tmp_path / "demo.ts"
    video.write_bytes(b"x")
    [cam] = parse({"name": "demo", "url": str(video), "loop": True})
    assert (cam.is_file, cam.effective_policy, cam.loop) == (True, Policy.EVERY, True)


@pytest.mark.parametrize(("entry", "expected"), [
    ({"name": "lobby", "url": "rtsp://h/x", "sample_fps": -1}, "camera 'lobby': sample_fps = -1: use a number above 0"),
    ({"name": "lobby", "url": "rtsp://h/x", "sample_fps": "fast"}, "camera 'lobby': sample_fps = 'fast': use a number"),
    ({"name": "lobby", "url": "rtsp://h/x", "mode": "clips"},
     "camera 'lobby': mode = 'clips': use one of segments, frames"),
    ({"name": "lobby", "url": "rtsp://h/x", "max_in_flight": 0},
     "camera 'lobby': max_in_flight = 0: use a whole number from 1 to 64"),
    ({"name": "lobby", "url": "rtsp://h/x", "max_in_flight": 2.5}, "camera 'lobby': max_in_flight = 2.5: use a whole"),
    ({"name": "lobby", "url": "rtsp://h/x", "fps": 5}, "camera 'lobby': unknown setting(s) fps: use url, mode"),
    ({"name": "lobby"}, "camera 'lobby': url is missing"),
    ({"name": "lobby", "url": "rtsp://h/x", "loop": True}, "camera 'lobby': loop = true is for files only"),
    ({"name": "lobby", "url": "/no/such/file.mp4"}, "camera 'lobby': file '/no/such/file.mp4' does not exist"),
    ({"name": "lobby", "url": "ftp://h/x"}, "camera 'lobby': url scheme 'ftp'"),
    ({"name": "bad name", "url": "rtsp://h/x"}, "cameras.yaml: camera #1: name = 'bad name': use 1 to 63 letters"),
    ({"url": "rtsp://h/x"}, "cameras.yaml: camera #1: name = None"),
])
def test_a_bad_camera_names_itself_the_field_and_the_fix(entry, expected):
    with pytest.raises(ConfigError) as error:
        parse(entry)
    assert str(error.value).startswith(expected), str(error.value)


def test_an_unset_variable_is_named_and_no_value_is_shown():
    with pytest.raises(ConfigError) as error:
        parse({"name": "gate-2", "url": "rtsp://viewer:${GATE2_PASSWORD}@h/s"})
    assert str(error.value) == ("camera 'gate-2': url uses ${GATE2_PASSWORD}, which is not set in the environment: "
                                "export GATE2_PASSWORD=... (or a Kubernetes Secret) before starting")


def test_errors_never_hold_a_secret():
    for entry in ({"name": "gate-1", "url": "rtsp://viewer:${GATE1_PASSWORD}@h/s", "mode": "x"},
                  {"name": "cam7", "url": "${CAM7_URL}", "loop": True}):
        with pytest.raises(ConfigError) as error:
            parse(entry)
        assert "s3cret-gate" not in str(error.value) and "hunter22" not in str(error.value)


def test_names_are_unique_and_the_list_is_required():
    with pytest.raises(ConfigError, match="camera name 'a' is used twice"):
        parse({"name": "a", "url": "rtsp://h/1"}, {"name": "a", "url": "rtsp://h/2"})
    with pytest.raises(ConfigError, match="write a top-level `cameras:` list"):
        config.parse({"camera": []}, "cameras.yaml", ENV)
    with pytest.raises(ConfigError, match=r"unknown top-level key\(s\) extra"):
        config.parse({"cameras": [], "extra": 1}, "cameras.yaml", ENV)


def test_bad_yaml_says_where(tmp_path):
    path = tmp_path / "cameras.yaml"
    path.write_text("cameras:\n  - name: a\n    url: [unclosed\n")
    with pytest.raises(ConfigError, match=r"cameras.yaml: not valid YAML at line \d+, column \d+"):
        config.load(path)
    with pytest.raises(ConfigError, match="cannot read the camera list"):
        config.load(tmp_path / "missing.yaml")


def test_camera_argument():
    cam = config.from_argument("gate-1=rtsp://u:pw123@h/s", ENV, mode="frames", sample_fps=2.0)
    assert (cam.name, cam.url, cam.display_url, cam.mode, cam.sample_fps) == (
        "gate-1", "rtsp://u:pw123@h/s", "rtsp://h/s", Mode.FRAMES, 2.0)
    with pytest.raises(ConfigError, match="write --camera NAME=URL"):
        config.from_argument("gate-1", ENV)


def test_a_user_name_from_the_environment_is_no_bare_word_secret_but_its_password_is():
    """A user named `event` masked as a word would turn every line's "event" key into "***"."""
    env = {**ENV, "CAM_USER": "event", "CAM_PW": "pa55word", "CAM_CREDS": "camera:hunter22", "TOKEN": "t0ken-1"}
    cam, creds, token = config.parse({"cameras": [
        {"name": "a", "url": "rtsp://${CAM_USER}:${CAM_PW}@h/a"},
        {"name": "b", "url": "rtsp://${CAM_CREDS}@h/b"},
        {"name": "c", "url": "http://${CAM_USER}@h/c?token=${TOKEN}"}]}, "cameras.yaml", env)
    assert cam.url == "rtsp://event:pa55word@h/a"
    assert set(cam.secrets) == {"event:pa55word", "pa55word"}
    assert set(creds.secrets) == {"camera:hunter22", "hunter22"}
    assert token.secrets == ["t0ken-1"]


def test_motion_is_on_for_live_cameras_off_for_files_and_set_per_camera_or_in_defaults(tmp_path):
    video = tmp_path / "clip.ts"
    video.write_bytes(b"")
    live, file, off, tuned, frigate_off = parse(
        {"name": "live", "url": "rtsp://h/a"}, {"name": "file", "url": str(video)},
        {"name": "off", "url": "rtsp://h/b", "motion": False},
        {"name": "tuned", "url": "rtsp://h/c", "motion": {"threshold": 12, "mask": [[[0, 0], [1, 0], [1, 0.1]]]}},
        {"name": "frigate-off", "url": "rtsp://h/d", "motion": {"enabled": False, "threshold": 12}})
    assert live.effective_motion == MotionSettings() and file.effective_motion is None
    assert off.effective_motion is None and frigate_off.effective_motion is None
    assert tuned.effective_motion == MotionSettings(threshold=12, mask=(((0.0, 0.0), (1.0, 0.0), (1.0, 0.1)),))
    [on_file] = parse({"name": "file", "url": str(video)}, defaults={"motion": "on"})
    assert on_file.effective_motion == MotionSettings()
    assert config.from_argument("cam=rtsp://h/a", motion="off").effective_motion is None


@pytest.mark.parametrize(("motion", "expected"), [
    ("sometimes", "camera 'cam': motion = 'sometimes': use off, on, or a mapping of motion settings"),
    ({"threshold": 300}, "camera 'cam': motion = {'threshold': 300}: threshold is 300: use a whole number from 1 to 255"),
    ({"treshold": 30}, "unknown setting 'treshold'; the settings are contour_area, frame_alpha"),
    ({"mask": [[[0, 0], [1, 1]]]}, "mask: use a list of polygons, each a list of 3 or more [x, y] points"),
])
def test_a_bad_motion_setting_names_the_camera_and_the_fix(motion, expected):
    with pytest.raises(ConfigError) as err:
        parse({"name": "cam", "url": "rtsp://h/a", "motion": motion})
    assert expected in str(err.value)
