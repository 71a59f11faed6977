"""Every producer a TorchServe user already runs, against the shipped config (DESIGN section 4a):
TorchServe's `curl -T` idiom, multipart from curl and requests, gRPC `Predictions` with stubs from
the wheel's proto, and the Open Inference Protocol from the real `tritonclient.http`. Every HTTP
client runs against both engines (`server` is TorchServe, then Ray Serve on a three-node cluster:
DESIGN section 14); gRPC is TorchServe's alone (docs/engines.md)."""

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from loadgen import grpc_stubs
from tests import support
from tests.e2e.server import TorchServe
from tests.support import ROOT

MODEL = "frame_quality"
PIXELS = support.frame(480, 640, 21)
JPEG = support.jpeg(PIXELS)
DECODED = support.decoded(JPEG)
BAD = JPEG[: len(JPEG) // 3]


@pytest.fixture(params=["torchserve", "ray"])
def server(request, torchserve_server):
    """Each engine in turn: the shared TorchServe, or the same archives on Ray Serve."""
    return torchserve_server if request.param == "torchserve" else request.getfixturevalue("ray_serve")


@pytest.fixture(scope="module")
def frame_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("frames") / "frame.jpg"
    path.write_bytes(JPEG)
    return path


def _curl(server, *args):
    """`curl` as a user runs it: status line, then the JSON body."""
    out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", "-H", f"Authorization: Bearer {server.key('inference')}",
                          f"{server.inference_url}/predictions/{MODEL}", *args],
                         check=True, capture_output=True, timeout=120).stdout.decode()
    body, _, status = out.rpartition("\n")
    return int(status), json.loads(body)


def _grpc(server, inputs):
    pb2, pb2_grpc = grpc_stubs.load()
    port = server.properties.get("grpc_inference_port", "7070")
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        answer = pb2_grpc.InferenceAPIsServiceStub(channel).Predictions(
            pb2.PredictionsRequest(model_name=MODEL, input=inputs), timeout=120,
            metadata=[("authorization", f"Bearer {server.key('inference')}")])
    return json.loads(answer.prediction)


def _triton(server):
    url = server.inference_url.removeprefix("http://")
    return httpclient.InferenceServerClient(url, network_timeout=120, connection_timeout=120)


def _triton_infer(server, array, datatype):
    tensor = httpclient.InferInput("frames", list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=True)
    with _triton(server) as client:
        return client.infer(MODEL, [tensor], headers=server.auth())


def _frame_values(answer):
    [frame] = answer["frames"]
    assert (frame["height"], frame["width"]) == (480, 640)
    return frame["outputs"]


def test_curl_t_without_content_type(server, frame_file):
    status, answer = _curl(server, "-T", str(frame_file), "-H", "X-Frame-Id: curl-T")
    assert (status, answer["code"], answer["frame_id"]) == (200, 200, "curl-T")
    support.assert_quality(_frame_values(answer), DECODED)


def test_curl_multipart_with_form_fields(server, frame_file):
    status, answer = _curl(server, "-F", f"data=@{frame_file}", "-F", "stream_id=cam-9", "-F", "frame_id=17")
    assert (status, answer["stream_id"], answer["frame_id"]) == (200, "cam-9", "17")
    support.assert_quality(_frame_values(answer), DECODED)


def test_requests_multipart_parts_are_a_clip_in_order(server):
    second = support.png(support.frame(240, 320, 22))
    answer = requests.post(f"{server.inference_url}/predictions/{MODEL}", headers=server.auth(), timeout=120,
                           files=[("frame0", JPEG), ("frame1", ("b.png", second, "image/png"))],
                           data={"frame_id": "clip"})
    assert answer.status_code == 200, answer.text
    first, other = answer.json()["frames"]
    support.assert_quality(first["outputs"], DECODED)
    support.assert_quality(other["outputs"], support.decoded(second))


def test_same_name_parts_are_refused_not_half_served(server):
    # TorchServe keeps only the last part of a field name; the handler sees the form lost a frame.
    big = support.jpeg(support.frame(720, 1280, 23))
    answer = requests.post(f"{server.inference_url}/predictions/{MODEL}", headers=server.auth(), timeout=120,
                           files=[("data", big), ("data", JPEG)])
    assert answer.status_code == 400
    assert answer.json()["type"] == "BadForm" and "own name" in answer.json()["message"]


def test_grpc_predictions_with_options_as_input_keys(torchserve_server):
    server = torchserve_server
    answer = _grpc(server, {"data": PIXELS.tobytes(), "frame_width": b"640", "frame_height": b"480",
                            "content_type": b"application/octet-stream", "stream_id": b"cam-g"})
    assert (answer["code"], answer["stream_id"]) == (200, "cam-g")
    support.assert_quality(_frame_values(answer), PIXELS)
    answer = _grpc(server, {"data": JPEG})
    support.assert_quality(_frame_values(answer), DECODED)


