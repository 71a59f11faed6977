"""The `video-ingest` command line: exit status and message for a bad list, `--shard` splitting
the list between instances, and a clean stop. Cameras here point at a port where nothing listens,
so no TorchServe is needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests import scenes
from tests.ingest_process import IngestProcess
from tests.rtsp_server import free_port
from tests.support import ROOT


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ingest.cli", "--url", f"http://127.0.0.1:{free_port()}", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)


def test_a_bad_camera_list_exits_2_naming_camera_and_field_without_the_secret(tmp_path):
    config = tmp_path / "cameras.yaml"
    config.write_text("cameras:\n  - name: gate-1\n    url: rtsp://viewer:${GATE_PW}@h/s\n    sample_fps: 0\n")
    done = run("--config", str(config), env={**os.environ, "GATE_PW": "Secret-991"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "video-ingest: camera 'gate-1': sample_fps = 0: use a number above 0")
    assert "Secret-991" not in done.stderr + done.stdout


def test_shards_split_the_list_and_each_stops_cleanly(tmp_path):
    port = free_port()
    names = [f"cam-{i}" for i in range(8)]
    config = tmp_path / "cameras.yaml"
    config.write_text("cameras:\n" + "".join(f"  - name: {n}\n    url: rtsp://127.0.0.1:{port}/{n}\n" for n in names))
    started = []
    for k in range(2):
        done = run("--config", str(config), "--shard", f"{k}/2", "--duration", "0.5")
        assert done.returncode == 0, done.stderr
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        mine = [x["camera"] for x in lines if x.get("event") == "started"]
        assert sorted(x["camera"] for x in lines if x.get("event") == "stopped") == sorted(mine)
        started.append(mine)
    assert sorted(started[0] + started[1]) == names
    assert started[0] and started[1]


def test_no_camera_is_a_usage_error():
    done = run()
    assert done.returncode == 2 and "give --config cameras.yaml or at least one --camera NAME=URL" in done.stderr


def test_sighup_reloads_the_list_and_an_edit_starts_and_stops_cameras(tmp_path):
    port = free_port()
    config = tmp_path / "cameras.yaml"

    def write(*names: str) -> None:
        config.write_text("cameras:\n" + "".join(f"  - name: {n}\n    url: rtsp://127.0.0.1:{port}/{n}\n" for n in names))

    write("a", "b")
    with IngestProcess(config, tmp_path / "results.jsonl") as cli:
        cli.wait(lambda: len(cli.events("started")) == 2)
        cli.reload()
        cli.wait(lambda: cli.events("reloaded"))
        assert cli.events("reloaded")[0]["cameras"] == ["a", "b"] and len(cli.events("started")) == 2  # same list: no restart
        write("b", "c")
        cli.wait(lambda: len(cli.events("reloaded")) == 2 and cli.events("stopped") and len(cli.events("started")) == 3)
        assert [e["camera"] for e in cli.events("started")] == ["a", "b", "c"]
        assert [e["camera"] for e in cli.events("stopped")] == ["a"]
        assert cli.stop() == 0


@pytest.mark.parametrize(("scene", "message"), scenes.BAD_SCENES, ids=[m.split(":")[1].strip()[:40] for _, m in scenes.BAD_SCENES])
def test_a_bad_zone_or_line_exits_2_naming_the_camera_the_shape_and_the_fix(tmp_path, scene, message):
    config = tmp_path / "cameras.yaml"
    config.write_text(yaml.safe_dump({"cameras": [{"name": "dock", "url": "rtsp://h/s", "track": True, **scene}]}))
    done = run("--config", str(config))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"video-ingest: camera 'dock': {message}"), done.stderr
