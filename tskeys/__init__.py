"""TorchServe's token keys: the key a producer sends (re-read once when refused), and the rotator.

Built on `tsutil`, whose `tsutil.keyfile` is the one reader of `key_file.json`; its names are
re-exported here.
"""

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
