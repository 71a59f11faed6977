"""Class names from every labels source, and masks as COCO RLE that pycocotools decodes."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from pycocotools import mask as coco

from handler.errors import ConfigError
from handler.tasks import rle
from handler.tasks.labels import Labels, from_names, read_labels


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40).flatmap(lambda h: st.integers(1, 40).flatmap(
    lambda w: arrays(np.bool_, (h, w)))))
def test_rle_is_what_pycocotools_writes_and_decodes(mask):
    ours = rle.encode(mask)
    theirs = coco.encode(np.asfortranarray(mask.astype(np.uint8)))
    assert ours["counts"] == theirs["counts"].decode()
    assert ours["size"] == list(theirs["size"])
    assert (coco.decode({"size": ours["size"], "counts": ours["counts"].encode()}) == mask).all()
    assert (rle.decode(ours) == mask).all()


def test_a_large_mask_is_small():
    mask = np.zeros((720, 1280), dtype=bool)
    mask[100:400, 200:900] = True
    encoded = rle.encode(mask)
    assert len(json.dumps(encoded)) < 3000
    assert int(coco.area({"size": encoded["size"], "counts": encoded["counts"].encode()})) == 300 * 700


def test_index_to_name_json_with_string_keys_and_list_values(tmp_path):
    path = tmp_path / "index_to_name.json"
    path.write_text(json.dumps({"0": ["n01440764", "tench"], "1": "goldfish", "7": ["x", "cock"]}))
    labels = read_labels(path)
    assert [labels.name(i) for i in (0, 1, 7, 3)] == ["tench", "goldfish", "cock", "3"]


def test_object_type_names_lists_and_labels_txt(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"object_type_names": ["__background__", "person"]}))
    (tmp_path / "labels.txt").write_text("person\nbicycle\n\ncar\n")
    assert read_labels(tmp_path / "a.json").name(1) == "person"
    # one name per line, as DeepStream reads it: a blank line is a class without a name
    assert [read_labels(tmp_path / "labels.txt").name(i) for i in range(5)] == ["person", "bicycle", "2", "car", "4"]


def test_ultralytics_names_and_bad_files(tmp_path):
    assert from_names({"0": "person", "1": "bicycle"}).name(1) == "bicycle"
    assert from_names(["a", "b"]).name(0) == "a"
    assert len(from_names(None)) == 0
    (tmp_path / "bad.json").write_text('{"a": 1}')
    with pytest.raises(ConfigError, match="holds no labels"):
        read_labels(tmp_path / "bad.json")
    with pytest.raises(ConfigError, match="cannot read missing.txt"):
        read_labels(tmp_path / "missing.txt")


def test_settings_name_classes_by_label_or_id():
    labels = Labels({0: "person", 2: "car"})
    assert labels.ids(["car", 0, "5"], "classes") == [2, 0, 5]
    with pytest.raises(ConfigError, match=r"handler.classes: no class is labelled 'truck' \(labels: \['car', 'person'\]"):
        labels.ids(["truck"], "classes")
