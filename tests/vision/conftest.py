import importlib.util

import pytest

if importlib.util.find_spec("torchvision") is None:
    raise pytest.UsageError("tests/vision needs torchvision beside the torch that users get: run scripts/vision.sh "
                            "(./test.sh does), which makes .venv-vision")
