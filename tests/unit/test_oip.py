"""Open Inference Protocol: request bodies built by the real tritonclient, answers it parses."""

import gzip
import json
import zlib

import numpy as np
import pytest
import tritonclient.http as httpclient

from handler.clip import FrameResult, Meta, Request
from handler.config import HandlerConfig
from handler.doors import oip
from handler.errors import ClipTooLarge, CorruptFrame, EmptyFrame, FrameTooLarge, UnsupportedContentType
from handler.models import frame_quality
from tests import support
from tests.support import Answering

CONFIG = HandlerConfig.from_mapping({"max_width": 1920, "max_height": 1080, "max_clip_frames": 4,
                                     "pass_sizes": True})
FRAME = support.frame(48, 64, 3)


def _tensor(name, array, datatype, binary=True):
    tensor = httpclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def _body(*tensors):
    """`(body, headers)` exactly as `tritonclient.http` sends them."""
    body, json_size = httpclient.InferenceServerClient.generate_request_body(list(tensors))
    return bytearray(body), ({} if json_size is None else {oip.HEADER_LENGTH: str(json_size)})


def _decode(body, headers):
    return oip.decode(oip.parse(body, headers, 1 << 30), Meta.parse(headers), CONFIG)


def _frames(body, headers):
    return [np.asarray(f) for f in _decode(body, headers).frames]


@pytest.mark.parametrize("binary", [True, False])
def test_uint8_frame_grey_and_clip(binary):
    grey = FRAME[..., 0].copy()
    clip = np.stack([FRAME, FRAME[::-1].copy()])
    [frame] = _frames(*_body(_tensor("x", FRAME, "UINT8", binary)))
    assert np.array_equal(frame, FRAME)
    [frame] = _frames(*_body(_tensor("x", grey, "UINT8", binary)))
    assert np.array_equal(frame, np.repeat(grey[..., None], 3, axis=2))
    frames = _frames(*_body(_tensor("x", clip, "UINT8", binary)))
    assert len(frames) == 2 and all(np.array_equal(a, b) for a, b in zip(frames, clip))


def test_bytes_of_encoded_images_are_a_clip_in_order():
    jpeg, png = support.jpeg(FRAME), support.png(FRAME[:20, :30].copy())
    frames = _frames(*_body(_tensor("images", np.array([jpeg, png], dtype=np.object_), "BYTES")))
    assert np.array_equal(frames[0], support.decoded(jpeg)) and np.array_equal(frames[1], FRAME[:20, :30])


def test_a_json_body_parsed_by_torchserve_is_accepted():
    body = {"inputs": [{"name": "x", "shape": [2, 2], "datatype": "UINT8", "data": [[0, 1], [2, 255]]}]}
    [frame] = _decode(body, {}).frames
    assert frame[..., 2].tolist() == [[0, 1], [2, 255]]


def _json(tensor):
    return bytearray(json.dumps({"inputs": [tensor]}).encode()), {}


