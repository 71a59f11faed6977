"""Edge cases found in review: each is answered alone, with its own 4xx, and bounded in work."""

from __future__ import annotations

import gzip
import json
import tracemalloc

import numpy as np
import pytest
import torch
from tritonclient import http as httpclient

from handler.clip import Meta
from handler.config import HandlerConfig
from handler.doors import oip
from handler.errors import BadHeader, ClipTooLarge, CorruptFrame, FrameTooLarge
from handler.formats import Format, resolve
from handler.frames import decode
from tests import support
from tests.support import Answering

FRAME = support.frame(48, 64, 3)


def _oip_bytes(elements, declared):
    tensor = httpclient.InferInput("x", [declared], "BYTES")
    tensor.set_data_from_numpy(np.array(elements, dtype=np.object_), binary_data=True)
    body, size = httpclient.InferenceServerClient.generate_request_body([tensor])
    return bytearray(body), {oip.HEADER_LENGTH: str(size)}


def test_bytes_elements_past_the_declared_count_are_refused_without_reading_them():
    jpeg = support.jpeg(FRAME)
    data = len(jpeg).to_bytes(4, "little") + jpeg + bytes(4 * 100_000)  # then 100,000 empty elements
    header = json.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(data)}}]}).encode()
    headers = {oip.HEADER_LENGTH: str(len(header))}
    with pytest.raises(oip.BadInferenceRequest, match="400000 bytes follow the last one"):
        oip.decode(oip.parse(bytearray(header + data), headers, 1 << 30), Meta(), HandlerConfig())


def test_a_compressed_body_inflates_only_to_the_limit_given():
    body, headers = _oip_bytes([support.jpeg(FRAME)], 1)
    bomb = gzip.compress(bytes(body) + bytes(4 << 20))
    with pytest.raises(FrameTooLarge, match="inflates to more than 1048576 bytes"):
        oip.parse(bomb, {**headers, "content-encoding": "gzip"}, max_inflated=1 << 20)


def test_a_form_of_huge_flat_pngs_stops_at_the_pixel_limit_before_decoding_them_all():
    config = HandlerConfig.from_mapping({"max_clip_pixels": 3840 * 2160 * 2})
    png = support.png(np.zeros((2160, 3840, 3), np.uint8))
    item = {f"f{i}": bytearray(png) for i in range(8)}
    headers = {"content-type": "multipart/form-data; boundary=x",
               **{f"f{i}": {"content-type": "image/png"} for i in range(8)}}
    tracemalloc.start()
    with pytest.raises(ClipTooLarge, match="the form's 8 file parts holds at least"):
        support.read(item, headers).decode(config)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # the limit (2 frames), the part over it and the decoder's own buffer; all 8 would be 8 frames
    assert peak < 5 * 3840 * 2160 * 3, f"{peak} bytes held: more than the limit plus one part"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_capture_time_that_is_not_a_time_is_a_bad_header(value):
    pipeline = Answering(lambda x: x.mean((1, 2, 3)), HandlerConfig.from_mapping({"max_frame_age_ms": 1000}))
    [bad, good], _ = pipeline.run([
        support.request(support.jpeg(FRAME), "image/jpeg", {"x-capture-time": value}),
        support.request(support.jpeg(FRAME), "image/jpeg"),
    ])
    assert (bad.status, json.loads(bad.body)["type"], good.status) == (400, BadHeader.__name__, 200)


def test_a_non_ascii_digit_in_a_size_header_is_a_400_not_a_500():
    with pytest.raises(CorruptFrame, match="not a positive whole number"):
        decode(bytes(12), "application/octet-stream", Meta.parse({"x-frame-width": "²", "x-frame-height": "2"}),
               HandlerConfig())


def test_raw_pixels_without_a_type_but_with_their_size_are_raw():
    headers = {"x-frame-width": "2", "x-frame-height": "2"}
    assert resolve(bytes(12), None, Meta.parse(headers).sized) is Format.RAW
    [frame] = decode(bytes(range(12)), None, Meta.parse(headers), HandlerConfig()).frames
    assert frame.tolist() == np.arange(12).reshape(2, 2, 3).tolist()


def test_static_batch_alone_sets_the_chunk_size():
    assert HandlerConfig.from_mapping({"static_batch": 8}).model_max_batch == 8


def test_an_answer_that_cannot_be_encoded_fails_its_request_alone():
    def model(x):  # complex numbers: no JSON for them
        return torch.complex(x.mean((1, 2, 3)), x.mean((1, 2, 3)))

    [response], stats = Answering(model, HandlerConfig()).run([support.request(support.jpeg(FRAME), "image/jpeg")])
    assert (response.status, json.loads(response.body)["type"]) == (500, "InternalError")
    assert stats.rejected == {"internal": 1}


def test_oip_outputs_keep_integers_and_nan_as_null():
    def model(x):
        n = x.shape[0]
        return {"count": torch.arange(n), "score": torch.full((n,), float("nan"))}

    body, headers = _oip_bytes([support.jpeg(FRAME), support.jpeg(FRAME)], 2)
    request = support.read({"body": body}, {"body": {"content-type": ""}, **headers})
    [response], _ = Answering(model, HandlerConfig(), door=oip).run([request])
    outputs = {o["name"]: o for o in json.loads(response.body)["outputs"]}
    assert outputs["count"] == {"name": "count", "datatype": "INT64", "shape": [2], "data": [0, 1]}
    assert outputs["score"] == {"name": "score", "datatype": "FP32", "shape": [2], "data": [None, None]}
