"""The soak's memory check catches a deliberately leaking handler (its own TorchServe)."""

import os
import subprocess

import pytest

from handler.models.build import build_all
from tests import support
from tests.e2e.load import assert_bounded_growth
from tests.e2e.server import TorchServe, build_archives
from tests.e2e.test_soak import LIMIT_MB, soak


@pytest.fixture(scope="module")
def leaky_server(tmp_path_factory):
    models = tmp_path_factory.mktemp("leaky_models")
    build_all(models)
    store = tmp_path_factory.mktemp("leaky_store")
    build_archives(store)
    env = {**os.environ, "MODEL_STORE": str(store),
           "HANDLER_FILE": str(support.ROOT / "tests" / "e2e" / "leaky_handler.py")}
    subprocess.run(["bash", str(support.ROOT / "archive.sh"), "frame_quality", str(models / "frame_quality.pt"),
                    str(support.ROOT / "handler" / "models" / "frame_quality.yaml")],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    ts = TorchServe(tmp_path_factory.mktemp("leaky_torchserve"), store).start()
    yield ts
    ts.stop()


def test_the_same_check_catches_a_leaking_handler(leaky_server):
    statuses, floors = soak(leaky_server, 6)  # it keeps 24 x 5.5 MB of bodies a round
    assert set(statuses) == {200}
    with pytest.raises(AssertionError, match="worker memory grew"):
        assert_bounded_growth(floors, LIMIT_MB)
