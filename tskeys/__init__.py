"""TorchServe's token keys: the one reader of `key_file.json`, and the rotator that keeps it valid."""

from tskeys.keyfile import (
    Key,
    KeyEntry,
    KeyFile,
    KeyFileError,
    is_grpc_invalid_key,
    is_invalid_key,
    read_key,
    read_key_file,
)

__all__ = ["Key", "KeyEntry", "KeyFile", "KeyFileError", "is_grpc_invalid_key", "is_invalid_key",
           "read_key", "read_key_file"]
