"""The house rule for the bridge (DESIGN.md section 11): `ingest` imports `tskeys`/`tsutil` and
the handler's ground floor at most, never `loadgen`; and nothing of the project imports `ingest`."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import ROOT

PROJECT = ("handler", "loadgen", "autotune", "tskeys", "tsutil", "ingest", "bench")
ALLOWED = {"ingest", "tskeys", "tsutil", "handler.errors", "handler.formats"}


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {name for name in found if name.split(".")[0] in PROJECT}


def test_ingest_imports_only_the_key_tools_and_the_handlers_ground_floor():
    for path in sorted((ROOT / "ingest").glob("*.py")):
        for name in _imports(path):
            assert any(name == a or name.startswith(a + ".") for a in ALLOWED), f"{path.name} imports {name}"


#: Measure the bridge: through its command line, and its tracker's cost a frame and accuracy in
#: process, against other trackers.
BENCHES = {ROOT / "bench" / name for name in ("ingest.py", "mqtt.py", "tracker_accuracy.py", "tracker_choice.py", "web.py")}


def test_nothing_of_the_project_imports_ingest():
    for package in PROJECT:
        if package == "ingest":
            continue
        for path in sorted((ROOT / package).rglob("*.py")):
            if path in BENCHES:
                continue
            assert not any(n.split(".")[0] == "ingest" for n in _imports(path)), f"{path} imports ingest"