def test_tritonclient_binary_uint8_frame_and_clip(server):
    result = _triton_infer(server, PIXELS, "UINT8")
    expected = support.quality(PIXELS)
    for name, value in expected.items():
        assert result.as_numpy(name).shape == (1,)
        assert result.as_numpy(name)[0] == pytest.approx(value, rel=1e-4)
    clip = np.stack([PIXELS, support.frame(480, 640, 24)])
    result = _triton_infer(server, clip, "UINT8")
    for name in expected:
        assert result.as_numpy(name).tolist() == pytest.approx(
            [support.quality(p)[name] for p in clip], rel=1e-4)


def test_tritonclient_gzip_request_asked_outputs_and_request_id(server):
    tensor = httpclient.InferInput("frames", list(PIXELS.shape), "UINT8")
    tensor.set_data_from_numpy(PIXELS)
    with _triton(server) as client:
        result = client.infer(MODEL, [tensor], headers=server.auth(), request_id="cam-4/77",
                              outputs=[httpclient.InferRequestedOutput("contrast")],
                              request_compression_algorithm="gzip")
    answer = result.get_response()
    assert answer["id"] == "cam-4/77" and [o["name"] for o in answer["outputs"]] == ["contrast"]
    assert result.as_numpy("contrast")[0] == pytest.approx(support.quality(PIXELS)["contrast"], rel=1e-4)


def test_tritonclient_bytes_of_encoded_images(server):
    second = support.png(support.frame(120, 160, 25))
    result = _triton_infer(server, np.array([JPEG, second], dtype=np.object_), "BYTES")
    for name in ("brightness", "contrast", "sharpness"):
        assert result.as_numpy(name).tolist() == pytest.approx(
            [support.quality(DECODED)[name], support.quality(support.decoded(second))[name]], rel=1e-4)


def test_oip_json_request(server):
    small = PIXELS[:32, :48]
    body = {"inputs": [{"name": "x", "shape": list(small.shape), "datatype": "UINT8",
                        "data": small.reshape(-1).tolist()}]}
    answer = requests.post(f"{server.inference_url}/v2/models/{MODEL}/infer", json=body,
                           headers=server.auth(), timeout=120)
    assert answer.status_code == 200, answer.text
    outputs = {o["name"]: o for o in answer.json()["outputs"]}
    for name, value in support.quality(small).items():
        assert outputs[name]["shape"] == [1] and outputs[name]["datatype"] == "FP32"
        assert outputs[name]["data"][0] == pytest.approx(value, rel=1e-4)


def test_tritonclient_json_after_binary_on_one_client_with_one_headers_dict(server):
    # As a user writes it: one client, one headers dict. tritonclient's infer writes
    # Inference-Header-Content-Length into that dict on the binary request, and sends it again
    # with the JSON one that follows.
    small = PIXELS[:32, :48].copy()
    headers = server.auth()
    with _triton(server) as client:
        answers = []
        for binary in (True, False, True):
            tensor = httpclient.InferInput("frames", list(small.shape), "UINT8")
            tensor.set_data_from_numpy(small, binary_data=binary)
            answers.append(client.infer(MODEL, [tensor], headers=headers))
    assert "Inference-Header-Content-Length" in headers  # the client did carry the stale length
    for result in answers:
        for name, value in support.quality(small).items():
            assert result.as_numpy(name)[0] == pytest.approx(value, rel=1e-4)


def test_tritonclient_reads_an_oip_error(server):
    with pytest.raises(InferenceServerException) as caught:
        _triton_infer(server, np.array([BAD], dtype=np.object_), "BYTES")
    assert caught.value.status() == "400" and caught.value.message().startswith("CorruptFrame: ")


def _doors(server, folder):
    """Entry point name -> send(body) -> (status, answer)."""
    url = f"{server.inference_url}/predictions/{MODEL}"

    def curl_t(body):
        path = folder / f"{threading.get_ident()}.jpg"
        path.write_bytes(body)
        return _curl(server, "-T", str(path))

    def post(**kwargs):
        answer = requests.post(url, headers={**server.auth(), **kwargs.pop("headers", {})}, timeout=120, **kwargs)
        return answer.status_code, answer.json()

    def triton(body):
        try:
            result = _triton_infer(server, np.array([body], dtype=np.object_), "BYTES")
            return 200, {"brightness": float(result.as_numpy("brightness")[0])}
        except InferenceServerException as err:
            return int(err.status()), {"error": err.message()}

    def grpc_call(body):
        answer = _grpc(server, {"data": body})
        return answer["code"], answer

    doors = {
        "curl -T": curl_t,
        "no content type": lambda body: post(data=body),
        "multipart": lambda body: post(files={"data": body}),
        "oip": triton,
    }
    if isinstance(server, TorchServe):  # Ray's gRPC proxy does not carry TorchServe's proto (docs/engines.md)
        doors["grpc"] = grpc_call
    return doors


