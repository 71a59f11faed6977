"""The conventions clients already follow: an image as base64 text (TorchServe's vision
handlers' `{"data": ...}`, KServe v2's BYTES elements in JSON), and OIP output tensors fixed by
the model, there even for a frame without detections."""

import base64
import json

import numpy as np
import pytest
import tritonclient.http as httpclient

from handler.clip import Meta
from handler.config import HandlerConfig
from handler.doors import oip
from handler.errors import UnsupportedContentType
from handler.tasks.labels import Labels
from tests import planted, support
from tests.support import Answering

SCALE = {"normalize": {"scale": 1 / 255}}
LABELS = Labels({0: "red", 1: "green", 2: "blue"})
FRAME = support.frame(48, 64, 3)
SCENE = planted.scene(64, 96, {0: (8, 8, 40, 40)})


def _json_bytes_request(elements):
    """An OIP request in JSON alone, a BYTES input of `elements` (text), as KServe's examples send it."""
    body = {"inputs": [{"name": "image", "shape": [len(elements)], "datatype": "BYTES", "data": elements}]}
    return bytearray(json.dumps(body).encode()), {}


def test_an_oip_json_bytes_element_holding_base64_png_or_jpeg_is_decoded():
    png, jpeg = support.png(FRAME), support.jpeg(FRAME)
    body, headers = _json_bytes_request([base64.b64encode(png).decode(), base64.b64encode(jpeg).decode()])
    clip = oip.decode(oip.parse(body, headers, 1 << 30), Meta.parse(headers), HandlerConfig())
    frames = [np.asarray(f) for f in clip.frames]
    assert np.array_equal(frames[0], FRAME) and np.array_equal(frames[1], support.decoded(jpeg))


@pytest.mark.parametrize("text", ["not base64 at all!", base64.b64encode(b"plain text, no image").decode()])
def test_text_that_is_no_image_nor_base64_of_one_keeps_its_clear_400(text):
    body, headers = _json_bytes_request([text])
    with pytest.raises(UnsupportedContentType) as caught:
        oip.decode(oip.parse(body, headers, 1 << 30), Meta.parse(headers), HandlerConfig())
    assert f"from its first bytes {text.encode()[:8].hex(' ')}" in str(caught.value)


def test_a_predictions_json_body_with_base64_data_is_answered_as_the_image():
    """`{"data": "<base64>"}` with Content-Type application/json reaches the handler parsed (a
    dict; `url_path` marks `/predictions`): answered as the image it holds, on the native door."""
    config = HandlerConfig.from_mapping({"task": "detection", **SCALE})
    pipeline = Answering(planted.script(planted.Yolo()), config, labels=LABELS)
    pipeline.check()
    parsed = {"data": base64.b64encode(support.png(SCENE)).decode()}
    request = support.read({"body": parsed}, {"body": {"content-type": "application/json", "url_path": "p"}},
                           "m", config)
    plain = support.request(support.png(SCENE), "image/png")
    (json_answer, png_answer), _ = pipeline.run([request, plain])
    assert json_answer.status == 200, json_answer.body
    assert json.loads(json_answer.body)["frames"] == json.loads(png_answer.body)["frames"]
    assert json.loads(json_answer.body)["frames"][0]["detections"][0]["box"] == [8, 8, 40, 40]


def _oip_answer(model, settings, clip):
    tensor = httpclient.InferInput("frames", list(clip.shape), "UINT8")
    tensor.set_data_from_numpy(clip, binary_data=True)
    body, json_size = httpclient.InferenceServerClient.generate_request_body([tensor])
    config = HandlerConfig.from_mapping({"task": "detection", **SCALE, **settings})
    request = support.read({"body": bytearray(body)}, {"body": {"content-type": ""},
                                                       oip.HEADER_LENGTH: str(json_size)}, "m", config)
    pipeline = Answering(planted.script(model), config, door=oip, labels=LABELS)
    pipeline.check()
    [response], _ = pipeline.run([request])
    assert response.status == 200, response.body
    return httpclient.InferResult.from_response_body(response.body.encode())


def test_a_pose_models_keypoints_tensor_is_there_for_frames_with_nobody_in_them():
    empty = planted.scene(64, 96, {})
    result = _oip_answer(planted.Yolo(pose=True), {"num_classes": 3}, np.stack([empty, empty]))
    assert result.as_numpy("num_detections").tolist() == [0, 0]
    assert result.as_numpy("detection_keypoints").shape == (2, 0, 2, 3)
    assert result.get_output("detection_masks") is None  # not a masked model
    one = _oip_answer(planted.Yolo(pose=True), {"num_classes": 3}, np.stack([SCENE, empty]))
    assert one.as_numpy("detection_keypoints").shape == (2, 1, 2, 3)
    assert np.allclose(one.as_numpy("detection_keypoints")[0, 0], [[8, 8, 0.9], [40, 40, 0.8]])


def test_a_masked_models_masks_tensor_is_there_for_frames_without_detections():
    empty = planted.scene(64, 96, {})
    result = _oip_answer(planted.YoloSeg(), {}, np.stack([empty]))
    assert result.as_numpy("num_detections").tolist() == [0]
    assert result.as_numpy("detection_masks").shape == (1, 0)
    assert result.get_output("detection_keypoints") is None
