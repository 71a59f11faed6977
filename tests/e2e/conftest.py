import shutil

import pytest

from tests.e2e.server import TorchServe, build_archives


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


@pytest.fixture(scope="module")
def server(archives, tmp_path_factory):
    ts = TorchServe(tmp_path_factory.mktemp("torchserve"), archives).start()
    yield ts
    ts.stop()
