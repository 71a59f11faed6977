"""ONNX graphs in a real TorchServe, packed by archive.sh: a YOLO-layout detector with Ultralytics'
metadata exported at a fixed batch of 1 and of 16 (640x640) and with dynamic axes; bursts of 32
frames of mixed sizes, every answer checked, on every door; a graph that takes no image answers
every request 500 `ModelNotLoaded` instead of restarting its worker."""

import json
import os
import re
import subprocess
import zipfile

import grpc
import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
import yaml
from onnx import TensorProto, helper

from loadgen import grpc_stubs
from tests import planted, support
from tests.e2e.server import TorchServe, build_archives
from tests.integration.test_onnx import SCENES, ULTRALYTICS
from tests.onnx_export import export
from tests.support import ROOT

SHAPES = {"onnx_batch1": (1, (640, 640)), "onnx_batch16": (16, (640, 640)), "onnx_dynamic": (None, None)}
NOT_IMAGE = "onnx_tokens"
SETTINGS = {"minWorkers": 1, "maxWorkers": 1, "batchSize": 32, "maxBatchDelay": 300, "responseTimeout": 120}


@pytest.fixture(scope="module")
def onnx_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("onnx")
    handler = {"task": "detection", "letterbox_pad": "center", "pad_value": 114, "normalize": {"scale": 1 / 255}}
    for name, (batch, size) in SHAPES.items():
        export(planted.Yolo(), tmp / f"{name}.onnx", batch, size, metadata=ULTRALYTICS)
        (tmp / f"{name}.yaml").write_text(yaml.safe_dump({**SETTINGS, "handler": handler}))
        build_archives(tmp / "store", name, str(tmp / f"{name}.onnx"), str(tmp / f"{name}.yaml"))
    # archive.sh refuses a graph that takes no image; an archive packed elsewhere (or before this
    # check) still reaches a worker: pack a good graph as t.onnx, then put the bad one in its place.
    export(planted.Classifier(), tmp / "t.onnx", None, None)
    (tmp / "t.yaml").write_text(yaml.safe_dump({**SETTINGS, "handler": {}}))
    build_archives(tmp / "store", NOT_IMAGE, str(tmp / "t.onnx"), str(tmp / "t.yaml"))
    tokens = helper.make_graph([helper.make_node("Identity", ["tokens"], ["y"])], "g",
                               [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["batch", 77])],
                               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    _replace(tmp / "store" / f"{NOT_IMAGE}.mar", "t.onnx",
             helper.make_model(tokens, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
    names = [*SHAPES, NOT_IMAGE]
    models = {m: {"1.0": {"defaultVersion": True, "marName": f"{m}.mar", **SETTINGS}} for m in names}
    overlay = f"load_models={','.join(f'{m}.mar' for m in names)}\nmodels={json.dumps(models)}\n"
    ts = TorchServe(tmp_path_factory.mktemp("onnx_ts"), tmp / "store", overlays=[overlay]).start()
    yield ts
    ts.stop()


def _replace(mar, name, data):
    """`mar` with its member `name` holding `data` instead."""
    with zipfile.ZipFile(mar) as src:
        members = [(info, data if info.filename == name else src.read(info)) for info in src.infolist()]
    with zipfile.ZipFile(mar, "w", zipfile.ZIP_DEFLATED) as dst:
        for info, content in members:
            dst.writestr(info, content)


def _boxes(frame):
    return [(d["label"], d["box"], d["score"]) for d in frame["detections"]]


def _chunks(ts, model):
    """(frames, chunks) of each of `model`'s batches, from the handler's log line."""
    pattern = rf"W-\d+-{re.escape(model)}_[\d.]+-stdout MODEL_LOG - batch: \d+ requests, (\d+) frames in (\d+) chunks"
    return [(int(f), int(c)) for f, c in re.findall(pattern, ts.model_log())]


@pytest.mark.parametrize("model", SHAPES)
def test_a_burst_of_32_mixed_frames_every_answer_exact(onnx_server, model):
    ts = onnx_server
    frames = [SCENES[i % 4][0] for i in range(32)]
    before = len(_chunks(ts, model))
    answers = ts.burst(model, [(support.png(f), "image/png", {}) for f in frames])
    for i, answer in enumerate(answers):
        assert answer.status_code == 200, answer.text
        [frame] = answer.json()["frames"]
        assert (frame["height"], frame["width"]) == frames[i].shape[:2]
        assert _boxes(frame) == SCENES[i % 4][1]
    batches = _chunks(ts, model)[before:]
    assert sum(f for f, _ in batches) == 32 and max(f for f, _ in batches) > 1  # batched together
    batch = SHAPES[model][0]
    if batch is not None:  # a fixed-batch graph: chunks of exactly its batch, padded
        assert [c for _, c in batches] == [-(-f // batch) for f, _ in batches]


def test_every_door_into_a_fixed_batch_graph(onnx_server):
    ts, model = onnx_server, "onnx_batch16"
    pngs = [support.png(SCENES[0][0]), support.png(SCENES[3][0])]
    expected = [SCENES[0][1], SCENES[3][1]]
    form = requests.post(f"{ts.inference_url}/predictions/{model}", headers=ts.auth(), timeout=120,
                         files={"a": ("a.png", pngs[0]), "b": ("b.png", pngs[1])})
    assert [_boxes(f) for f in form.json()["frames"]] == expected
    pb2, pb2_grpc = grpc_stubs.load()
    with grpc.insecure_channel(f"127.0.0.1:{ts.properties.get('grpc_inference_port', '7070')}") as channel:
        reply = pb2_grpc.InferenceAPIsServiceStub(channel).Predictions(
            pb2.PredictionsRequest(model_name=model, input={"data": pngs[1]}), timeout=120,
            metadata=[("authorization", f"Bearer {ts.key('inference')}")])
    assert _boxes(json.loads(reply.prediction)["frames"][0]) == expected[1]
    tensor = httpclient.InferInput("images", [2], "BYTES")
    tensor.set_data_from_numpy(np.array(pngs, dtype=np.object_), binary_data=True)
    with httpclient.InferenceServerClient(ts.inference_url.removeprefix("http://"), network_timeout=120) as client:
        result = client.infer(model, [tensor], headers=ts.auth())
    assert result.as_numpy("num_detections").tolist() == [1, 1]
    assert result.as_numpy("detection_boxes").tolist() == [[expected[0][0][1]], [expected[1][0][1]]]


def test_a_graph_that_takes_no_image_answers_500_model_not_loaded_with_the_reason(onnx_server):
    ts = onnx_server
    answer = ts.predict(NOT_IMAGE, support.png(SCENES[3][0]), "image/png")
    body = answer.json()
    assert (answer.status_code, body["type"]) == (500, "ModelNotLoaded")
    assert "the ONNX graph's input 'tokens' is ['batch', 77] tensor(float), not an image tensor" in body["message"]
    assert ts.get("/ping").status_code == 200


def test_archive_sh_refuses_a_setting_that_contradicts_the_graph_before_packing(tmp_path):
    export(planted.Yolo(), tmp_path / "b1.onnx", 1, (640, 640))
    (tmp_path / "b1.yaml").write_text(yaml.safe_dump({"handler": {"task": "detection", "static_batch": 8}}))
    packed = subprocess.run(["bash", str(ROOT / "archive.sh"), "b1", str(tmp_path / "b1.onnx"), str(tmp_path / "b1.yaml")],
                            env={**os.environ, "MODEL_STORE": str(tmp_path / "store")},
                            capture_output=True, text=True, timeout=300)
    assert packed.returncode == 1
    assert ("archive.sh: handler.static_batch = 8 contradicts the ONNX graph's input 'images' [1, 3, 640, 640] "
            "float32: it takes exactly 1 frame; drop static_batch") in packed.stderr
    assert not (tmp_path / "store" / "b1.mar").exists()
