"""The bridge's soak (bench/soak_bridge.py) in its short form: a minute, two cameras, every
disturbance at least once (a camera server killed and started, the broker restarted, the page
opened and closed, a zone added to the YAML, TorchServe's keys renewed by `video-keys`). The
hour-long form is run by hand (docs/ingest.md, "A day unattended"); here the command runs end to end, prints its table and verdicts, and every
event of the results file reached MQTT. A minute says nothing about slopes: `flat` is only present.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import ROOT
from tsutil.server import env_port_offset

#: The soak's own TorchServe sits this far above `$VIDEO_TS_PORT_OFFSET` (clear of the shared one at +100).
PORT_OFFSET = 200


def test_the_short_soak_prints_its_table_and_verdicts_and_every_event_reaches_mqtt(tmp_path):
    report = tmp_path / "soak.json"
    done = subprocess.run([sys.executable, "-m", "bench.soak_bridge", "--minutes", "1", "--cameras", "2", "--short",
                           "--port-offset", str(env_port_offset() + PORT_OFFSET), "--work", str(tmp_path / "work"),
                           "--json", str(report)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a verdict is false (a minute's slope may be)
    table = done.stdout.splitlines()
    assert table[0].split()[:5] == ["min", "RSS", "MB", "threads", "fds"], done.stdout
    rows = [line.split() for line in table[1:] if line.split() and line.split()[0][0].isdigit()]
    assert len(rows) >= 4 and all(len(row) == 5 + 2 for row in rows), done.stdout
    result = json.loads(report.read_text())
    assert set(result["verdicts"]) == {"flat", "mqtt_complete", "none_stuck", "stuck"}
    assert result["plan"]["allocator"] == "jemalloc"  # as the image runs the bridge (checked in its maps)
    assert set(result["slopes"]) == {"rss_mb", "threads", "fds"}
    assert all({"per_hour", "noise", "growth", "flat"} <= set(s) for s in result["slopes"].values())
    assert result["verdicts"]["mqtt_complete"] is True, result["mqtt"]
    assert result["mqtt"]["missing_count"] == 0 and result["mqtt"]["unique"] >= result["events"] > 0
    assert result["verdicts"]["none_stuck"] is True, result["final_ages_s"]
    assert result["exit_status"] == 0 and result["problems"] == []
    # Each disturbance happened, and left its events.
    assert set(result["chores"]) == {"camera_restart", "broker_restart", "page", "edit", "key_renewal"}, result["chores"]
    assert result["chores"]["key_renewal"] >= 1  # 30 s keys, renewed every 15 s: the cameras followed each
    assert result["pictures"] > 0
    assert {"crossed", "reloaded", "reconnecting", "mqtt_disconnected", "mqtt_connected", "stopped"} <= set(
        result["events_by_kind"]), result["events_by_kind"]
    assert f"verdicts: flat={result['verdicts']['flat']} mqtt_complete=True none_stuck=True" in done.stdout
