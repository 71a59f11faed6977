"""TorchServe's token keys: reading `key_file.json` and keeping its inference key alive."""
