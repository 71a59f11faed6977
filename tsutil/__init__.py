"""TorchServe plumbing shared by serve.sh, the tests, the bench and the tools (not in the .mar).

The floor the other tools stand on: reading `config.properties` and `key_file.json`, Prometheus
text, starting TorchServe. It imports none of them (tests/unit/test_tool_imports.py).
"""
