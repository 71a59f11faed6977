"""The vision-task bench (bench/models.py): its table, verdict and planted objects, and a quick run
of the YOLO-format part (no torchvision, no TorchServe), so that it cannot rot unnoticed."""

import json
from collections import Counter

import pytest

from bench import models


def _row(variant, forward, post, checked=True, **kwargs):
    return models.Row("yolo", variant, checked, forward_ms=[forward], gather_ms=[post], per_frame_ms=[0.0],
                      json_ms=[0.0], **kwargs)


def test_share_and_verdict_count_only_the_checked_rows():
    assert models.share(5.0, 100.0) == 5.0
    assert models.share(None, 100.0) is None and models.share(1.0, 0.0) is None
    assert models.verdict([_row("a", 100, 4.9), _row("raw", 100, 900, checked=False)]) is True
    assert models.verdict([_row("a", 100, 4.9), _row("b", 100, 5.0)]) is False
    assert models.verdict([models.Row("m", "v", True), _row("raw", 100, 900, checked=False)]) is None


def test_post_is_the_median_of_each_repeats_sum():
    row = models.Row("m", "v", True, forward_ms=[100.0, 200.0, 300.0], gather_ms=[1.0, 9.0, 2.0],
                     per_frame_ms=[1.0, 0.0, 1.0], json_ms=[1.0, 0.0, 1.0])
    assert row.post == 4.0  # the repeats sum to 3, 9 and 4
    assert row.percent == pytest.approx(2.0)


def test_the_table_says_pass_or_fail_and_why_a_row_is_empty():
    rows = [_row("detection k=10", 250.0, 10.0, detections=10.0, answer_bytes=978, rounds=[3.0, 3.5],
                 latency_ms=[2000.0], statuses=Counter({200: 40, 503: 2})),
            _row("raw (k=10)", 250.0, 900.0, checked=False, answer_bytes=14_600_000),
            models.Row("ssdlite", "raw", note="cannot answer: TypeError")]
    text = models.table(rows)
    assert "PASS (worst 4.00%)" in text
    assert "978 B" in text and "14.6 MB" in text and "3.25" in text
    assert "(e2e answers 200:40 503:2)" in text and "(cannot answer: TypeError)" in text
    assert "FAIL (worst 6.00%)" in models.table([_row("detection k=100", 250.0, 15.0)])
    assert "not measured" in models.table(rows[1:])
    assert json.loads(json.dumps(models.report(rows, {"batch": 8})))["pass"] is True


def test_threshold_for_leaves_the_asked_boxes_a_frame_on_average():
    scores = [[0.9, 0.8, 0.1], [0.7, 0.2, 0.1]]
    threshold = models.threshold_for(scores, 1)
    assert sum(s > threshold for frame in scores for s in frame) == 2
    with pytest.raises(ValueError, match="cannot leave 3 a frame"):
        models.threshold_for(scores, 3)


@pytest.mark.parametrize("k", [1, 10, 100])
def test_the_planted_objects_lie_apart_inside_the_frame(k):
    boxes = models.objects(k)
    assert len(boxes) == k
    assert all(0 <= x1 < x2 <= models.WIDTH and 0 <= y1 < y2 <= models.HEIGHT for x1, y1, x2, y2 in boxes)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
    plant, mask = models._plants(k, models.INPUT)
    assert int(mask.sum()) == k * models.CANDIDATES
    assert int((plant[0, 4:] > 0.25).sum()) == k * models.CANDIDATES


def test_the_quick_run_answers_exactly_the_planted_detections(tmp_path, capsys):
    out = tmp_path / "models.json"
    assert models.main(["--quick", "--no-e2e", "--models", "yolo", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "detection post-processing + encoding under 5% of the forward:" in text
    data = json.loads(out.read_text())
    rows = {r["variant"]: r for r in data["rows"]}
    assert set(rows) == {"detection k=10", "detection k=100", "raw (k=10)", models.ONNX_ROW}
    # Each planted object has 3 shifted duplicates that NMS must drop, in every frame of the batch.
    assert rows["detection k=10"]["detections"] == 10 and rows["detection k=100"]["detections"] == 100
    assert rows[models.ONNX_ROW]["detections"] == 10  # the same detector through ONNX Runtime
    assert all(rows[v]["percent"] > 0 for v in ("detection k=10", "detection k=100"))
    assert rows["raw (k=10)"]["answer_bytes"] > 10 * rows["detection k=100"]["answer_bytes"]
    assert data["pass"] in (True, False)
