"""Motion first through the handler's own `initialize` and `handle` (DESIGN section 15): what a
frame's answer says was looked at, a small far object found in its region, an object in two
regions or on a region's edge found once, and `X-Motion` refused with the fix."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ts.context import Context, RequestProcessor
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl

from handler.service import VideoFrameHandler
from tests import planted, scenes, support

DETECTOR = {"task": "detection", "resize": "letterbox", "input_size": [320, 320], "score_threshold": 0.1,
            "normalize": {"scale": 1 / 255}}


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    """`serve(body, content_type, config, headers)` -> (status, answer) of one request."""
    tmp = tmp_path_factory.mktemp("motion")
    planted.script(planted.Yolo()).save(str(tmp / "m.pt"))
    planted.script(planted.Yolo(floor=10)).save(str(tmp / "floored.pt"))
    handlers = {}

    def run(body, content_type, config=None, headers=None, model="m.pt"):
        key = json.dumps([model, config or DETECTOR], sort_keys=True)
        metrics = MetricsCacheYamlImpl(str(support.ROOT / "handler" / "metrics.yaml"))
        metrics.initialize_cache()
        manifest = {"model": {"modelName": "m", "serializedFile": model, "handler": "service.py"}}
        context = Context("m", str(tmp), manifest, 8, None, "0.12.0", metrics=metrics,
                          model_yaml_config={"handler": config or DETECTOR})
        if key not in handlers:
            handlers[key] = VideoFrameHandler()
            handlers[key].initialize(context)
        context.request_processor = [RequestProcessor({"content-type": content_type, **(headers or {})})]
        context.request_ids = {0: "r"}
        context.metrics.set_request_ids(context.request_ids)
        [answer] = handlers[key].handle([{"body": bytearray(body)}], context)
        return context.get_response_status(0)[0], json.loads(answer)

    return run


def red_boxes(frame):
    return [d["box"] for d in frame.get("detections", []) if d["class_id"] == 0]


def test_a_still_segment_is_looked_at_once_and_its_other_frames_say_so(serve, tmp_path):
    """The scene's first 30 frames hold still: with a whole look due, frame 0 is looked at whole
    and the rest not at all (no `detections`: not a frame without objects); without one, none."""
    video = scenes.make(tmp_path / "still.ts", [(320, 192, 15)]).read_bytes()
    status, due = serve(video, "video/mp2t", headers={"x-motion": json.dumps({"full": True})})
    assert status == 200
    # a whole look is two frames: the tracker confirms a still object on its second sighting
    assert [f["looked"] for f in due["frames"]] == [True, True] + [False] * 13
    assert all(f["regions"] == [[0, 0, 320, 192]] and len(f["detections"]) == 2 for f in due["frames"][:2])
    assert all("detections" not in f and f["regions"] == [] and f["motion"] == [] for f in due["frames"][2:])
    _, not_due = serve(video, "video/mp2t", headers={"x-motion": json.dumps({"full": False})})
    assert [f["looked"] for f in not_due["frames"]] == [False] * 15
    _, off = serve(video, "video/mp2t")
    assert all("looked" not in f and len(f["detections"]) == 2 for f in off["frames"])


def test_moving_frames_are_looked_at_in_regions_with_the_whole_frames_boxes(serve, tmp_path):
    """640x384 frames, a 320 input: red and blue move from frame 30; each frame they move in is
    looked at on two 320 squares (seen at full size), and their boxes equal the whole frame's."""
    video = scenes.make(tmp_path / "moving.ts", [(640, 384, 60)]).read_bytes()
    _, off = serve(video, "video/mp2t")
    # blue on grey 40 differs from it by 11 luma levels: this noise-free scene takes a threshold of 8
    motion = {"full": False, "threshold": 8, "max_regions": 2}
    _, on = serve(video, "video/mp2t", headers={"x-motion": json.dumps(motion)})
    whole = [sorted(d["box"] for d in f["detections"]) for f in off["frames"]]
    moving = [n for n in range(1, 60) if whole[n] != whole[n - 1]]
    assert moving[0] == 31  # scenes.LEAD: both start at frame 31
    assert [f["looked"] for f in on["frames"][:32]] == [False] * 31 + [True]
    assert all(on["frames"][n]["looked"] for n in moving)
    looked = [(n, f) for n, f in enumerate(on["frames"]) if f["looked"]]
    for _, frame in looked:
        assert all(x2 - x1 == 320 and y2 - y1 == 320 for x1, y1, x2, y2 in frame["regions"])
        assert all(any(r[0] <= m[0] and r[1] <= m[1] and m[2] <= r[2] and m[3] <= r[3] for r in frame["regions"])
                   for m in frame["motion"])
    # The whole frame is seen at half size (boxes on a 2-pixel grid), a region at full size: at an
    # edge whose last column the encoder's 4:2:0 chroma blurred they differ by that pixel.
    for n, frame in looked:
        found = sorted(d["box"] for d in frame["detections"])
        assert len(found) == len(whole[n]) and all(abs(a - b) <= 1 for f, w in zip(found, whole[n])
                                                  for a, b in zip(f, w)), (n, found, whole[n])


