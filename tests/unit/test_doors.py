"""TorchServe's items and headers, as each entry point delivers them (docs/clients.md) -> the door
that reads them and the core `Request` it builds."""

import json

import numpy as np
import pytest

from handler.clip import Request
from handler.config import HandlerConfig
from handler.doors import native, oip, route
from handler.doors.native import BadForm
from handler.errors import ClipTooLarge, CorruptFrame, EmptyFrame, FrameError, UnsupportedContentType
from handler.models import frame_quality
from tests import support
from tests.support import Answering

CONFIG = HandlerConfig.from_mapping({"max_width": 1920, "max_height": 1080, "max_clip_frames": 4,
                                     "pass_sizes": True})
FRAME = support.frame(48, 64, 1)
JPEG = support.jpeg(FRAME)
PNG = support.png(support.frame(40, 50, 2))


def _http(body, **headers):
    """What `/predictions` delivers: `body`, the request headers, `url_path`."""
    content_type = headers.get("Content-Type", "")
    return {"body": bytearray(body)}, {"body": {"content-type": content_type}, **headers, "url_path": ""}


def _form(parts, fields=None, content_length=None):
    """What a multipart form delivers: one key per part and field, part types as dicts."""
    item, headers = {}, {}
    for name, body, content_type in parts:
        item[name], headers[name] = bytearray(body), {"content-type": content_type}
    for name, value in (fields or {}).items():
        item[name], headers[name] = bytearray(value.encode()), {"content-type": ""}
    size = sum(len(v) for v in item.values()) + 200 * len(item) if content_length is None else content_length
    headers.update({"Content-Type": "multipart/form-data; boundary=b0ff", "Content-Length": str(size),
                    "url_path": ""})
    return item, headers


def from_item(item, headers, model="frame_quality"):
    """The Request TorchServe's item and header map become, through the door they pick."""
    return route.read(item, headers, model, CONFIG)[1]


def _door(item, headers):
    return route.read(item, headers, "m", CONFIG)[0]


def _frames(request):
    return [np.asarray(f) for f in request.decode(CONFIG).frames]


def test_curl_t_idiom_without_content_type_is_found_from_the_bytes():
    request = from_item(*_http(JPEG, **{"X-Stream-Id": "cam-1"}))
    assert _door(*_http(JPEG)) is native and request.meta.stream_id == "cam-1"
    [frame] = _frames(request)
    assert frame.shape == (48, 64, 3) and np.array_equal(frame, support.decoded(JPEG))


def test_multipart_parts_are_a_clip_in_sent_order_and_fields_are_headers():
    item, headers = _form([("second", PNG, "image/png"), ("first", JPEG, "application/octet-stream")],
                          {"stream_id": "cam-2", "frame_id": "9", "capture_time": "12.5"})
    request = from_item(item, headers)
    assert [p.name for p in request.source.parts] == ["second", "first"]
    assert (request.meta.stream_id, request.meta.frame_id, request.meta.capture_time) == ("cam-2", "9", 12.5)
    frames = _frames(request)
    assert np.array_equal(frames[0], support.decoded(PNG)) and np.array_equal(frames[1], support.decoded(JPEG))


def test_multipart_raw_part_takes_its_size_from_form_fields():
    item, headers = _form([("data", FRAME.tobytes(), "application/octet-stream")],
                          {"frame_width": "64", "frame_height": "48"})
    [frame] = _frames(from_item(item, headers))
    assert np.array_equal(frame, FRAME)


@pytest.mark.parametrize("parts, fields, error", [
    ([], {"stream_id": "cam"}, BadForm),
    ([("data", JPEG[:100], "image/jpeg")], {}, CorruptFrame),
    ([("data", b"hello", "")], {}, UnsupportedContentType),
    ([(f"f{i}", JPEG, "image/jpeg") for i in range(5)], {}, ClipTooLarge),
])
def test_bad_forms_are_typed_errors_naming_the_part(parts, fields, error):
    with pytest.raises(error) as caught:
        from_item(*_form(parts, fields)).decode(CONFIG)
    if parts and error is not ClipTooLarge:
        assert "part 'data'" in str(caught.value)


def test_a_form_that_lost_a_same_name_part_is_refused():
    # curl -F data=@a.jpg -F data=@b.jpg: TorchServe hands over the last part only.
    item, headers = _form([("data", PNG, "image/png")], content_length=len(PNG) + len(JPEG) + 400)
    with pytest.raises(BadForm, match="own name"):
        from_item(item, headers).decode(CONFIG)