def test_a_corrupt_frame_on_each_door_fails_alone_while_batch_mates_on_other_doors_get_200(server, tmp_path):
    doors = _doors(server, tmp_path)
    names = list(doors)
    # Door i sends the corrupt frame while door i+1 sends a good one, all at once, several times.
    jobs = [(names[i], BAD) for i in range(len(names))] + [(names[(i + 1) % len(names)], JPEG)
                                                           for i in range(len(names))]
    before = len(server.batch_requests(MODEL))
    for _ in range(3):
        barrier = threading.Barrier(len(jobs))

        def send(job, barrier=barrier):
            name, body = job
            barrier.wait(timeout=60)
            return doors[name](body)

        with ThreadPoolExecutor(len(jobs)) as pool:
            answers = list(pool.map(send, jobs))
        for (name, body), (status, answer) in zip(jobs, answers):
            if body is BAD:
                assert status == 400, (name, answer)
                text = answer.get("error") or answer["type"]
                assert "CorruptFrame" in text, (name, answer)
            else:
                assert status == 200, (name, answer)
                brightness = answer["brightness"] if "brightness" in answer else _frame_values(answer)["brightness"]
                assert brightness == pytest.approx(support.quality(DECODED)["brightness"], rel=1e-4)
        if max(server.batch_requests(MODEL)[before:]) > 1:
            break
    assert max(server.batch_requests(MODEL)[before:]) > 1, "no batch held two requests"
    if isinstance(server, TorchServe):
        assert server.worker_status(MODEL) == ["READY"]


def _readme_snippets():
    section = (ROOT / "README.md").read_text().split("\n## Clients\n", 1)[1].split("\n## ", 1)[0]
    clients = (ROOT / "docs" / "clients.md").read_text()  # the second multipart snippet, with `requests`; gRPC
    for heading in ("Multipart with `requests`", "gRPC"):
        section += clients.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(bash|python)\n(.*?)```", section, re.DOTALL)


def test_the_readme_has_a_snippet_per_entry_point():
    assert [lang for lang, _ in _readme_snippets()] == ["bash", "bash", "python", "python", "python", "python"]


def _cases():
    """(engine, snippet index): every snippet on TorchServe, every HTTP one on Ray Serve too."""
    snippets = _readme_snippets()
    return [("torchserve", i) for i in range(len(snippets))] + [
        ("ray", i) for i, (_, code) in enumerate(snippets) if "grpc" not in code]


@pytest.mark.parametrize(("engine", "index"), _cases())
def test_each_readme_client_snippet_runs_as_written(request, engine, index):
    server = request.getfixturevalue("torchserve_server" if engine == "torchserve" else "ray_serve")
    lang, code = _readme_snippets()[index]
    if "face_detector" in code:  # the detector over OIP, on the README's own photograph
        (server.workdir / "data" / "images").mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "data" / "images" / "astronaut.png", server.workdir / "data" / "images")
    port = server.properties.get("grpc_inference_port", "7070")
    code = code.replace("127.0.0.1:8080", server.inference_url.removeprefix("http://"))
    code = code.replace("127.0.0.1:7070", f"127.0.0.1:{port}")
    (server.workdir / "frame.jpg").write_bytes(JPEG)
    command = ["bash", "-c", code] if lang == "bash" else [sys.executable, "-c", code]
    out = subprocess.run(command, cwd=server.workdir, capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    if "face_detector" in code:  # what it prints is what the README says it prints
        assert answer == json.loads(code.strip().rsplit("# ", 1)[1]), out.stdout
    elif "frames" in answer:
        assert answer["code"] == 200
        support.assert_quality(_frame_values(answer), DECODED)
    else:  # tritonclient: each output stacked over the one frame
        support.assert_quality({k: v[0] for k, v in answer.items()}, DECODED)


@pytest.mark.parametrize(("engine", "protocol"), [("torchserve", "http"), ("torchserve", "grpc"), ("torchserve", "oip"),
                                                  ("ray", "http"), ("ray", "oip")])
def test_video_loadgen_drives_each_protocol_and_reports_it_the_same_way(request, engine, protocol, tmp_path):
    from loadgen import cli

    server = request.getfixturevalue("torchserve_server" if engine == "torchserve" else "ray_serve")
    port = server.properties.get("grpc_inference_port", "7070")
    report = tmp_path / "report.json"
    code = cli.main(["--url", server.inference_url, "--protocol", protocol, "--grpc-address", f"127.0.0.1:{port}",
                     "--token-file", str(server.workdir / "key_file.json"), "--streams", "2", "--fps", "4",
                     "--duration", "2", "--resolution", "320x240", "--sla-ms", "60000", "--no-progress",
                     "--report", str(report)])
    data = json.loads(report.read_text())
    assert code == 0 and data["responses"] == {"200": 16}
    assert data["config"]["protocol"] == protocol
