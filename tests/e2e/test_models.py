"""Vision tasks in a real TorchServe: a YOLO-format detector built from code, packed by archive.sh
with its labels, answered in each frame's pixels on every door; a raw answer over the size limit."""

import base64
import json

import grpc
import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
import yaml

from loadgen import grpc_stubs
from tests import planted, support
from tests.e2e.server import TorchServe, build_archives

DETECTOR, RAW = "planted_yolo", "planted_raw"
#: Frames at letterbox scales 1/2 and 1 (exact), sent together as one burst.
FRAMES = [planted.scene(320, 640, {0: (40, 20, 200, 100), 2: (400, 200, 640, 320)}),
          planted.scene(200, 160, {1: (10, 10, 150, 190)})]
EXPECTED = [[("person", [40, 20, 200, 100], 0.9), ("car", [400, 200, 640, 320], 0.8)],
            [("bicycle", [10, 10, 150, 190], 0.85)]]


def _archive(tmp, name, model, handler, labels=None):
    model.save(str(tmp / f"{name}.pt"))
    config = {"minWorkers": 1, "maxWorkers": 1, "batchSize": 8, "maxBatchDelay": 50, "responseTimeout": 120,
              "handler": handler}
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(config))
    if labels is not None:
        (tmp / "index_to_name.json").write_text(json.dumps(labels))
    build_archives(tmp / "store", name, str(tmp / f"{name}.pt"), str(tmp / f"{name}.yaml"))


@pytest.fixture(scope="module")
def models_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("models")
    scale = {"normalize": {"scale": 1 / 255}}
    _archive(tmp, DETECTOR, planted.script(planted.Yolo()),
             {"task": "detection", "resize": "letterbox", "input_size": [320, 320], "letterbox_pad": "center",
              "pad_value": 114, "labels": "index_to_name.json", **scale},
             {"0": ["n00007846", "person"], "1": "bicycle", "2": "car"})
    _archive(tmp, RAW, planted.script(planted.Segmenter()), {"max_response_bytes": 100000, **scale})
    models = {m: {"1.0": {"defaultVersion": True, "marName": f"{m}.mar", "minWorkers": 1, "maxWorkers": 1,
                          "batchSize": 8, "maxBatchDelay": 50, "responseTimeout": 120}} for m in (DETECTOR, RAW)}
    overlay = f"load_models={DETECTOR}.mar,{RAW}.mar\nmodels={json.dumps(models)}\n"
    ts = TorchServe(tmp_path_factory.mktemp("models_ts"), tmp / "store", overlays=[overlay]).start()
    yield ts
    ts.stop()


def _boxes(detections):
    return [(d["label"], d["box"], d["score"]) for d in detections]


def test_detections_in_each_frames_pixels_through_every_door(models_server):
    ts = models_server
    pngs = [support.png(f) for f in FRAMES]
    # A burst over /predictions without a Content-Type (curl -T), batched together.
    answers = ts.burst(DETECTOR, [(p, "", {}) for p in pngs] * 3)
    for i, answer in enumerate(answers):
        assert answer.status_code == 200, answer.text
        [frame] = answer.json()["frames"]
        assert (frame["height"], frame["width"]) == FRAMES[i % 2].shape[:2]
        assert _boxes(frame["detections"]) == EXPECTED[i % 2]
    assert max(ts.batch_requests(DETECTOR)) > 1
    # Multipart: two file parts, a clip of two frames.
    form = requests.post(f"{ts.inference_url}/predictions/{DETECTOR}", headers=ts.auth(), timeout=120,
                         files={"a": ("a.png", pngs[0]), "b": ("b.png", pngs[1])}).json()
    assert [_boxes(f["detections"]) for f in form["frames"]] == EXPECTED
    # gRPC Predictions.
    pb2, pb2_grpc = grpc_stubs.load()
    with grpc.insecure_channel(f"127.0.0.1:{ts.properties.get('grpc_inference_port', '7070')}") as channel:
        reply = pb2_grpc.InferenceAPIsServiceStub(channel).Predictions(
            pb2.PredictionsRequest(model_name=DETECTOR, input={"data": pngs[1]}), timeout=120,
            metadata=[("authorization", f"Bearer {ts.key('inference')}")])
    answer = json.loads(reply.prediction)
    assert answer["code"] == 200 and _boxes(answer["frames"][0]["detections"]) == EXPECTED[1]
    # OIP, as tritonclient reads it.
    tensor = httpclient.InferInput("images", [2], "BYTES")
    tensor.set_data_from_numpy(np.array(pngs, dtype=np.object_), binary_data=True)
    with httpclient.InferenceServerClient(ts.inference_url.removeprefix("http://"), network_timeout=120) as client:
        result = client.infer(DETECTOR, [tensor], headers=ts.auth())
    assert result.as_numpy("num_detections").tolist() == [2, 1]
    assert result.as_numpy("detection_boxes").tolist() == [[box for _, box, _ in EXPECTED[0]],
                                                          [EXPECTED[1][0][1], [0, 0, 0, 0]]]
    assert result.as_numpy("detection_classes").tolist() == [[0, 2], [1, -1]]


def test_a_raw_answer_over_the_limit_is_refused_with_the_fix(models_server):
    ts = models_server
    small = ts.predict(RAW, support.npy(FRAMES[1][:40, :40].copy()), "application/x-npy")
    assert small.status_code == 200 and len(small.content) < 100000
    big = ts.predict(RAW, support.npy(FRAMES[1]), "application/x-npy")
    body = big.json()
    assert (big.status_code, body["type"]) == (500, "AnswerTooLarge")
    assert "task: raw" in body["message"] and "handler.task to detection" in body["message"]


def test_base64_images_as_json_clients_send_them(models_server):
    """TorchServe's vision handlers' idiom, `{"data": "<base64>"}` as application/json on
    /predictions, and KServe v2's JSON BYTES element holding a base64 PNG, through the real
    TorchServe: the same answers as the PNG itself; text that is no image keeps its 400."""
    ts = models_server
    png = support.png(FRAMES[0])
    text = base64.b64encode(png).decode()
    answer = requests.post(f"{ts.inference_url}/predictions/{DETECTOR}", json={"data": text},
                           headers=ts.auth(), timeout=120)
    assert answer.status_code == 200, answer.text
    assert _boxes(answer.json()["frames"][0]["detections"]) == EXPECTED[0]
    body = {"inputs": [{"name": "image", "shape": [1], "datatype": "BYTES", "data": [text]}]}
    oip_answer = requests.post(f"{ts.inference_url}/v2/models/{DETECTOR}/infer", json=body, headers=ts.auth(),
                               timeout=120)
    assert oip_answer.status_code == 200, oip_answer.text
    outputs = {o["name"]: o for o in oip_answer.json()["outputs"]}
    assert outputs["num_detections"]["data"] == [2]
    assert outputs["detection_boxes"]["data"] == [v for _, box, _ in EXPECTED[0] for v in box]
    refused = requests.post(f"{ts.inference_url}/v2/models/{DETECTOR}/infer", timeout=120, headers=ts.auth(),
                            json={"inputs": [{"name": "image", "shape": [1], "datatype": "BYTES", "data": ["hello"]}]})
    assert refused.status_code == 400 and "UnsupportedContentType" in refused.json()["error"]
