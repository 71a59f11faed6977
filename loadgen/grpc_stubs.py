"""Python stubs for TorchServe's gRPC inference API, built from the proto in the installed wheel.

The proto ships inside `ts/frontend/model-server.jar`; building from it (not from a hand copy)
keeps the stubs equal to the server's. They are generated once per proto into a cache folder.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
import tempfile
import zipfile
from pathlib import Path
from types import ModuleType

_PROTO = "proto/inference.proto"


def load() -> tuple[ModuleType, ModuleType]:
    """`(inference_pb2, inference_pb2_grpc)` for the installed torchserve.

    Raises:
        RuntimeError: torchserve, grpcio-tools or googleapis-common-protos is missing, or protoc failed.
    """
    folder = _build()
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return importlib.import_module("inference_pb2"), importlib.import_module("inference_pb2_grpc")


def proto_text() -> bytes:
    """The `inference.proto` inside the installed torchserve wheel's frontend jar."""
    try:
        import ts
    except ImportError:
        raise RuntimeError("torchserve is not installed: pip install torchserve==0.12.0") from None
    jar = Path(ts.__file__).parent / "frontend" / "model-server.jar"
    with zipfile.ZipFile(jar) as archive:
        return archive.read(_PROTO)


def _build() -> Path:
    proto = proto_text()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = cache / "video-frame-handler" / f"grpc-{hashlib.sha256(proto).hexdigest()[:16]}"
    if (folder / "inference_pb2_grpc.py").exists():
        return folder
    try:
        import google.rpc
        import grpc_tools
        from grpc_tools import protoc
    except ImportError:
        raise RuntimeError("gRPC stubs need grpcio-tools and googleapis-common-protos: "
                           "pip install grpcio-tools googleapis-common-protos") from None
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        (Path(tmp) / "inference.proto").write_bytes(proto)
        googleapis = Path(google.rpc.__path__[0]).parent.parent
        well_known = Path(grpc_tools.__file__).parent / "_proto"
        code = protoc.main(["protoc", f"-I{tmp}", f"-I{googleapis}", f"-I{well_known}",
                            f"--python_out={tmp}", f"--grpc_python_out={tmp}", "inference.proto"])
        if code != 0:
            raise RuntimeError(f"protoc failed ({code}) on {_PROTO} from the torchserve wheel")
        (Path(tmp) / "inference.proto").unlink()
        try:
            os.replace(tmp, folder)  # atomic: a concurrent builder finds all files or none
        except OSError:
            if not (folder / "inference_pb2_grpc.py").exists():
                raise
        os.makedirs(tmp, exist_ok=True)  # TemporaryDirectory cleans up what it created
    return folder
