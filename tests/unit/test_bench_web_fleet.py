"""The pure parts of bench/web_fleet.py: its camera list, the CPU read from /proc/PID/stat, the
table and the verdict (no processes)."""

import yaml

from bench import web_fleet
from ingest import config


def test_the_camera_list_is_64_tracked_cameras_with_two_zones_and_a_line_each():
    cameras = config.parse(yaml.safe_load(web_fleet.camera_list(64, 9)))
    assert [c.name for c in cameras] == [f"cam-{i}" for i in range(64)]
    assert {c.url for c in cameras} == {f"rtsp://127.0.0.1:9/cam-{i}" for i in range(64)}
    assert {(c.scene.track, len(c.scene.zones), len(c.scene.lines)) for c in cameras} == {(True, 2, 1)}


def test_cpu_seconds_are_user_plus_system_even_with_spaces_and_parentheses_in_the_name():
    stat = "4242 (python -m (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 1234 566 0 0 20 0 9 0 100 0 0"
    assert web_fleet.cpu_seconds(stat, 100) == 18.0


def test_the_table_and_the_verdict():
    rows = [web_fleet.Row("this tree", 64, 1.5, 1.9, 10.5, 2.25),
            web_fleet.Row("baseline abc", 64, 1.5, 99.5, 3.0, 320.0)]
    assert web_fleet.table(rows).splitlines()[2:] == ["| this tree | 64 | 1.5 | 1.9 | 0.4 | 10.5 | 2.25 |",
                                                      "| baseline abc | 64 | 1.5 | 99.5 | 98 | 3 | 320 |"]
    assert web_fleet.verdict(rows[0]).endswith("cost 0.4% of a core at 64 cameras (target < 1%): PASS.")
    assert web_fleet.verdict(rows[1]).endswith("(target < 1%): FAIL.")