def test_a_small_far_object_missed_whole_is_found_in_its_region(serve, tmp_path):
    """A 90-pixel red square crossing a 4K frame, 64 pixels a frame: letterboxed whole into 320 it
    is 7.5 pixels (8 or 9 with its edges), under the detector's floor of 10; seen in a 320 square around its motion it is
    found, its box exact. (On the 120-row grey copy it is 5 pixels a side: a smaller one needs a
    larger `frame_height` or a smaller `contour_area`.)"""
    def draw(width, height, n):
        frame = np.full((height, width, 3), 40, dtype=np.uint8)
        frame[1000:1090, 2000 + 64 * n:2090 + 64 * n] = (255, 0, 0)
        return frame

    video = scenes.make(tmp_path / "far.ts", [(3840, 2160, 15)], draw).read_bytes()
    config = {**DETECTOR, "max_clip_pixels": 15 * 3840 * 2160}
    _, off = serve(video, "video/mp2t", config, model="floored.pt")
    assert all(red_boxes(f) == [] for f in off["frames"])
    _, on = serve(video, "video/mp2t", config, headers={"x-motion": json.dumps({"full": False})}, model="floored.pt")
    assert on["frames"][0]["looked"]  # frame 0: looked where frame 1 moved
    found = [red_boxes(f) for f in on["frames"]]
    assert found == [[[2000 + 64 * n, 1000, 2090 + 64 * n, 1090]] for n in range(15)]


def test_an_object_in_two_regions_or_on_a_regions_edge_is_found_once(serve):
    """An image with its producer's motion boxes (frames mode): two squares of 320 overlap from
    x = 240 to 320; red lies in both, green straddles the first one's right edge (cut there,
    whole in the second). Each is answered once, with its whole box."""
    frame = planted.scene(720, 1280, {0: (250, 100, 300, 150), 1: (300, 200, 350, 240)})
    motion = {"full": False, "boxes": [[100, 100, 140, 140], [380, 100, 420, 140]], "max_regions": 2}
    status, body = serve(support.npy(frame), "application/x-npy", headers={"x-motion": json.dumps(motion)})
    assert status == 200
    [answer] = body["frames"]
    assert answer["regions"] == [[0, 0, 320, 320], [240, 0, 560, 320]]
    assert sorted((d["class_id"], d["box"]) for d in answer["detections"]) == [
        (0, [250, 100, 300, 150]), (1, [300, 200, 350, 240])]


def test_a_moving_object_cut_by_its_region_is_looked_at_again_around_it(serve):
    """Motion at a small part of a wide mover: its square cuts the mover, which is looked at again
    in a square centred on it and answered whole (never the cut part)."""
    frame = planted.scene(720, 1280, {0: (200, 300, 400, 360)})
    motion = {"full": False, "boxes": [[380, 300, 400, 360]]}
    _, body = serve(support.npy(frame), "application/x-npy", headers={"x-motion": json.dumps(motion)})
    [answer] = body["frames"]
    # the first square cuts red at x = 230; the second is centred on what it saw of it
    assert answer["regions"] == [[230, 170, 550, 490], [155, 170, 475, 490]]
    assert red_boxes(answer) == [[200, 300, 400, 360]]


@pytest.mark.parametrize(("header", "message"), [
    ("{", "X-Motion is not JSON"),
    ('{"full": 1}', "`full` must be true or false"),
    ('{"threshold": 300}', "X-Motion.threshold is 300: use a whole number from 1 to 255"),
    ('{"boxes": [[5, 5, 1, 1]]}', "X-Motion: `boxes` must be a list of [x1, y1, x2, y2]"),
])
def test_a_bad_x_motion_is_a_400_naming_the_fix(serve, header, message):
    status, body = serve(support.npy(planted.scene(64, 64, {})), "application/x-npy", headers={"x-motion": header})
    assert status == 400 and body["type"] == "BadHeader" and message in body["message"]

