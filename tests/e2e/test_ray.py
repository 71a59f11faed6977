"""The same archives and doors on Ray Serve (DESIGN section 14), on a real three-node Ray cluster on
this machine started with plain `ray start` (tests/e2e/raycluster.py): `video-ray start --address`
joining it from a project folder (an ONNX archive among the models, a relative model store, the
replicas checked for room first), byte-for-byte the answers TorchServe gives (the errors the engine
writes itself included), the key, the replicas spread over the workers under `video-loadgen`,
autoscaling on a burst, live batch settings, `video-ingest`'s tracks and counts, and a worker node
killed under load."""

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import requests
import yaml

from loadgen import cli as loadgen
from rayserve.plan import app_name
from tests import planted, support
from tests import videos as segments
from tests.e2e.conftest import RAY_HTTP_PORT
from tests.e2e.ingest_cli import Ingest
from tests.e2e.server import TorchServe, build_archives
from tests.e2e.tracks import MODEL as PLANTED
from tests.e2e.tracks import assert_steady_file_counted, camera, write
from tests.integration.test_onnx import SCENES, ULTRALYTICS
from tests.onnx_export import export
from tsutil.server import env_port_offset

MODEL = "frame_quality"
PIXELS = support.frame(480, 640, 31)
JPEG = support.jpeg(PIXELS)
ONNX = "detector_onnx"
#: TorchServe 0.12's answer when a model's job queue is full, as a real one wrote it (Gson's pretty JSON).
QUEUE_FULL = ('{{\n  "code": 503,\n  "type": "ServiceUnavailableException",\n  "message": "Model \\"{model}\\" has no '
              'worker to serve inference request. Please use scale workers API to add workers. If this is a sequence '
              'inference, please check if it is closed, or expired; or exceeds maxSequenceJobQueueSize"\n}}\n')


def _video_ray(folder, *args, timeout=420):
    """The real `video-ray` command, run in `folder` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "rayserve", *args], cwd=folder, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(support.ROOT)})


@pytest.fixture(scope="module")
def project(archives, tmp_path_factory):
    """A project folder as a user has it: the shipped config.properties (model_store=model_store,
    relative; load_models the five demo archives) and model_store/ with the demo archives and an
    Ultralytics-layout detector exported to ONNX with dynamic axes (`detector_onnx`)."""
    folder = tmp_path_factory.mktemp("project")
    shutil.copy(support.ROOT / "config.properties", folder)
    shutil.copytree(archives, folder / "model_store")
    export(planted.Yolo(), folder / f"{ONNX}.onnx", None, None, metadata=ULTRALYTICS)
    (folder / f"{ONNX}.yaml").write_text(yaml.safe_dump({"batchSize": 8, "maxBatchDelay": 20,
                                                         "handler": {"task": "detection"}}))
    build_archives(folder / "model_store", ONNX, str(folder / f"{ONNX}.onnx"), str(folder / f"{ONNX}.yaml"))
    return folder


def test_video_ray_joins_a_plain_ray_cluster_from_the_project_folder_and_serves_onnx(ray_cluster, project, server,
                                                                                  tmp_path):
    """First in the module, before `ray_serve` deploys: the CLI's own deploy, then its stop."""
    address = ray_cluster.address
    closed = _video_ray(project, "start", "--address", f"127.0.0.1:{ray_cluster.gcs_port + 7}", timeout=60)
    assert closed.returncode == 2 and "no Ray cluster answers at" in closed.stderr, closed.stderr[-2000:]
    # The shipped five archives with the default 1 CPU a replica: 5 replicas, two workers of 2 CPUs.
    full = _video_ray(project, "start", "--address", address, timeout=120)
    assert full.returncode == 2, full.stdout[-2000:] + full.stderr[-2000:]
    message = full.stderr.strip().splitlines()[-1]
    assert "the replicas do not all fit on the cluster's nodes" in message and "(5 CPU in all)" in message, message
    assert all(f"{name} 1 x 1 CPU" in message for name in ("frame_quality", "face_detector", "fixed_batch_cnn"))
    assert "--replica-cpus 0.66 fits every replica" in message and message.count(" 2 CPU") == 2
    port = RAY_HTTP_PORT + env_port_offset() + 1
    started = _video_ray(project, "start", "--address", address, "--models", f"{MODEL},{ONNX}",
                         "--replica-cpus", "0.25", "--port", str(port))
    assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
    assert "applications running; waiting for" in started.stdout and f"/predictions/{MODEL}" in started.stdout
    key = json.loads((project / "key_file.json").read_text())["inference"]["key"]
    base, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {key}"}
    photo = (support.ROOT / "data/images/chelsea.png").read_bytes()
    own = requests.put(f"{base}/predictions/{MODEL}", data=photo, headers=auth, timeout=60)
    assert (own.status_code, own.content) == _put(server.inference_url, server.auth(), MODEL, photo)
    onnx_ts = TorchServe(tmp_path / "ts", project / "model_store", overlays=[f"load_models={ONNX}.mar\n"]).start()
    try:
        for frame, boxes in SCENES:
            body = support.png(frame)
            on_ray = _put(base, auth, ONNX, body)
            assert on_ray == _put(onnx_ts.inference_url, onnx_ts.auth(), ONNX, body)
            assert on_ray[0] == 200 and [(d["label"], d["box"], d["score"]) for d in
                                         json.loads(on_ray[1])["frames"][0]["detections"]] == boxes
    finally:
        onnx_ts.stop()
    assert json.loads((project / "video-ray.json").read_text())["address"] == address
    stopped = _video_ray(project, "stop", timeout=120)  # the cluster start deployed to, from video-ray.json
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    assert f"deleted the applications on the Ray cluster at {address}" in stopped.stdout, stopped.stderr[-2000:]
    assert "its nodes keep running" in stopped.stderr and not (project / "video-ray.json").exists()
    with pytest.raises(requests.ConnectionError):
        requests.put(f"{base}/predictions/{MODEL}", data=photo, headers=auth, timeout=10)


