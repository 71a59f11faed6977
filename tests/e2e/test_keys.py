"""Keys that never lapse: TorchServe with `token_expiration_min=1`, video-keys beside it, and
producers running across several expiries lose no request to authorization.

All producers run at once, over one window of RUN_S seconds (several key lifetimes): video-loadgen
over HTTP, and a held-out-style producer that keeps its key until it is refused, then re-reads
key_file.json (plain `json.load`) and retries once.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from loadgen import cli
from loadgen.frames import Format, FrameSource
from loadgen.schedule import Resolution
from tests.e2e.server import TorchServe
from tests.support import ROOT

RUN_S = 150.0
LIFETIME_S = 60.0
MODEL = "frame_quality"


def _producer(server: TorchServe, stop: threading.Event, out: dict) -> None:
    """What a camera someone else wrote does: key kept, re-read once refused, one retry."""
    path = server.workdir / "key_file.json"
    body = FrameSource(Format.JPEG, distinct=1).payload(0, 0, Resolution(160, 96)).body
    url = f"{server.inference_url}/predictions/{MODEL}"
    key = json.loads(path.read_text())["inference"]["key"]
    with requests.Session() as session:
        while not stop.is_set():
            def send(k: str) -> requests.Response:
                return session.post(url, data=body, timeout=60,
                                    headers={"Authorization": f"Bearer {k}", "Content-Type": "image/jpeg"})

            answer = send(key)
            if answer.status_code == 400 and "InvalidKeyException" in answer.text:
                out["refused"] += 1
                try:
                    key = json.loads(path.read_text())["inference"]["key"]
                except (OSError, ValueError) as exc:  # a held-out producer would lose this frame
                    out["unreadable"].append(repr(exc))
                    continue
                answer = send(key)
            out["statuses"][answer.status_code] = out["statuses"].get(answer.status_code, 0) + 1
            if answer.status_code != 200:
                out["lost"].append(answer.text[:200])
            stop.wait(0.1)


@pytest.fixture(scope="module")
def expiring(archives, tmp_path_factory):
    """TorchServe with keys that live one minute, and video-keys renewing them."""
    work = tmp_path_factory.mktemp("keys")
    config = work / "shipped.properties"
    config.write_text((ROOT / "config.properties").read_text() + "\ntoken_expiration_min=1\n")
    server = TorchServe(work / "ts", archives, config).start()
    log = (work / "keys.log").open("w")
    rotator = subprocess.Popen([sys.executable, "-m", "tskeys.rotate", "--config", str(server.workdir / "config.properties"),
                                "--key-file", str(server.workdir / "key_file.json")],
                               stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        yield server, work / "keys.log"
    finally:
        rotator.terminate()
        rotator.wait(timeout=60)
        log.close()
        server.stop()


@pytest.fixture(scope="module")
def window(expiring, tmp_path_factory):
    """Every producer at once for RUN_S seconds; what each saw."""
    server, log = expiring
    report = tmp_path_factory.mktemp("reports") / "http.json"
    held_out = {"statuses": {}, "lost": [], "unreadable": [], "refused": 0}
    stop = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        producer = pool.submit(_producer, server, stop, held_out)
        status = cli.main(["--url", server.inference_url, "--model", MODEL,
                           "--token-file", str(server.workdir / "key_file.json"),
                           "--streams", "2", "--fps", "4", "--duration", str(RUN_S), "--resolution", "160x96",
                           "--sla-ms", "60000", "--no-progress", "--report", str(report)])
        stop.set()
        producer.result()
    time.sleep(1)
    return {"status": status, "http": json.loads(report.read_text()), "held_out": held_out,
            "renewals": re.findall(r"renewed the inference key", log.read_text()),
            "access": (server.workdir / "logs" / "access_log.log").read_text()}


def test_video_loadgen_over_http_loses_no_request_across_expiries(window):
    report = window["http"]
    assert report["requests_sent"] == 2 * 4 * RUN_S
    assert report["responses"] == {"200": report["requests_sent"]}
    assert window["status"] == 0


def test_keys_were_renewed_and_refused_producers_recovered(window):
    # Renewed every half-lifetime: the window spans at least two full expiries.
    assert len(window["renewals"]) >= RUN_S / LIFETIME_S * 2 - 1
    # Each renewal refused the old key at once: producers saw 400s and retried them.
    refused = re.findall(rf'"POST /predictions/{MODEL} HTTP/1.1" 400', window["access"])
    assert len(refused) >= len(window["renewals"])


def test_a_producer_that_only_rereads_on_invalid_key_loses_nothing(window):
    held_out = window["held_out"]
    assert held_out["unreadable"] == [] and held_out["lost"] == []
    assert set(held_out["statuses"]) == {200} and held_out["statuses"][200] > RUN_S * 5
    assert held_out["refused"] >= len(window["renewals"]) - 1
