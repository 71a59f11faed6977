"""`record:` settings, `--record-cap`, and a camera name that would leave the recordings' folder."""

from __future__ import annotations

import pytest

from ingest import cli, config
from ingest.record.recorder import inside
from ingest.record.settings import RecordMode, RecordSettings, parse, parse_size


def test_record_settings_from_yaml_and_defaults():
    cameras = config.parse({"defaults": {"record": {"mode": "motion", "retain_days": 7}},
                            "cameras": [{"name": "a", "url": "rtsp://a/1"},
                                        {"name": "b", "url": "rtsp://b/1", "record": "off"},
                                        {"name": "c", "url": "rtsp://c/1",
                                         "record": {"pre_seconds": 3, "retain_days": {"events": 30}}}]})
    a, b, c = (camera.record for camera in cameras)
    assert a == RecordSettings(RecordMode.MOTION, 5.0, 5.0, 7.0, 7.0, 7.0)
    assert b is not None and not b.on
    assert c == RecordSettings(pre_seconds=3.0, retain_events=30.0)
    assert config.parse({"cameras": [{"name": "d", "url": "rtsp://d/1"}]})[0].record is None  # --record's defaults


@pytest.mark.parametrize(("raw", "fix"), [
    ({"mode": "always"}, "mode: use one of events, motion, continuous, off"),
    ({"pre": 5}, "unknown key(s) pre: use mode, pre_seconds, post_seconds, retain_days"),
    ({"post_seconds": 900}, "post_seconds = 900: use a number from 0 to 300"),
    ({"retain_days": 0}, "retain_days.events = 0: use a number above 0 to 3650"),
    ({"retain_days": {"clips": 3}}, "retain_days: unknown key(s) clips"),
    (5, "use off, or a mapping"),
])
def test_bad_record_settings_name_the_fix(raw, fix):
    with pytest.raises(ValueError, match=None) as caught:
        parse(raw)
    assert fix in str(caught.value)
    with pytest.raises(config.ConfigError) as named:
        config.parse({"cameras": [{"name": "gate", "url": "rtsp://g/1", "record": raw}]})
    assert str(named.value).startswith("camera 'gate': record = ") and fix in str(named.value)


def test_record_cap_sizes():
    assert parse_size("500M") == 500 << 20
    assert parse_size("1.5G") == int(1.5 * (1 << 30))
    assert parse_size("64K") == 64 << 10
    assert parse_size("20gb") == 20 << 30
    for bad in ("lots", "12X", "1K"):
        with pytest.raises(ValueError, match="--record-cap"):
            parse_size(bad)


def test_a_camera_named_to_leave_the_folder_is_refused(tmp_path, capsys):
    code = cli.main(["--record", str(tmp_path / "rec"), "--camera", "../x=rtsp://127.0.0.1:9/x"])
    assert code == 2
    assert "name = '../x': use 1 to 63 letters" in capsys.readouterr().err
    assert not (tmp_path / "rec").exists() and not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="outside the recordings' directory"):
        inside(tmp_path, "../x/2026-12-07/01/1.ts")
    assert inside(tmp_path, "gate/2026-12-07/01/1.ts") == tmp_path / "gate/2026-12-07/01/1.ts"


def test_record_cap_needs_record(capsys):
    assert cli.main(["--camera", "a=rtsp://127.0.0.1:9/x", "--record-cap", "1G"]) == 2
    assert "--record-cap is the most --record DIR may hold: give --record DIR too" in capsys.readouterr().err
