"""Task answers through every door: OIP tensors as Triton users know them, and the size limit."""

import json

import numpy as np
import tritonclient.http as httpclient

from handler.config import HandlerConfig
from handler.doors import native, oip
from handler.tasks.labels import Labels
from tests import planted, support
from tests.support import Answering

SCALE = {"normalize": {"scale": 1 / 255}}
LABELS = Labels({0: "red", 1: "green", 2: "blue"})


def _oip(clip, config, model):
    tensor = httpclient.InferInput("frames", list(clip.shape), "UINT8")
    tensor.set_data_from_numpy(clip, binary_data=True)
    body, json_size = httpclient.InferenceServerClient.generate_request_body([tensor])
    request = support.read({"body": bytearray(body)}, {"body": {"content-type": ""},
                                                       oip.HEADER_LENGTH: str(json_size)}, "m", config)
    pipeline = Answering(model, config, door=oip, labels=LABELS)
    pipeline.check()
    [response], _ = pipeline.run([request])
    assert response.status == 200, response.body
    return httpclient.InferResult.from_response_body(response.body.encode())


def test_oip_detections_are_efficient_nms_tensors_padded_to_the_most_detections():
    config = HandlerConfig.from_mapping({"task": "detection", **SCALE})
    clip = np.stack([planted.scene(64, 96, {0: (1, 2, 30, 40), 2: (50, 10, 90, 60)}), planted.scene(64, 96, {1: (0, 0, 8, 8)})])
    result = _oip(clip, config, planted.script(planted.Yolo()))
    assert result.as_numpy("num_detections").tolist() == [2, 1]
    assert result.as_numpy("num_detections").dtype == np.int32
    boxes = result.as_numpy("detection_boxes")
    assert boxes.dtype == np.float32 and boxes.shape == (2, 2, 4)
    assert boxes.tolist() == [[[1, 2, 30, 40], [50, 10, 90, 60]], [[0, 0, 8, 8], [0, 0, 0, 0]]]
    assert np.allclose(result.as_numpy("detection_scores"), [[0.9, 0.8], [0.85, 0]])
    assert result.as_numpy("detection_classes").tolist() == [[0, 2], [1, -1]]
    assert result.as_numpy("detection_labels").tolist() == [["red", "blue"], ["green", ""]]


def test_oip_classes_and_segments():
    clip = np.stack([planted.scene(32, 32, {0: (0, 0, 32, 16)})] * 2)
    classes = _oip(clip, HandlerConfig.from_mapping({"task": "classification", "top_k": 2, **SCALE}),
                   planted.script(planted.Classifier()))
    assert classes.as_numpy("classes").tolist() == [[0, 1]] * 2
    assert classes.as_numpy("scores").shape == (2, 2)
    assert classes.as_numpy("labels").tolist() == [["red", "green"]] * 2
    segments = _oip(clip, HandlerConfig.from_mapping({"task": "segmentation", **SCALE}), planted.script(planted.Segmenter()))
    [first, second] = [json.loads(s) for s in segments.as_numpy("segments")]
    assert first == second and [s["area"] for s in first] == [512, 512]


def test_an_answer_over_max_response_bytes_is_refused_naming_the_task():
    config = HandlerConfig.from_mapping({"max_response_bytes": 2000, **SCALE, "dense_outputs": ["output"]})
    frame = planted.scene(64, 64, {0: (0, 0, 10, 10)})
    [small, big], _ = Answering(planted.script(planted.Segmenter()), config).run(
        [support.request(support.npy(frame[:4, :4].copy()), "application/x-npy"),
         support.request(support.npy(frame), "application/x-npy")])
    assert small.status == 200 and len(small.body) < 2000
    body = json.loads(big.body)
    assert (big.status, body["type"]) == (500, "AnswerTooLarge")
    assert "over handler.max_response_bytes = 2000" in body["message"]
    assert "task: raw" in body["message"] and "set handler.task to detection" in body["message"]


def test_native_answers_carry_the_task_answer_beside_the_size_not_outputs():
    config = HandlerConfig.from_mapping({"task": "detection", **SCALE})
    pipeline = Answering(planted.script(planted.End2End()), config, door=native, labels=LABELS)
    [response], _ = pipeline.run([support.request(support.npy(planted.scene(40, 50, {1: (5, 5, 20, 20)})),
                                                  "application/x-npy", {"x-stream-id": "cam-1"})])
    body = json.loads(response.body)
    assert body["stream_id"] == "cam-1"
    assert body["frames"] == [{"width": 50, "height": 40, "detections": [
        {"box": [5, 5, 20, 20], "score": 0.85, "class_id": 1, "label": "green"}]}]
