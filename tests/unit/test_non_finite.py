"""Bad values never reach an answer: NaN and infinity in a detector's boxes, scores or keypoints
are dropped before NMS (which they used to turn off for the whole chunk) and counted; a
classifier's non-finite score is left out; no door answers text a strict JSON parser refuses;
settings that cannot match the model fail at load naming the setting."""

import json
import logging

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from torch import Tensor, nn

from handler.config import TORCHVISION_LETTERBOX, HandlerConfig
from handler.doors import native, oip
from handler.errors import ConfigError
from handler.metrics import samples
from handler.tasks.labels import Labels
from tests import planted, support
from tests.support import Answering

SCALE = {"normalize": {"scale": 1 / 255}}
LABELS = Labels({0: "red", 1: "green", 2: "blue"})
NAN = float("nan")


class NanYolo(nn.Module):
    """planted.Yolo, and: anchor 60 of frame 0 a box with a NaN corner scoring 0.95; anchor 61 of
    every frame a NaN class score; with `pose`, red's keypoints NaN (anchors 0, 3, 6: red's)."""

    def __init__(self, pose: bool = False) -> None:
        super().__init__()
        self.yolo = planted.Yolo(pose=pose)
        self.pose = pose

    def forward(self, x: Tensor) -> Tensor:
        out = self.yolo(x)
        out[0, 0:4, 60] = torch.tensor([5.0, 5.0, float("nan"), 10.0], device=x.device)
        out[0, 4, 60] = 0.95
        out[:, 5, 61] = float("nan")
        if self.pose:
            out[:, 7:13, 0:9:3] = float("nan")  # red's box, its shifted duplicate, its low one
        return out


class NanClassifier(nn.Module):
    """planted.Classifier with class 1's logit NaN and, for `inf`, class 2's +infinity."""

    def __init__(self, inf: bool = False) -> None:
        super().__init__()
        self.inf = inf

    def forward(self, x: Tensor) -> Tensor:
        logits = 10.0 * x.mean(dim=(2, 3))
        logits[:, 1] = float("nan")
        if self.inf:
            logits[:, 2] = float("inf")
        return logits


def strict(text: str):
    """`text` as JSON, refusing NaN and infinity as a strict parser does."""
    def refuse(constant: str):
        raise AssertionError(f"the answer holds {constant}: {text[:300]}")
    return json.loads(text, parse_constant=refuse)


def run(model, settings, frames, door=native):
    config = HandlerConfig.from_mapping({**SCALE, **settings})
    pipeline = Answering(planted.script(model), config, door=door, labels=LABELS)
    pipeline.check()
    requests = [support.request(support.npy(f), "application/x-npy") for f in frames]
    responses, stats = pipeline.run(requests)
    assert [r.status for r in responses] == [200] * len(frames), [r.body for r in responses]
    return [strict(r.body) for r in responses], stats


FRAMES = [planted.scene(120, 200, {0: (10, 20, 50, 60), 2: (100, 10, 190, 90)}),  # one size: one chunk
          planted.scene(120, 200, {1: (40, 30, 120, 90)}),
          planted.scene(120, 200, {0: (0, 0, 32, 32)})]


def test_a_nan_box_in_one_frame_leaves_nms_on_for_every_frame_and_is_counted(caplog):
    """(Before: its group offsets became NaN and every duplicate box of every frame survived.)"""
    with caplog.at_level(logging.WARNING):
        bodies, stats = run(NanYolo(), {"task": "detection"}, FRAMES)
    got = [[(d["label"], d["box"]) for d in body["frames"][0]["detections"]] for body in bodies]
    assert got == [[("red", [10, 20, 50, 60]), ("blue", [100, 10, 190, 90])], [("green", [40, 30, 120, 90])],
                   [("red", [0, 0, 32, 32])]]  # each box once: its shifted duplicate suppressed
    assert stats.non_finite == 1 + len(FRAMES)  # frame 0's NaN box, every frame's NaN score
    assert ("video_non_finite_dropped_total", len(FRAMES) + 1) in [(s.name, s.value) for s in samples(stats, 8)]
    assert f"a chunk of 3 frames: {1 + len(FRAMES)} detections dropped, their box, score or keypoints NaN" in caplog.text