def _put(base, auth, model, body):
    answer = requests.put(f"{base}/predictions/{model}", data=body, headers=auth, timeout=60)
    return answer.status_code, answer.content


def _requests():
    """(name, path, method, body, headers): one of each door and dialect the README lists."""
    second = support.png(support.frame(240, 320, 32))
    clip = support.npy(np.stack([PIXELS, support.frame(480, 640, 33)]))
    oip = {"inputs": [{"name": "frames", "shape": [24, 32, 3], "datatype": "UINT8",
                       "data": PIXELS[:24, :32].reshape(-1).tolist()}]}
    segment = segments.segment("mpegts", frames=6)
    pred = f"/predictions/{MODEL}"
    return [
        ("curl -T, no type", pred, "PUT", JPEG, {}),
        ("png with ids", pred, "POST", second, {"Content-Type": "image/png", "X-Stream-Id": "cam-1",
                                                "X-Frame-Id": "7"}),
        ("versioned", f"{pred}/1.0", "POST", JPEG, {"Content-Type": "image/jpeg"}),
        ("npy clip", pred, "POST", clip, {"Content-Type": "application/x-npy"}),
        ("raw pixels", pred, "POST", PIXELS.tobytes(), {"Content-Type": "application/octet-stream",
                                                         "X-Frame-Width": "640", "X-Frame-Height": "480"}),
        ("json base64", pred, "POST", json.dumps({"data": base64.b64encode(JPEG).decode()}).encode(),
         {"Content-Type": "application/json"}),
        ("video segment", pred, "POST", segment, {"Content-Type": "video/mp2t", "X-Sample-Fps": "10"}),
        ("corrupt", pred, "POST", JPEG[: len(JPEG) // 3], {"Content-Type": "image/jpeg"}),
        ("empty", pred, "POST", b"", {"Content-Type": "image/jpeg"}),
        ("stale", pred, "POST", JPEG, {"Content-Type": "image/jpeg", "X-Capture-Time": "1000"}),
        ("bad header", pred, "POST", JPEG, {"Content-Type": "image/jpeg", "X-Capture-Time": "soon"}),
        ("oip json", f"/v2/models/{MODEL}/infer", "POST", json.dumps(oip).encode(),
         {"Content-Type": "application/json"}),
        ("oip not a tensor", f"/v2/models/{MODEL}/infer", "POST", b'{"inputs": 3}',
         {"Content-Type": "application/json"}),
        ("face detector", "/predictions/face_detector", "PUT", (support.ROOT / "data/images/astronaut.png")
         .read_bytes(), {}),
        # What the engine writes itself: TorchServe's frontend pretty-prints these, with a newline.
        ("wrong key", pred, "PUT", JPEG, {"Authorization": "Bearer wrong"}),
        ("not a bearer key", "/ping", "GET", b"", {"Authorization": "Basic d3Jvbmc="}),
        ("unknown model", "/predictions/nope", "PUT", JPEG, {}),
        ("unknown version", f"{pred}/9.9", "PUT", JPEG, {}),
        ("oip unknown model", "/v2/models/nope/infer", "POST", json.dumps(oip).encode(),
         {"Content-Type": "application/json"}),
        ("unknown route", "/nowhere", "GET", b"", {}),
        ("ping", "/ping", "GET", b"", {}),
        # Any method on /predictions reaches the handler, as TorchServe routes it.
        ("GET predictions", pred, "GET", b"", {}),
        ("DELETE predictions", pred, "DELETE", b"", {}),
    ]


def _send(base, auth, name, path, method, body, headers):
    answer = requests.request(method, base + path, data=body, headers={**auth, **headers}, timeout=120)
    return answer.status_code, re.sub(rb"was \d+ ms old", b"was N ms old", answer.content)  # the clock moved


@pytest.mark.parametrize("case", _requests(), ids=lambda case: case[0])
def test_every_door_answers_byte_for_byte_what_torchserve_answers(server, ray_serve, case):
    on_torchserve = _send(server.inference_url, server.auth(), *case)
    on_ray = _send(ray_serve.inference_url, ray_serve.auth(), *case)
    assert on_ray == on_torchserve


def _form(base, auth):
    second = support.png(support.frame(240, 320, 34))
    answers = []
    for files in ([("frame0", JPEG), ("frame1", ("b.png", second, "image/png"))], [("data", JPEG), ("data", second)]):
        answer = requests.post(f"{base}/predictions/{MODEL}", headers=auth, files=files,
                               data={"frame_id": "clip", "stream_id": "cam-f"}, timeout=120)
        answers.append((answer.status_code, answer.content))
    return answers


def test_multipart_forms_answer_as_on_torchserve_a_lost_part_refused_alike(server, ray_serve):
    on_ray = _form(ray_serve.inference_url, ray_serve.auth())
    assert on_ray == _form(server.inference_url, server.auth())
    assert [status for status, _ in on_ray] == [200, 400] and b"BadForm" in on_ray[1][1]


def test_the_key_is_required_and_a_rotation_refuses_the_old_one_at_once(ray_serve):
    from rayserve.cli import write_keys

    url = f"{ray_serve.inference_url}/predictions/{MODEL}"
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        answer = requests.put(url, data=JPEG, headers=headers, timeout=60)
        assert (answer.status_code, answer.json()["type"]) == (400, "InvalidKeyException")
    old = ray_serve.auth()
    write_keys(ray_serve.workdir / "key_file.json", rotate=True)
    assert requests.put(url, data=JPEG, headers=old, timeout=60).status_code == 400
    assert requests.put(url, data=JPEG, headers=ray_serve.auth(), timeout=60).status_code == 200
    ping = requests.get(f"{ray_serve.inference_url}/ping", headers=ray_serve.auth(), timeout=60)
    assert (ping.status_code, ping.json()) == (200, {"status": "Healthy"})


def test_routes_torchserve_has_not_and_requests_too_large(ray_serve):
    auth = ray_serve.auth()
    base = ray_serve.inference_url
    meta = requests.get(f"{base}/v2/models/{MODEL}", headers=auth, timeout=60)
    assert meta.status_code == 200 and meta.json()["versions"] == ["1.0"]
    assert requests.get(f"{base}/v2/models/{MODEL}/ready", headers=auth, timeout=60).json()["ready"] is True
    missing = requests.post(f"{base}/predictions/nope", data=JPEG, headers=auth, timeout=60)
    assert (missing.status_code, missing.json()["type"]) == (404, "ModelNotFoundException")
    version = requests.post(f"{base}/predictions/{MODEL}/9.9", data=JPEG, headers=auth, timeout=60)
    assert (version.status_code, version.json()["type"]) == (404, "ModelVersionNotFoundException")

def test_a_request_past_max_request_size_is_answered_as_torchserve_answers_it(server, ray_serve):
    huge = b"\0" * 209_715_201

    def send(base, auth):
        answer = requests.post(f"{base}/predictions/{MODEL}", data=huge, timeout=120,
                               headers={**auth, "Content-Type": "application/octet-stream"})
        return answer.status_code, answer.content

    assert send(ray_serve.inference_url, ray_serve.auth()) == send(server.inference_url, server.auth()) == (413, b"")


def test_a_replica_bounds_its_own_queue_and_answers_504_past_response_timeout(ray_serve):
    """The model's replica is the ingress of its `/predictions`: its queue bound (max(5, 2 x 1) + 100 here,
    `job_queue_size` 100) and `responseTimeout` (4 s; a face takes about 0.1 s) answer with TorchServe's
    JSON (a full queue in TorchServe's own bytes). The 140 requests leave together (connected first, then a barrier), so the bound is reached
    before any times out, however loaded the machine."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    url = f"{ray_serve.inference_url}/predictions/face_detector_hurried"
    photo = (support.ROOT / "data/images/astronaut.png").read_bytes()
    auth = ray_serve.auth()
    together = threading.Barrier(140)

    def send(_):
        with requests.Session() as session:
            session.get(f"{ray_serve.inference_url}/ping", headers=auth, timeout=60)
            together.wait(timeout=120)
            answer = session.put(url, data=photo, headers=auth, timeout=60)
        return answer.status_code, answer.content

    with ThreadPoolExecutor(140) as pool:
        answers = list(pool.map(send, range(140)))
    kinds = {status: {json.loads(body).get("type") for s, body in answers if s == status} for status, _ in answers}
    counts = {status: sum(1 for s, _ in answers if s == status) for status in kinds}
    assert set(kinds) == {200, 503, 504}, counts  # each request its own answer, and all three met
    assert kinds[503] == {"ServiceUnavailableException"} and kinds[504] == {"ResponseTimeout"}
    # TorchServe's own bytes for a full queue, word for word (its text is about workers).
    assert {body for status, body in answers if status == 503} == {
        QUEUE_FULL.format(model="face_detector_hurried").encode()}
    assert requests.put(url, data=photo, headers=ray_serve.auth(), timeout=60).status_code == 200


def _loadgen(ray_serve, tmp_path, model, *flags):
    report = tmp_path / f"{model}.json"
    status = loadgen.main(["--url", ray_serve.inference_url, "--model", model, "--token-file",
                           str(ray_serve.workdir / "key_file.json"), "--resolution", "320x240", "--sla-ms", "60000",
                           "--no-progress", "--report", str(report), *flags])
    return status, json.loads(report.read_text())


def _eventually(check, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.5)
    return found


def test_load_is_answered_by_replicas_on_both_workers(ray_serve, tmp_path):
    cluster = ray_serve.cluster
    assert cluster.replicas("frame_quality_spread") == ["worker1", "worker2"]
    status, report = _loadgen(ray_serve, tmp_path, "frame_quality_spread", "--streams", "8", "--fps", "6",
                              "--duration", "6")
    assert status == 0 and report["responses"] == {"200": 288}
    # Each worker's metrics port shows the handler's frames and Ray's own request counter for its replica.
    for node in ("worker1", "worker2"):
        _eventually(lambda node=node: cluster.metric(node, "ray_video_frames_total",
                                                     ModelName="frame_quality_spread") > 0, 40,
                    f"no ray_video_frames_total on {node}")
        assert cluster.metric(node, "ray_serve_deployment_request_counter_total",
                              deployment="frame_quality_spread") > 0
    assert cluster.metric("head", "ray_video_frames_total", ModelName="frame_quality_spread") == 0


def test_a_burst_adds_replicas_and_calm_removes_them(ray_serve, tmp_path):
    cluster = ray_serve.cluster
    assert len(cluster.replicas("frame_quality_auto")) == 1
    peak = []
    watcher = threading.Thread(target=lambda: peak.append(_eventually(
        lambda: len(cluster.replicas("frame_quality_auto")) > 1, 60, "the burst added no replica")))
    watcher.start()
    status, report = _loadgen(ray_serve, tmp_path, "frame_quality_auto", "--streams", "16", "--fps", "15",
                              "--duration", "20", "--resolution", "1280x720")
    watcher.join()
    # Past what even three replicas on two cores take: each request still gets its own answer, a
    # full queue 503 at once or a frame that waited past max_frame_age_ms 504, never a hang.
    assert peak == [True] and report["responses"]["200"] > 0
    assert set(report["responses"]) <= {"200", "503", "504"}, report["responses"]
    _eventually(lambda: len(cluster.replicas("frame_quality_auto")) == 1, 90, "calm did not remove the replicas")


def test_batch_settings_change_on_live_replicas_without_a_lost_request(ray_serve, tmp_path):
    from ray import serve

    sizes = []

    def tune():
        time.sleep(2)
        for size in (2, 6):
            serve.get_deployment_handle("frame_quality_spread", app_name("frame_quality_spread"))  # the deployment is there
            app = serve.status().applications[app_name("frame_quality_spread")].deployments["frame_quality_spread"]
            assert app.status == "HEALTHY"
            ray_serve.reconfigure("frame_quality_spread", {"batch_size": size, "max_batch_delay_ms": 40})
            sizes.append(size)
            time.sleep(3)

    tuner = threading.Thread(target=tune)
    tuner.start()
    status, report = _loadgen(ray_serve, tmp_path, "frame_quality_spread", "--streams", "8", "--fps", "6",
                              "--duration", "10")
    tuner.join()
    assert sizes == [2, 6] and report["responses"] == {"200": 480} and status == 0, report["responses"]
    # Both replicas took each new size live: one log each (none restarted), sizes 8 (the archive's), 2, 6.
    assert ray_serve.batch_limits("frame_quality_spread") == [[8, 2, 6], [8, 2, 6]]
    assert max(ray_serve.batch_requests("frame_quality_spread")) <= 8


def test_autotune_watch_follows_the_rate_with_the_live_replicas_batch_size(ray_serve):
    """`video-autotune watch --engine ray`'s loop on the spread model: the rate read from every
    node's metrics port, the batch size changed on the live replicas. As on TorchServe
    (tests/e2e/test_autotune.py), a latency model (2 ms/frame + 140 ms) and no queue rule:
    2 fps -> batch 1, 8 fps -> batch 4, 2 fps -> 1; each phase lasts until its switch."""
    from autotune import engines
    from autotune.fit import LatencyFit
    from autotune.watch import Policy, watch
    from loadgen.frames import IMAGES, Format, FrameSource
    from loadgen.metrics import calculate_metrics
    from loadgen.runner import Target, run
    from loadgen.schedule import Plan, Resolution

    model, chunk_s = "frame_quality_spread", 4.0
    before = {"batch_size": 8, "max_batch_delay_ms": 20, **ray_serve.tuning.get(model, {})}
    urls = [f"http://127.0.0.1:{port}" for port in ray_serve.cluster.metrics_ports.values()]
    engine = engines.RayServe(model, urls, ray_serve.args, ray_serve.tuning)
    policy = Policy(interval_s=1.0, hold_s=2.0, cooldown_s=2.0, margin=0.3, ladder=(1, 4, 16),
                    fit=LatencyFit(2.0, 140.0, 1.0, 0), queue_high_ms=float("inf"))
    stop, applied, switches, runs, chunks = threading.Event(), [], [], [], []
    watcher = threading.Thread(target=lambda: applied.extend(watch(
        engine, policy, stop, lambda old, new: switches.append(new.batch_size))))
    target = Target(ray_serve.inference_url, model, ray_serve.key())

    def send(fps: float) -> None:
        plan = Plan(streams=2, fps=fps / 2, duration_s=chunk_s, resolutions=(Resolution(160, 120),))
        runs.append(run(plan, target, FrameSource(Format.JPEG, 1, 4, IMAGES), concurrency=64))

    watcher.start()
    try:
        for number, fps in enumerate((2.0, 8.0, 2.0), start=1):
            deadline = time.monotonic() + 120
            while len(switches) < number:
                assert time.monotonic() < deadline, f"no switch {number} in 120 s at {fps} fps: {switches}"
                chunks.append(threading.Thread(target=send, args=(fps,)))
                chunks[-1].start()
                time.sleep(chunk_s)  # back to back: no gap in the load
    finally:
        stop.set()
        for chunk in chunks:
            chunk.join(timeout=120)
        watcher.join(timeout=120)
        ray_serve.tuning = engine.tuning
        ray_serve.reconfigure(model, before)  # the worker kill below needs batches, not batch 1
    assert switches[:3] == [1, 4, 1] and [s.batch_size for s in applied] == switches, switches
    records = [r for result in runs for r in result.records]
    assert calculate_metrics(records, chunk_s * len(runs), 60_000.0).responses == {"200": len(records)}
    assert len(records) == sum(len(result.schedule) for result in runs)
    assert engine.tuning[model]["batch_size"] == switches[-1]


def test_video_ingest_tracks_and_counts_on_the_cluster_as_on_torchserve(ray_serve, videos, tmp_path):
    """The tracking scene (tests/scenes.py) read from a file by the real `video-ingest`, tracked,
    with the zone `door` and the line `gate`, answered by the planted detector on the cluster: the
    counts test_tracking asserts against TorchServe, every frame answered, one track id a colour;
    and the same with motion on (`X-Motion` reaches the same core): the model skipped frames."""
    cameras = tmp_path / "cameras.yaml"
    write(cameras, camera("file", str(videos["steady"])),
          camera("motion", str(videos["steady"]), motion={"threshold": 8}))  # test_motion.SCENE_MOTION
    ingest = Ingest(tmp_path, ray_serve, ["--config", str(cameras)], model=PLANTED)
    try:
        assert ingest.process.wait(timeout=180) == 0, ingest.log()[-2000:]  # the file ended, every unit answered
    finally:
        ingest.kill()
    assert_steady_file_counted(ingest)
    assert_steady_file_counted(ingest, "motion")
    assert [a["looked"] for a in ingest.answers("motion")][:30] == [True, True] + [False] * 28


def test_a_worker_killed_under_load_costs_only_its_own_requests(ray_serve, tmp_path):
    """Last in this module: the cluster has one worker from here on."""
    cluster = ray_serve.cluster
    victim = threading.Timer(4, cluster.nodes["worker2"].kill)
    victim.start()
    started = time.monotonic()
    status, report = _loadgen(ray_serve, tmp_path, "frame_quality_spread", "--streams", "8", "--fps", "6",
                              "--duration", "12", "--timeout", "30")
    victim.join()
    took = time.monotonic() - started
    responses = report["responses"]
    assert sum(responses.values()) == 576 and took < 12 + 30, report  # every request answered, none hung
    # Serve's proxy answers 500 for what the dead replica held (the model is the ingress: nothing of
    # ours is left to answer), 503 or 504 StaleFrame for frames that waited while the survivor caught
    # up: each its own answer, never a hang.
    assert set(responses) <= {"200", "500", "503", "504"} and responses["200"] > 450, responses
    _eventually(lambda: cluster.replicas("frame_quality_spread") == ["worker1", "worker1"], 120,
                "Serve did not bring the replica back on the surviving worker")
    answer = requests.put(f"{ray_serve.inference_url}/predictions/frame_quality_spread", data=JPEG,
                          headers=ray_serve.auth(), timeout=60)
    assert answer.status_code == 200
