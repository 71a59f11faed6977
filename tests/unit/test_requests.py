"""TorchServe's items and headers, as each entry point delivers them (docs/clients.md) -> Requests."""

import json

import numpy as np
import pytest

from handler.config import HandlerConfig
from handler.errors import ClipTooLarge, CorruptFrame, FrameError, UnsupportedContentType
from handler.models import frame_quality
from handler.pipeline import Pipeline
from handler.requests import BadForm, Protocol, Request, from_item
from tests import support

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


def _frames(request):
    return [np.asarray(f) for f in request.decode(CONFIG).frames]


def test_curl_t_idiom_without_content_type_is_found_from_the_bytes():
    request = from_item(*_http(JPEG, **{"X-Stream-Id": "cam-1"}))
    assert request.protocol is Protocol.NATIVE and request.headers["x-stream-id"] == "cam-1"
    [frame] = _frames(request)
    assert frame.shape == (48, 64, 3) and np.array_equal(frame, support.decoded(JPEG))


def test_multipart_parts_are_a_clip_in_sent_order_and_fields_are_headers():
    item, headers = _form([("second", PNG, "image/png"), ("first", JPEG, "application/octet-stream")],
                          {"stream_id": "cam-2", "frame_id": "9", "capture_time": "12.5"})
    request = from_item(item, headers)
    assert [p.name for p in request.parts] == ["second", "first"]
    assert {k: request.headers[k] for k in ("x-stream-id", "x-frame-id", "x-capture-time")} == {
        "x-stream-id": "cam-2", "x-frame-id": "9", "x-capture-time": "12.5"}
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
    request = from_item(item, {k: {"content-type": ""} for k in item})
    assert request.protocol is Protocol.NATIVE and request.content_type == "application/octet-stream"
    assert {k: v for k, v in request.headers.items()} == {
        "x-stream-id": "cam-3", "x-frame-id": "77", "x-frame-width": "64", "x-frame-height": "48",
        "x-pixel-format": "rgb24", "x-sample-fps": "5"}
    [frame] = _frames(request)
    assert np.array_equal(frame, FRAME)


def test_oip_is_told_apart_from_predictions():
    oip_binary = from_item({"body": bytearray(b'{"inputs": []}')},
                           {"body": {"content-type": ""}, "Inference-Header-Content-Length": "14"})
    oip_json = from_item({"body": {"inputs": []}}, {"body": {"content-type": "application/json"},
                                                      "Content-Type": "application/json"}, "m")
    native_json = from_item(*_http(b'{"inputs": []}', **{"Content-Type": "application/json"}))
    assert (oip_binary.protocol, oip_json.protocol, native_json.protocol) == (
        Protocol.OIP, Protocol.OIP, Protocol.NATIVE)
    assert oip_json.model == "m"


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
    responses, _ = Pipeline(model, CONFIG).run(requests)
    bodies = [json.loads(r.body) for r in responses]
    assert [r.status for r in responses] == [200, 200, 200, 400]
    assert [b["frame_id"] for b in bodies] == ["http", "form", "grpc", "bad"]
    assert [b["code"] for b in bodies] == [200, 200, 200, 400]
    for body in bodies[:3]:
        support.assert_quality(body["frames"][0]["outputs"], support.decoded(JPEG))
    assert bodies[3]["type"] == "CorruptFrame"


def test_request_defaults_are_the_native_protocol():
    request = Request(JPEG, "image/jpeg")
    assert request.protocol is Protocol.NATIVE and request.parts == () and request.refused is None
