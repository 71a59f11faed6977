"""Real torchvision architectures through the handler: each frame's answer is what torchvision's
model gives for that frame alone, whatever the batch mixed with it; then the same models packed by
archive.sh and served by a real TorchServe."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from handler.config import HandlerConfig
from handler.tasks import rle
from handler.tasks.labels import Labels
from tests import support
from tests.e2e.server import TorchServe, build_archives
from tests.support import Answering
from tests.vision import zoo

SCALE = {"normalize": {"scale": 1 / 255}}
IMAGENET = {"normalize": {"scale": 1 / 255, "mean": [0.45] * 3, "std": [0.225] * 3}}
THRESHOLD = 0.2
#: Mixed resolutions in one batch; two share a size (torchvision is then called with both).
SIZES = [(240, 320), (300, 451), (240, 320), (181, 97), (512, 384)]


def _reference_detections(model, frame):
    """torchvision's own answer for the frame alone, as the handler answers it."""
    with torch.inference_mode():
        raw = model([zoo.tensor(frame)])
    found = (raw[1] if isinstance(raw, tuple) else raw)[0]
    keep = found["scores"] > THRESHOLD
    return [([round(v, 2) for v in box], round(score, 5), label) for box, score, label in zip(
        found["boxes"][keep].tolist(), found["scores"][keep].tolist(), found["labels"][keep].tolist())]


def _answers(model, settings, frames, labels=None, model_max_batch=4):
    pipeline = Answering(model, HandlerConfig.from_mapping({"model_max_batch": model_max_batch, **settings}),
                         labels=labels)
    found = pipeline.check()
    responses, _ = pipeline.run([support.request(support.npy(f), "application/x-npy") for f in frames])
    assert [r.status for r in responses] == [200] * len(frames)
    return found, [json.loads(r.body)["frames"][0] for r in responses]


def _close(got, want, score_tol=1e-4, box_tol=0.05):
    """The same detections within float tolerance: a crop of the padded chunk is not laid out in
    memory as the frame alone is, so kernels differ in the last bits, and near-ties may swap
    places; only a detection within `score_tol` of the threshold may be on one side alone."""
    left = list(want)
    for box, score, label in got:
        match = next((w for w in left if w[2] == label and abs(w[1] - score) <= score_tol
                      and max(abs(a - b) for a, b in zip(w[0], box)) <= box_tol), None)
        assert match is not None or score - THRESHOLD <= score_tol, (box, score, label)
        if match is not None:
            left.remove(match)
    assert all(score - THRESHOLD <= score_tol for _, score, _ in left), left[:3]


@pytest.mark.parametrize("name, build", [("ssdlite scripted", lambda: zoo.script(zoo.ssdlite())),
                                         ("faster_rcnn scripted", lambda: zoo.script(zoo.faster_rcnn())),
                                         ("faster_rcnn eager", zoo.faster_rcnn)])
def test_torchvision_detectors_answer_each_frame_as_alone(name, build):
    model = build()
    frames = [zoo.frame(h, w, seed) for seed, (h, w) in enumerate(SIZES)]
    found, answers = _answers(model, {"task": "detection", "score_threshold": THRESHOLD, **SCALE}, frames)
    assert found == "detection (format torchvision)"
    total = 0
    for frame, answer in zip(frames, answers):
        got = [(d["box"], d["score"], d["class_id"]) for d in answer["detections"]]
        _close(got, _reference_detections(model, frame))
        total += len(got)
    assert total >= 3, "the seeded models answer a few boxes, or the comparison says nothing"


def test_a_classifier_answers_each_frame_as_alone_with_labels():
    model = zoo.script(zoo.resnet18())
    frames = [zoo.frame(224, 224, 0), zoo.frame(480, 640, 1), zoo.frame(224, 224, 2)]
    labels = Labels({i: f"class-{i}" for i in range(8)})  # 8 and 9 have no name
    _, answers = _answers(model, {"task": "classification", "top_k": 10, "resize": "letterbox",
                                  "input_size": [224, 224], **IMAGENET}, frames, labels)
    for i in (0, 2):  # 224x224: no resize, no padding
        x = (zoo.tensor(frames[i])[None] - 0.45) / 0.225
        with torch.inference_mode():
            scores = model(x)[0].softmax(0)
        order = scores.argsort(descending=True).tolist()
        got = answers[i]["classes"]
        assert [c["class_id"] for c in got] == order
        assert [c["score"] for c in got] == pytest.approx(scores[order].tolist(), abs=1e-5)
        assert {c["label"] for c in got if c["class_id"] >= 8} == {"8", "9"}


