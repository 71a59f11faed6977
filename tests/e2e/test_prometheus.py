"""A real Prometheus scrapes a real TorchServe during a burst (DESIGN section 7)."""

import shutil
import subprocess
import threading
import time

import pytest
import requests
import yaml

from tests import support
from tsutil.server import env_port_offset, wait_until


@pytest.fixture(scope="module")
def prometheus(server, tmp_path_factory):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus not found: apt-get install prometheus (.ci/run does)")
    workdir = tmp_path_factory.mktemp("prometheus")
    config = yaml.safe_load((support.ROOT / "monitoring" / "prometheus.yml").read_text())
    config["rule_files"] = [str(support.ROOT / "monitoring" / "alerts.yml")]
    config["scrape_configs"][0]["static_configs"][0]["targets"] = [
        server.metrics_url.removeprefix("http://")]
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = 9090 + env_port_offset()
    process = subprocess.Popen(
        [binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=(workdir / "prometheus.log").open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: _ready(url), 60), f"Prometheus not ready; see {workdir / 'prometheus.log'}"
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def _ready(url):
    try:
        return requests.get(f"{url}/-/ready", timeout=2).status_code == 200
    except requests.ConnectionError:
        return False


def _query(url, expr):
    answer = requests.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert answer["status"] == "success", answer
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in answer["data"]["result"]}


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def test_prometheus_sees_every_frame_and_the_saturation_alert(server, prometheus):
    _wait(lambda: _query(prometheus, 'up{job="torchserve"} == 1'), 30, "the scrape target to be up")
    frames = 'sum(video_frames_total{ModelName="frame_quality"})'
    before = sum(_query(prometheus, frames).values())  # the shared server's earlier frames (0: none yet)
    body = support.jpeg(support.frame(720, 1280, 2))
    sent, statuses, stop = [0], [], threading.Event()
    lock = threading.Lock()

    def camera():
        with requests.Session() as session:
            while not stop.is_set():
                response = server.predict("frame_quality", body, "image/jpeg", session=session)
                with lock:
                    sent[0] += 1
                    statuses.append(response.status_code)

    # 64 closed-loop clients keep more than batchSize (32) requests queued: every batch is full.
    clients = [threading.Thread(target=camera) for _ in range(64)]
    for client in clients:
        client.start()
    try:
        firing = _wait(lambda: [a for a in requests.get(f"{prometheus}/api/v1/alerts", timeout=10)
                                .json()["data"]["alerts"]
                                if a["labels"]["alertname"] == "VideoBatchSaturated"
                                and a["state"] == "firing"], 90, "VideoBatchSaturated to fire")
        average = _query(prometheus, 'sum(rate(video_frames_total{ModelName="frame_quality"}[10s]))'
                                     ' / sum(rate(video_batches_total{ModelName="frame_quality"}[10s]))')
    finally:
        stop.set()
        for client in clients:
            client.join()
    assert firing[0]["labels"]["ModelName"] == "frame_quality"
    assert list(average.values())[0] > 1
    assert set(statuses) == {200}
    _wait(lambda: list(_query(prometheus, frames).values()) == [before + sent[0]], 30,
          f"video_frames_total to grow by the {sent[0]} frames sent")