@pytest.mark.parametrize("body, headers, error", [
    (bytearray(b"{not json"), {}, oip.BadInferenceRequest),
    (bytearray(b"[1, 2]"), {}, oip.BadInferenceRequest),
    (bytearray(b'{"inputs": []}'), {}, oip.BadInferenceRequest),
    (bytearray(b""), {}, EmptyFrame),
    (bytearray(b'{"inputs": []}'), {oip.HEADER_LENGTH: "999"}, oip.BadInferenceRequest),
    (bytearray(b'{"inputs": []}'), {oip.HEADER_LENGTH: "-1"}, oip.BadInferenceRequest),
    (*_json({"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [0, 0, 0, 0]}), UnsupportedContentType),
    (*_json({"name": "x", "shape": [2, 2, 4], "datatype": "UINT8", "data": [0] * 16}), oip.BadInferenceRequest),
    (*_json({"name": "x", "shape": [2, 2], "datatype": "UINT8", "data": [0, 0, 0]}), oip.BadInferenceRequest),
    (*_json({"name": "x", "shape": [2, 2], "datatype": "UINT8", "data": [0, 0, 0, 256]}), oip.BadInferenceRequest),
    (*_json({"name": "x", "shape": [2, "2"], "datatype": "UINT8", "data": [0] * 4}), oip.BadInferenceRequest),
    (*_json({"name": "x", "shape": [2, 2], "datatype": "UINT8"}), oip.BadInferenceRequest),
    (*_json({"name": "x", "shape": [1080, 4000, 3], "datatype": "UINT8", "data": []}), FrameTooLarge),
    (*_json({"name": "x", "shape": [5, 8, 8, 3], "datatype": "UINT8", "data": []}), ClipTooLarge),
    (*_json({"name": "x", "shape": [5], "datatype": "BYTES", "data": ["a"] * 5}), ClipTooLarge),
    (*_json({"name": "x", "shape": [0], "datatype": "BYTES", "data": []}), EmptyFrame),
    (*_json({"name": "x", "shape": [2], "datatype": "BYTES", "data": ["a"]}), oip.BadInferenceRequest),
])
def test_malformed_requests_are_typed_errors(body, headers, error):
    with pytest.raises(error):
        _decode(body, headers)


def test_binary_sizes_that_run_past_the_body_are_refused():
    body, headers = _body(_tensor("x", FRAME, "UINT8"))
    with pytest.raises(oip.BadInferenceRequest, match="runs past"):
        _decode(body[:-1], headers)
    body, headers = _body(_tensor("x", np.array([support.jpeg(FRAME)], dtype=np.object_), "BYTES"))
    start = int(headers[oip.HEADER_LENGTH])
    body[start: start + 4] = (len(body) - start).to_bytes(4, "little")  # longer than what follows
    with pytest.raises(CorruptFrame, match="declares"):
        _decode(body, headers)


def _request(body, headers, model="frame_quality"):
    """The Request TorchServe's items become for `/v2/models/{model}/infer`."""
    return support.read({"body": body}, {"body": {"content-type": ""}, **headers}, model, CONFIG)


def test_answers_stack_outputs_over_frames_and_tritonclient_reads_them():
    model = frame_quality.build()
    clip = np.stack([FRAME, support.frame(48, 64, 4)])
    body, headers = _body(_tensor("frames", clip, "UINT8"))
    requests = [_request(body, headers), _request(bytearray(body), {**headers, oip.HEADER_LENGTH: "5"})]
    [good, refused], _ = Answering(model, CONFIG, door=oip).run(requests)
    assert (good.status, refused.status) == (200, 400)
    result = httpclient.InferResult.from_response_body(good.body.encode())
    assert result.get_response()["model_name"] == "frame_quality"
    for name in ("brightness", "contrast", "sharpness"):
        values = result.as_numpy(name)
        assert values.dtype == np.float32 and values.shape == (2,)
        for value, pixels in zip(values, clip):
            assert value == pytest.approx(support.quality(pixels)[name], rel=1e-4)
    assert json.loads(refused.body)["error"].startswith("BadInferenceRequest: ")


def test_outputs_asked_for_and_the_request_id_come_back():
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        [_tensor("frames", FRAME, "UINT8")], outputs=[httpclient.InferRequestedOutput("sharpness"),
                                                      httpclient.InferRequestedOutput("brightness")],
        request_id="req-9")
    headers = {oip.HEADER_LENGTH: str(json_size)}
    unknown, size = httpclient.InferenceServerClient.generate_request_body(
        [_tensor("frames", FRAME, "UINT8")], outputs=[httpclient.InferRequestedOutput("mask")])
    [asked, missing], _ = Answering(frame_quality.build(), CONFIG, door=oip).run(
        [_request(body, headers), _request(unknown, {oip.HEADER_LENGTH: str(size)})])
    answer = json.loads(asked.body)
    assert answer["id"] == "req-9" and [o["name"] for o in answer["outputs"]] == ["sharpness", "brightness"]
    assert missing.status == 400 and "['mask']" in json.loads(missing.body)["error"]


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_a_compressed_request_is_read(algorithm):
    client = httpclient.InferenceServerClient.generate_request_body
    body, json_size = client([_tensor("frames", FRAME, "UINT8")])
    packed = gzip.compress(body) if algorithm == "gzip" else zlib.compress(body)
    headers = {oip.HEADER_LENGTH: str(json_size), "content-encoding": algorithm}
    [frame] = _frames(bytearray(packed), headers)
    assert np.array_equal(frame, FRAME)
    with pytest.raises(oip.BadInferenceRequest, match=algorithm):
        oip.parse(bytearray(b"not compressed"), headers, 1 << 30)


def test_vectors_stack_to_n_by_k_and_ragged_outputs_are_a_400():
    request = Request(oip.InferRequest({}, memoryview(b""), "m"))
    frames = [FrameResult(1, 1, {"v": [1.0, 2.0], "s": 3}), FrameResult(1, 1, {"v": [4.0, 5.0], "s": 6})]
    body = json.loads(oip.answer(request, frames).body)
    assert body["outputs"] == [{"name": "v", "datatype": "FP32", "shape": [2, 2], "data": [1.0, 2.0, 4.0, 5.0]},
                               {"name": "s", "datatype": "INT64", "shape": [2], "data": [3, 6]}]
    ragged = [FrameResult(1, 1, {"map": [[1.0, 2.0]]}), FrameResult(1, 1, {"map": [[1.0], [2.0]]})]
    answer = oip.answer(request, ragged)
    assert answer.status == 400 and json.loads(answer.body)["error"].startswith("NotStackable: ")


def test_bytes_of_one_segment_are_its_frames_with_pts():
    from tests import videos

    segment = videos.segment("mp4", width=64, height=48, frames=5)
    body, headers = _body(_tensor("segment", np.array([segment], dtype=np.object_), "BYTES"))
    clip = _decode(body, headers)
    assert len(clip.frames) == 5 and clip.pts is not None and len(clip.pts) == 5
    clip = _decode(body, {**headers, "x-sample-fps": "10"})
    assert len(clip.frames) == 2
    # The answer carries them as one more output, FP64 seconds, as tritonclient reads it.
    [answer], _ = Answering(frame_quality.build(), CONFIG, door=oip).run([_request(body, headers)])
    result = httpclient.InferResult.from_response_body(answer.body.encode())
    pts = result.as_numpy("pts")
    assert pts.dtype == np.float64 and pts.tolist() == pytest.approx([n / 30 for n in range(5)], abs=1e-3)
    assert result.as_numpy("brightness").shape == (5,)


@pytest.mark.parametrize("kinds, index", [
    (["jpeg", "h264"], 1),
    (["mp4", "png"], 0),
    (["h264", "mp4"], 0),
])
def test_a_segment_among_other_bytes_elements_is_refused(kinds, index):
    from tests import videos

    made = {"jpeg": support.jpeg(FRAME), "png": support.png(FRAME),
            "h264": videos.segment("h264", width=64, height=48, frames=3),
            "mp4": videos.segment("mp4", width=64, height=48, frames=3)}
    body, headers = _body(_tensor("x", np.array([made[k] for k in kinds], dtype=np.object_), "BYTES"))
    with pytest.raises(oip.BadInferenceRequest) as caught:
        _decode(body, headers)
    assert str(caught.value) == (
        f"BYTES input of 2 elements holds a video segment (element {index}): send a segment alone, as "
        "BYTES of shape [1], or several encoded images (JPEG, PNG, npy)")
    assert caught.value.status == 400


@pytest.mark.parametrize(("fmt", "clip"), [("jpeg", 1), ("png", 1), ("npy", 1), ("npy", 3), ("raw", 1),
                                           ("raw", 3), ("h264", 3), ("mp4", 3)])
def test_video_loadgen_oip_bodies_decode_to_the_frames_of_its_http_bodies(fmt, clip):
    from handler.frames import decode
    from loadgen.frames import Format, FrameSource
    from loadgen.schedule import Resolution
    from loadgen.transport import oip_request

    payload = FrameSource(Format(fmt), clip, distinct=1).payload(2, 0, Resolution(64, 48))
    header, data = oip_request(payload.body, payload.content_type, payload.headers)
    headers = {oip.HEADER_LENGTH: str(len(header)), **{k.lower(): v for k, v in payload.headers.items()}}
    got = _decode(bytearray(header + data), headers)
    want = decode(payload.body, payload.content_type, Meta.parse({k.lower(): v for k, v in payload.headers.items()}),
                  CONFIG)
    assert len(got.frames) == len(want.frames) == clip
    assert all(np.array_equal(a, b) for a, b in zip(got.frames, want.frames))
    assert got.pts == want.pts


def test_a_json_request_that_carries_a_stale_header_length_is_read_whole():
    # tritonclient's infer(headers=h) writes Inference-Header-Content-Length into h: a client
    # reusing h sends its last binary request's length with its next JSON-only one.
    _, binary_headers = _body(_tensor("frames", FRAME, "UINT8"))
    json_body, json_headers = _body(_tensor("frames", FRAME, "UINT8", binary=False))
    assert json_headers == {} and int(binary_headers[oip.HEADER_LENGTH]) < len(json_body)
    [frame] = _frames(json_body, binary_headers)
    assert np.array_equal(frame, FRAME)
    broken = bytearray(json_body[:-1])  # not JSON whole either: the length's error stands
    with pytest.raises(oip.BadInferenceRequest, match="not JSON"):
        _decode(broken, binary_headers)
