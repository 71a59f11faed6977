import json
import os
import shutil

import pytest
import yaml

from tests import planted, scenes
from tests.e2e.server import TorchServe, build_archives
from tests.e2e.tracks import LARGE, MODEL, SMALL
from tsutil.server import env_port_offset

# Ray reads its authentication mode once, when first imported (the unit tests import it): the
# tests' cluster runs with Ray's token authentication on, as `rayserve.node` starts it.
os.environ.setdefault("RAY_AUTH_MODE", "token")


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
def torchserve_server(archives, tmp_path_factory):
    """The shipped config.properties and archives, started once for every module that needs no
    more (a start costs about 15 s). Its history is shared: a test counts from what it sees first
    (log lines, metrics), never from zero."""
    ts = TorchServe(tmp_path_factory.mktemp("torchserve"), archives,
                    port_offset=env_port_offset() + SHARED_PORT_OFFSET).start()
    yield ts
    ts.stop()


@pytest.fixture(scope="session")
def server(torchserve_server):
    """The shared TorchServe (`torchserve_server`, by the name a module that overrides `server` uses)."""
    return torchserve_server


@pytest.fixture(scope="session")
def planted_store(tmp_path_factory):
    """The planted detector (tests/planted.py) packed by archive.sh as `planted_tracks`, with its labels."""
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
    return tmp / "store"


@pytest.fixture(scope="module")
def detector(planted_store, tmp_path_factory):
    """TorchServe serving the planted detector (`planted_store`) as `planted_tracks`."""
    models = {MODEL: {"1.0": {"defaultVersion": True, "marName": f"{MODEL}.mar", "minWorkers": 1, "maxWorkers": 1,
                              "batchSize": 8, "maxBatchDelay": 20, "responseTimeout": 120}}}
    ts = TorchServe(tmp_path_factory.mktemp("tracks_ts"), planted_store,
                    overlays=[f"load_models={MODEL}.mar\nmodels={json.dumps(models)}\n"]).start()
    yield ts
    ts.stop()


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    """The scripted scene (tests/scenes.py): `resized` changes size at frame 90, `steady` does not."""
    tmp = tmp_path_factory.mktemp("scenes")
    return {"resized": scenes.make(tmp / "resized.ts", [(*SMALL, 90), (*LARGE, 210)]),
            "steady": scenes.make(tmp / "steady.ts", [(*SMALL, 300)])}


#: Ray's HTTP port in the tests sits this far above `$VIDEO_TS_PORT_OFFSET` (TorchServe's are near 8080).
RAY_HTTP_PORT = 8300


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A real Ray cluster of three nodes on loopback (tests/e2e/raycluster.py), per module: gone
    before the modules that start their own TorchServe, which it would crowd on 2 cores."""
    from tests.e2e.raycluster import RayCluster

    cluster = RayCluster(tmp_path_factory.mktemp("ray"), port_offset=env_port_offset())
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def ray_serve(ray_cluster, archives, planted_store, tmp_path_factory):
    """The shipped `frame_quality` and `face_detector` archives on the cluster, as `video-ray` serves
    them, beside two archives of the same model whose YAML asks for two replicas
    (`frame_quality_spread`) and for one to three (`frame_quality_auto`, batches of 4), the face
    detector in batches of 1 with a 4 s `responseTimeout` (`face_detector_hurried`), and the
    planted detector of the tracking tests (`planted_tracks`)."""
    import zipfile

    from tests.e2e.raycluster import RayServe

    tmp = tmp_path_factory.mktemp("ray_serve")
    store = tmp / "store"
    store.mkdir()
    for name in ("frame_quality", "face_detector"):
        shutil.copy(archives / f"{name}.mar", store)
    shutil.copy(planted_store / f"{MODEL}.mar", store)
    with zipfile.ZipFile(archives / "frame_quality.mar") as mar:
        (tmp / "frame_quality.pt").write_bytes(mar.read("frame_quality.pt"))
        shipped = yaml.safe_load(mar.read("frame_quality.yaml"))
    for name, workers, batch in (("frame_quality_spread", (2, 2), 8), ("frame_quality_auto", (1, 3), 4)):
        config = {**shipped, "minWorkers": workers[0], "maxWorkers": workers[1], "batchSize": batch,
                  "maxBatchDelay": 20}
        (tmp / f"{name}.yaml").write_text(yaml.safe_dump(config))
        build_archives(store, name, str(tmp / "frame_quality.pt"), str(tmp / f"{name}.yaml"))
    with zipfile.ZipFile(archives / "face_detector.mar") as mar:
        for file in ("face_detector.pt", "face_detector_labels.txt"):
            (tmp / file).write_bytes(mar.read(file))
        faces = {**yaml.safe_load(mar.read("face_detector.yaml")), "batchSize": 1, "maxBatchDelay": 0,
                 "responseTimeout": 4}
    (tmp / "face_detector_hurried.yaml").write_text(yaml.safe_dump(faces))
    build_archives(store, "face_detector_hurried", str(tmp / "face_detector.pt"), str(tmp / "face_detector_hurried.yaml"))
    properties = tmp / "config.properties"
    properties.write_text(f"model_store={store}\nload_models=all\njob_queue_size=100\n"
                          "max_request_size=209715200\n")
    args = {"config": str(properties), "replica_cpus": 0.25, "ingress_resources": {"head": 0.01},
            "autoscaling": {"upscale_delay_s": 1, "downscale_delay_s": 4, "metrics_interval_s": 0.5,
                            "look_back_period_s": 1}}
    return RayServe(ray_cluster, tmp, args, port=RAY_HTTP_PORT + env_port_offset())
