"""Keys that never lapse: TorchServe with `token_expiration_min=0.25` (15 s keys: TorchServe reads
the minutes as a double), video-keys beside it, and producers running across several expiries
lose no request to authorization.

All producers run at once, over one window of RUN_S seconds (several key lifetimes): video-loadgen
over HTTP, over gRPC `Predictions` and over one `StreamPredictions2` stream per camera (the stream
lane), and a held-out-style producer that keeps its key until it is refused, then re-reads
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

import pytest
import requests

from loadgen import cli
from loadgen.frames import Format, FrameSource
from loadgen.schedule import Resolution
from tests.e2e.server import TorchServe
from tests.support import ROOT

RUN_S = 45.0
LIFETIME_S = 15.0
MODEL = "frame_quality"
STREAM_MODEL = "frame_quality_stream"


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
    """TorchServe with keys that live 15 s, and video-keys renewing them."""
    work = tmp_path_factory.mktemp("keys")
    server = TorchServe(work / "ts", archives, overlays=["token_expiration_min=0.25\n"]).start()
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
    reports = tmp_path_factory.mktemp("reports")
    held_out = {"statuses": {}, "lost": [], "unreadable": [], "refused": 0}
    stop = threading.Event()
    grpc_address = f"127.0.0.1:{server.properties.get('grpc_inference_port', '7070')}"
    runs = {"http": (MODEL, "http"), "grpc": (MODEL, "grpc"), "grpc-stream": (STREAM_MODEL, "grpc-stream")}

    def loadgen(name: str) -> int:
        model, protocol = runs[name]
        return cli.main(["--url", server.inference_url, "--grpc-address", grpc_address, "--model", model,
                         "--protocol", protocol, "--token-file", str(server.workdir / "key_file.json"),
                         "--streams", "2", "--fps", "4", "--duration", str(RUN_S), "--resolution", "160x96",
                         "--sla-ms", "60000", "--no-progress", "--report", str(reports / f"{name}.json")])

    with ThreadPoolExecutor(len(runs) + 1) as pool:
        producer = pool.submit(_producer, server, stop, held_out)
        statuses = dict(zip(runs, pool.map(loadgen, runs)))
        stop.set()
        producer.result()
    time.sleep(1)
    return {"statuses": statuses, "reports": {name: json.loads((reports / f"{name}.json").read_text()) for name in runs},
            "held_out": held_out,
            "renewals": re.findall(r"renewed the inference key", log.read_text()),
            "access": (server.workdir / "logs" / "access_log.log").read_text()}


@pytest.mark.parametrize("protocol", ["http", "grpc", "grpc-stream"])
def test_video_loadgen_loses_no_request_across_expiries(window, protocol):
    report = window["reports"][protocol]
    assert report["requests_sent"] == 2 * 4 * RUN_S
    assert report["responses"] == {"200": report["requests_sent"]}
    assert window["statuses"][protocol] == 0


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