def test_a_detection_whose_keypoints_are_nan_is_dropped_and_no_answer_holds_nan():
    bodies, stats = run(NanYolo(pose=True), {"task": "detection", "num_classes": 3}, FRAMES[:2])
    detections = [body["frames"][0]["detections"] for body in bodies]
    assert [[d["label"] for d in frame] for frame in detections] == [["blue"], ["green"]]  # red's NaN keypoints
    assert all(len(d["keypoints"]) == 2 for frame in detections for d in frame)
    assert stats.non_finite == 2 + 1 + 2  # red's 2 rows over the threshold, frame 0's NaN box, a NaN score a frame


@pytest.mark.parametrize("activation", ["softmax", "sigmoid", "none"])
def test_a_classifiers_non_finite_scores_are_left_out_on_every_door(activation):
    frame = planted.scene(64, 96, {0: (0, 0, 30, 40)})
    settings = {"task": "classification", "top_k": 3, "activation": activation}
    [body], stats = run(NanClassifier(inf=True), settings, [frame])
    ranked = body["frames"][0]["classes"]
    if activation == "softmax":  # a NaN logit makes every softmax score NaN
        assert ranked == [] and stats.non_finite == 3
    else:  # sigmoid(inf) is 1, a finite score; the raw infinity is not
        assert [c["label"] for c in ranked] == (["blue", "red"] if activation == "sigmoid" else ["red"])
        assert stats.non_finite == (1 if activation == "sigmoid" else 2)
    tensor = httpclient.InferInput("frames", [1, *frame.shape], "UINT8")
    tensor.set_data_from_numpy(frame[None], binary_data=True)
    body_bytes, json_size = httpclient.InferenceServerClient.generate_request_body([tensor])
    config = HandlerConfig.from_mapping({**SCALE, **settings})
    pipeline = Answering(planted.script(NanClassifier(inf=True)), config, door=oip, labels=LABELS)
    pipeline.check()
    request = support.read({"body": bytearray(body_bytes)}, {"body": {"content-type": ""},
                                                              oip.HEADER_LENGTH: str(json_size)}, "m", config)
    [response], _ = pipeline.run([request])
    assert response.status == 200, response.body
    answer = strict(response.body)
    scores = next(o for o in answer["outputs"] if o["name"] == "scores")["data"]
    assert all(np.isfinite(scores))


def test_a_class_id_past_the_models_classes_or_below_zero_fails_at_load_naming_the_setting():
    for settings, model in (({"task": "detection", "classes": [0, 3]}, planted.Yolo()),
                            ({"task": "detection", "class_thresholds": {5: 0.5}}, planted.Yolo()),
                            ({"task": "classification", "classes": [2, 7]}, planted.Classifier())):
        pipeline = Answering(planted.script(model), HandlerConfig.from_mapping({**SCALE, **settings}), labels=LABELS)
        setting = next(k for k in settings if k != "task")
        with pytest.raises(ConfigError, match=rf"handler\.{setting}: class id \d is not one of the model's 3 classes "
                                              r"\(0 to 2\): it would never match"):
            pipeline.check()
    with pytest.raises(ConfigError, match=r"handler\.classes: -1 is no class id: ids count from 0"):
        HandlerConfig.from_mapping({"task": "detection", "classes": [-1]})


def test_torchvision_with_letterbox_fails_at_load_when_format_auto_finds_it():
    letterbox = {"task": "detection", "resize": "letterbox", "input_size": [128, 128]}
    pipeline = Answering(planted.script(planted.TorchvisionStyle()), HandlerConfig.from_mapping({**SCALE, **letterbox}),
                         labels=LABELS)
    with pytest.raises(ConfigError) as caught:
        pipeline.check()
    assert str(caught.value) == TORCHVISION_LETTERBOX
    with pytest.raises(ConfigError, match="resizes each frame itself; use resize: pad"):
        HandlerConfig.from_mapping({**letterbox, "format": "torchvision"})