def test_grpc_keys_are_headers_and_data_is_the_frame():
    item = {"data": bytearray(FRAME.tobytes()), "stream_id": bytearray(b"cam-3"), "frame_id": b"77",
            "frame_width": b"64", "frame_height": b"48", "pixel_format": b"rgb24",
            "content_type": b"application/octet-stream", "sample_fps": b"5"}
    headers = {k: {"content-type": ""} for k in item}
    request = from_item(item, headers)
    assert _door(item, headers) is native and request.source.content_type == "application/octet-stream"
    meta = request.meta
    assert (meta.stream_id, meta.frame_id, meta.frame_size(), meta.pixel_format, meta.sample_fps) == (
        "cam-3", "77", (48, 64), "rgb24", 5.0)
    [frame] = _frames(request)
    assert np.array_equal(frame, FRAME)


def test_oip_is_told_apart_from_predictions():
    binary = ({"body": bytearray(b'{"inputs": []}')},
              {"body": {"content-type": ""}, "Inference-Header-Content-Length": "14"})
    json_body = ({"body": {"inputs": []}}, {"body": {"content-type": "application/json"},
                                            "Content-Type": "application/json"})
    native_json = _http(b'{"inputs": []}', **{"Content-Type": "application/json"})
    assert (_door(*binary), _door(*json_body), _door(*native_json)) == (oip, oip, native)
    assert from_item(*json_body, model="m").source.model == "m"


def test_an_adapter_failure_is_this_request_s_500_only():
    request = from_item({"body": b"x"}, {"Content-Type": object()})  # not a str: skipped
    assert request.refused is None
    broken = from_item(None, {})  # type: ignore[arg-type]
    with pytest.raises(FrameError) as caught:
        broken.decode(CONFIG)
    assert caught.value.status == 500


def test_every_door_answers_the_same_values_and_a_bad_one_spares_its_batch_mates():
    model = frame_quality.build()
    grpc_item = {"data": bytearray(JPEG), "frame_id": b"grpc"}
    requests = [
        from_item(*_http(JPEG, **{"X-Frame-Id": "http"})),
        from_item(*_form([("data", JPEG, "image/jpeg")], {"frame_id": "form"})),
        from_item(grpc_item, {k: {"content-type": ""} for k in grpc_item}),
        from_item(*_form([("data", JPEG[:-300], "image/jpeg")], {"frame_id": "bad"})),
    ]
    responses, _ = Answering(model, CONFIG).run(requests)
    bodies = [json.loads(r.body) for r in responses]
    assert [r.status for r in responses] == [200, 200, 200, 400]
    assert [b["frame_id"] for b in bodies] == ["http", "form", "grpc", "bad"]
    assert [b["code"] for b in bodies] == [200, 200, 200, 400]
    for body in bodies[:3]:
        support.assert_quality(body["frames"][0]["outputs"], support.decoded(JPEG))
    assert bodies[3]["type"] == "CorruptFrame"


def test_a_request_built_by_hand_is_a_body_with_no_metadata():
    request = Request(native.Body(JPEG, "image/jpeg"))
    assert request.refused is None and request.meta.ids == {"stream_id": None, "frame_id": None}
    [frame] = _frames(request)
    assert np.array_equal(frame, support.decoded(JPEG))


def test_grpc_input_without_data_names_the_key_to_use():
    request = from_item({"stream_id": b"cam"}, {"stream_id": {"content-type": ""}})
    with pytest.raises(EmptyFrame, match=r'input\["data"\]'):
        request.decode(CONFIG)


def test_a_segment_is_served_on_every_native_door_and_keeps_its_pts():
    from tests import videos

    segment = videos.segment("h264", width=64, height=48, frames=6)
    reference = videos.reference_frames(segment, "h264")
    grpc_item = {"data": bytearray(segment), "sample_fps": b"15"}
    doors = {
        "http": from_item(*_http(segment, **{"X-Sample-Fps": "15"})),
        "multipart": from_item(*_form([("data", segment, "")], {"sample_fps": "15"})),
        "grpc": from_item(grpc_item, {k: {"content-type": ""} for k in grpc_item}),
    }
    for door, request in doors.items():
        clip = request.decode(CONFIG)
        assert clip.pts == pytest.approx([0, 2 / 30, 4 / 30]), door
        for frame, want in zip(clip.frames, reference[::2], strict=True):
            assert np.abs(frame.astype(int) - want).mean() < 2, door


@pytest.mark.parametrize("parts", [
    [("frame0", JPEG, "image/jpeg"), ("clip", "mp4", "video/mp4")],
    [("clip", "h264", ""), ("frame1", PNG, "")],
])
def test_a_segment_among_other_file_parts_is_a_bad_form(parts):
    from tests import videos

    parts = [(name, videos.segment(body, width=64, height=48, frames=3) if isinstance(body, str) else body,
              content_type) for name, body, content_type in parts]
    with pytest.raises(BadForm, match="part 'clip' is a video segment among 2 file parts: send a segment as "
                                      "the only file part"):
        from_item(*_form(parts)).decode(CONFIG)
