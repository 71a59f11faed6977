import shutil

import pytest

from tests.e2e.server import TorchServe, build_archives
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