def test_a_segmenter_answers_each_frames_class_map_as_alone():
    model = zoo.script(zoo.lraspp())
    frames = [zoo.frame(120, 160, 0), zoo.frame(97, 181, 1), zoo.frame(120, 160, 2)]
    _, answers = _answers(model, {"task": "segmentation", "size_divisor": 1, **IMAGENET}, frames)
    for frame, answer in zip(frames, answers):
        with torch.inference_mode():
            want = model((zoo.tensor(frame)[None] - 0.45) / 0.225)["out"][0].argmax(0).numpy()
        got = np.full(frame.shape[:2], -1)
        for segment in answer["segments"]:
            mask = rle.decode(segment["mask"])
            assert segment["area"] == int(mask.sum())
            got[mask] = segment["class_id"]
        assert (got == want).all()


def _archive(tmp, name, model, handler, model_file=None, labels=None):
    if model_file is None:
        model.save(str(tmp / f"{name}.pt"))
        weights = tmp / f"{name}.pt"
    else:
        (tmp / f"{name}_module.py").write_text(model_file)
        weights = tmp / f"{name}.pth"
        torch.save({f"model.{k}": v for k, v in model.state_dict().items()}, weights)
    config = {"minWorkers": 1, "maxWorkers": 1, "batchSize": 8, "maxBatchDelay": 50, "responseTimeout": 120,
              "handler": handler}
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(config))
    if labels is not None:
        (tmp / f"{name}.txt").write_text("\n".join(labels) + "\n")
    extra = ["--model-file", str(tmp / f"{name}_module.py")] if model_file else []
    build_archives(tmp / "store", name, str(weights), str(tmp / f"{name}.yaml"), *extra)


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vision")
    detect = {"task": "detection", "score_threshold": THRESHOLD, **SCALE}
    _archive(tmp, "ssdlite", zoo.script(zoo.ssdlite()), {**detect, "labels": "ssdlite.txt"},
             labels=["background", "person", "bicycle", "car", "dog"])
    _archive(tmp, "faster_rcnn_eager", zoo.faster_rcnn(), detect, model_file=zoo.EAGER_DETECTOR)
    _archive(tmp, "lraspp", zoo.script(zoo.lraspp()), {"task": "segmentation", "size_divisor": 1, **IMAGENET})
    names = ["ssdlite", "faster_rcnn_eager", "lraspp"]
    models = {m: {"1.0": {"defaultVersion": True, "marName": f"{m}.mar", "minWorkers": 1, "maxWorkers": 1,
                          "batchSize": 8, "maxBatchDelay": 50, "responseTimeout": 120}} for m in names}
    overlay = f"load_models={','.join(f'{m}.mar' for m in names)}\nmodels={json.dumps(models)}\n"
    ts = TorchServe(tmp_path_factory.mktemp("vision_ts"), tmp / "store", overlays=[overlay]).start(timeout_s=300)
    yield ts
    ts.stop()


def test_torchserve_serves_torchvision_models_answering_each_frame_as_alone(vision_server):
    ts = vision_server
    frames = [zoo.frame(h, w, seed) for seed, (h, w) in enumerate(SIZES)]
    labels = ["background", "person", "bicycle", "car", "dog"]
    for name, model in (("ssdlite", zoo.ssdlite()), ("faster_rcnn_eager", zoo.faster_rcnn())):
        answers = ts.burst(name, [(support.png(f), "image/png", {}) for f in frames])
        for frame, answer in zip(frames, answers):
            assert answer.status_code == 200, answer.text
            detections = answer.json()["frames"][0]["detections"]
            _close([(d["box"], d["score"], d["class_id"]) for d in detections], _reference_detections(model, frame))
            if name == "ssdlite":
                assert [d["label"] for d in detections] == [labels[d["class_id"]] for d in detections]
    frame = zoo.frame(97, 181, 1)
    answer = ts.predict("lraspp", support.png(frame), "image/png").json()["frames"][0]
    with torch.inference_mode():
        want = zoo.lraspp()((zoo.tensor(frame)[None] - 0.45) / 0.225)["out"][0].argmax(0).numpy()
    assert sum(s["area"] for s in answer["segments"]) == frame.shape[0] * frame.shape[1]
    for segment in answer["segments"]:
        assert (rle.decode(segment["mask"]) == (want == segment["class_id"])).all()
