"""The motion check (handler/motion.py) on seeded frames, and region geometry (handler/regions.py)
by property: exact boxes, lighting, masks, settings refused with the fix."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from handler.motion import Found, Motion, MotionSettings
from handler.regions import cut, inside, merged, moved, regions_for, square, whole

RNG = np.random.default_rng(7)
H, W = 360, 640  # frame_height 120: a small copy of every 3rd row and column


def noisy(level: int = 60, sigma: float = 2.0) -> np.ndarray:
    frame = np.full((H, W), level, dtype=np.int16) + RNG.normal(0, sigma, (H, W)).astype(np.int16)
    return np.clip(frame, 0, 255).astype(np.uint8)


def with_square(frame: np.ndarray, x1: int, y1: int, x2: int, y2: int, value: int = 200) -> np.ndarray:
    out = frame.copy()
    out[y1:y2, x1:x2] = value
    return out


def test_the_first_frame_seeds_the_background_and_a_still_noisy_scene_has_no_motion():
    motion = Motion(MotionSettings())
    assert motion.find(noisy()).boxes == ()
    assert all(motion.find(noisy()).boxes == () for _ in range(10))


def test_a_mover_gives_its_exact_box_on_the_sampling_grid():
    motion = Motion(MotionSettings())
    motion.find(noisy())
    found = motion.find(with_square(noisy(), 300, 150, 360, 210))
    # 3-pixel cells of the small copy: the box is the square's, rounded out to the grid.
    assert found.boxes == ((300, 150, 360, 210),)
    assert not found.lighting


def test_two_movers_far_apart_are_two_boxes_largest_first_and_a_speck_is_none():
    motion = Motion(MotionSettings(contour_area=10))
    motion.find(noisy())
    frame = with_square(with_square(noisy(), 30, 30, 60, 60), 450, 240, 540, 330)
    frame[10, 600] = 255  # one pixel: under contour_area
    assert motion.find(frame).boxes == ((450, 240, 540, 330), (30, 30, 60, 60))


def test_the_parts_of_one_mover_join_into_one_box():
    motion = Motion(MotionSettings())
    motion.find(noisy())
    frame = with_square(with_square(noisy(), 300, 150, 330, 210), 336, 150, 366, 210)  # a 6-pixel gap
    assert motion.find(frame).boxes == ((300, 150, 366, 210),)


def test_a_change_over_most_of_the_frame_is_lighting_and_the_background_follows_it():
    motion = Motion(MotionSettings())
    motion.find(noisy(60))
    lit = motion.find(noisy(120))
    assert lit.lighting and lit.boxes == ()
    assert motion.find(noisy(120)).boxes == ()  # recalibrated: no storm after it


def test_motion_inside_a_mask_is_not_motion():
    settings = MotionSettings(mask=(((0.0, 0.0), (0.25, 0.0), (0.25, 0.25), (0.0, 0.25)),))
    motion = Motion(settings)
    motion.find(noisy())
    assert motion.find(with_square(noisy(), 20, 20, 120, 60)).boxes == ()  # a clock, masked
    # Off the 3-pixel grid: a small pixel is the mean of rows and columns 3k and 3k + 1, so a cell
    # counts when either sample is in the square (column 399 samples 399 and 400).
    assert motion.find(with_square(noisy(), 400, 200, 460, 260)).boxes == ((399, 201, 462, 261),)


def test_a_slow_mover_adds_up_against_the_background():
    """Two pixels a frame is under any frame-to-frame difference of its edge's width, not
    against a background that still holds where it started."""
    motion = Motion(MotionSettings(contour_area=30))
    base = noisy()
    motion.find(with_square(base, 100, 100, 160, 160))
    boxes = [motion.find(with_square(noisy(), 100 + 2 * k, 100, 160 + 2 * k, 160)).boxes for k in range(1, 8)]
    assert boxes[0] == () and boxes[-1] != ()


@pytest.mark.parametrize(("raw", "message"), [
    ({"threshold": 0}, "threshold is 0: use a whole number from 1 to 255"),
    ({"lightning_threshold": 2}, "lightning_threshold is 2: use a number from 0.01 to 1"),
    ({"treshold": 30}, "unknown setting 'treshold'"),
    ({"mask": [[[0, 0], [1, 0]]]}, "mask: use a list of polygons, each a list of 3 or more [x, y] points"),
    ({"mask": [[[0, 0], [2, 0], [1, 1]]]}, "fractions of the frame (0 to 1); [2, 0] is not"),
])
def test_settings_out_of_range_are_refused_with_the_fix(raw, message):
    with pytest.raises(ValueError, match=None) as err:
        MotionSettings.parse(raw, "motion")
    assert message in str(err.value)


sizes = st.tuples(st.integers(64, 2160), st.integers(64, 3840))


@st.composite
def scenes(draw):
    h, w = draw(sizes)
    boxes = []
    for _ in range(draw(st.integers(1, 5))):
        x1, y1 = draw(st.integers(0, w - 2)), draw(st.integers(0, h - 2))
        boxes.append((x1, y1, draw(st.integers(x1 + 1, w)), draw(st.integers(y1 + 1, h))))
    return (h, w), boxes, draw(st.sampled_from([None, 160, 320, 640])), draw(st.integers(1, 4))


@given(scenes())
def test_every_motion_box_lies_in_a_region_and_every_region_in_the_frame(scene):
    size, boxes, side, most = scene
    regions = regions_for(boxes, size, side, most)
    assert regions
    assert all(0 <= x1 < x2 <= size[1] and 0 <= y1 < y2 <= size[0] for x1, y1, x2, y2 in regions)
    assert all(any(inside(box, region) for region in regions) for box in boxes)
    if regions != (whole(size),):
        assert side is not None and len(regions) <= most
        # squares of the model's side at least, unless the frame is narrower
        assert all(x2 - x1 >= min(side, size[1]) and y2 - y1 >= min(side, size[0]) for x1, y1, x2, y2 in regions)


@given(sizes, st.integers(0, 3000), st.integers(0, 3000), st.integers(16, 640))
def test_a_square_holds_its_box_and_stays_in_the_frame(size, x, y, side):
    h, w = size
    box = (min(x, w - 1), min(y, h - 1), min(w, x + 10), min(h, y + 10))
    region = square(box, side, size)
    assert inside(box, region) and region[0] >= 0 and region[2] <= w and region[1] >= 0 and region[3] <= h


@given(st.integers(0, 5000), st.integers(0, 5000), st.lists(st.integers(0, 600), min_size=4, max_size=4))
def test_boxes_found_in_a_region_come_back_in_frame_pixels_exactly(dx, dy, corners):
    x1, y1 = min(corners[0], corners[2]), min(corners[1], corners[3])
    x2, y2 = max(corners[0], corners[2]) + 1, max(corners[1], corners[3]) + 1
    back = moved({"box": [x1, y1, x2, y2], "score": 0.9, "keypoints": [[x1, y2, 0.5]]}, dx, dy)
    assert back["box"] == [x1 + dx, y1 + dy, x2 + dx, y2 + dy] and back["keypoints"] == [[x1 + dx, y2 + dy, 0.5]]


def test_a_box_on_a_regions_inner_edge_is_cut_and_on_the_frames_edge_is_not():
    size = (720, 1280)
    assert cut([300, 100, 320, 140], (0, 0, 320, 320), size)  # the region's right edge, inside the frame
    assert not cut([0, 100, 40, 140], (0, 0, 320, 320), size)  # the frame's own left edge
    assert not cut([100, 100, 140, 140], (0, 0, 320, 320), size)


def test_one_object_found_in_two_regions_is_one_detection():
    a = {"box": [250, 100, 300, 150], "score": 0.9, "class_id": 0}
    b = {"box": [250, 100, 300, 150], "score": 0.9, "class_id": 0}
    other = {"box": [250, 100, 300, 150], "score": 0.8, "class_id": 2}
    assert merged([a, b, other], 100) == [a, other]


def test_what_a_mover_left_behind_and_a_stopped_object_settle_into_the_background():
    """The background held a square where it started; once it has gone, the empty place is
    unchanged frame to frame and settles after SETTLE frames, as does the square where it stopped."""
    from handler.motion import SETTLE

    motion = Motion(MotionSettings())
    motion.find(with_square(noisy(), 30, 30, 90, 90))  # the background: the square at its start
    gone = [motion.find(with_square(noisy(), 300, 150, 360, 210)).boxes for _ in range(SETTLE + 1)]
    assert gone[0] == ((30, 30, 90, 90), (300, 150, 360, 210))  # its ghost, and where it is
    assert all(boxes for boxes in gone[:SETTLE])
    assert gone[SETTLE] == ()  # both settled: its ghost, and the square, stopped where it is


def test_a_cloud_dimming_the_picture_is_lighting_and_a_mover_seen_through_it_still_counts():
    """A 25% drop moves dark pixels less than the threshold and bright ones more: under
    `lightning_threshold` of the frame changes (the pixels over 120), but the picture's gain says
    lighting, and a mover seen through it is still motion."""
    textured = RNG.integers(20, 230, (H, W)).astype(np.uint8)
    motion = Motion(MotionSettings())
    motion.find(textured)
    dimmed = (textured * 0.75).astype(np.uint8)
    assert motion.find(dimmed) == (Found((), True))
    assert motion.find(with_square(dimmed, 300, 150, 360, 210, value=250)).boxes == ((300, 150, 360, 210),)
    motion = Motion(MotionSettings())
    motion.find(textured)
    seen = motion.find(with_square(dimmed, 300, 150, 360, 210, value=250))
    assert seen.lighting and seen.boxes == ((300, 150, 360, 210),)
