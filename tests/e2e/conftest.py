import json
import shutil

import pytest
import yaml

from tests import planted, scenes
from tests.e2e.server import TorchServe, build_archives
from tests.e2e.tracks import LARGE, MODEL, SMALL
from tsutil.server import env_port_offset


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def archives(tmp_path_factory):
    if shutil.which("java") is None:
        pytest.fail("end-to-end tests need Java 17 for TorchServe: apt-get install openjdk-17-jre-headless")
    store = tmp_path_factory.mktemp("model_store")
    build_archives(store)
    return store


#: The shared TorchServe's ports sit this far above `$VIDEO_TS_PORT_OFFSET`: clear of the servers
#: that modules start for themselves, on the plain offset, while it runs.
SHARED_PORT_OFFSET = 100


@pytest.fixture(scope="session")
def server(archives, tmp_path_factory):
    """The shipped config.properties and archives, started once for every module that needs no
    more (a start costs about 15 s). Its history is shared: a test counts from what it sees first
    (log lines, metrics), never from zero."""
    ts = TorchServe(tmp_path_factory.mktemp("torchserve"), archives,
                    port_offset=env_port_offset() + SHARED_PORT_OFFSET).start()
    yield ts
    ts.stop()


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    """TorchServe serving the planted detector (tests/planted.py) as `planted_tracks`, with its labels."""
    tmp = tmp_path_factory.mktemp("tracks_model")
    planted.script(planted.Yolo()).save(str(tmp / f"{MODEL}.pt"))
    # ByteTrack's second association uses the low-score boxes: answer them (docs/ingest.md).
    handler = {"task": "detection", "resize": "letterbox", "input_size": [320, 320], "score_threshold": 0.1,
               "normalize": {"scale": 1 / 255}, "labels": "index_to_name.json"}
    (tmp / f"{MODEL}.yaml").write_text(yaml.safe_dump({"minWorkers": 1, "maxWorkers": 1, "batchSize": 8,
                                                       "maxBatchDelay": 20, "responseTimeout": 120,
                                                       "handler": handler}))
    (tmp / "index_to_name.json").write_text(json.dumps({"0": "red", "1": "green", "2": "blue"}))
    build_archives(tmp / "store", MODEL, str(tmp / f"{MODEL}.pt"), str(tmp / f"{MODEL}.yaml"))
    models = {MODEL: {"1.0": {"defaultVersion": True, "marName": f"{MODEL}.mar", "minWorkers": 1, "maxWorkers": 1,
                              "batchSize": 8, "maxBatchDelay": 20, "responseTimeout": 120}}}
    ts = TorchServe(tmp_path_factory.mktemp("tracks_ts"), tmp / "store",
                    overlays=[f"load_models={MODEL}.mar\nmodels={json.dumps(models)}\n"]).start()
    yield ts
    ts.stop()


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    """The scripted scene (tests/scenes.py): `resized` changes size at frame 90, `steady` does not."""
    tmp = tmp_path_factory.mktemp("scenes")
    return {"resized": scenes.make(tmp / "resized.ts", [(*SMALL, 90), (*LARGE, 210)]),
            "steady": scenes.make(tmp / "steady.ts", [(*SMALL, 300)])}
