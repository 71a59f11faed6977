"""The house rule for the bridge (DESIGN.md section 11): `ingest` imports `tskeys`/`tsutil` and
the handler's ground floor at most, never `loadgen`; nothing of the project imports `ingest`; and
inside it, five rooms in a fixed order (web > record > analytics > sinks > cameras) under the CLI
and the camera loop, with no import circle."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import ROOT

PROJECT = ("handler", "loadgen", "autotune", "tskeys", "tsutil", "ingest", "bench")
ALLOWED = {"ingest", "tskeys", "tsutil", "handler.errors", "handler.formats", "handler.motion"}


def _imports(path: Path) -> set[str]:
    """The project's modules `path` imports when it runs (not those imported for type checking only)."""
    found = set()
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and getattr(node.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {_module(f"{node.module}.{alias.name}") or node.module for alias in node.names}
    return {name for name in found if name.split(".")[0] in PROJECT}


def test_ingest_imports_only_the_key_tools_and_the_handlers_ground_floor():
    for path in sorted((ROOT / "ingest").rglob("*.py")):
        for name in _imports(path):
            assert any(name == a or name.startswith(a + ".") for a in ALLOWED), f"{path.name} imports {name}"


#: The one bench that measures a part of the bridge in its own process (the recorder, issue 50) rather
#: than the `video-ingest` command: it sits above the bridge, as the tests do.
MEASURES_INGEST = {"bench/record.py"}


def test_nothing_of_the_project_imports_ingest():
    for package in PROJECT:
        if package == "ingest":
            continue
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.relative_to(ROOT).as_posix() in MEASURES_INGEST:
                continue
            assert not any(n.split(".")[0] == "ingest" for n in _imports(path)), f"{path} imports ingest"


#: The rooms, lowest first: a room imports only rooms before it here.
ROOMS = ("cameras", "sinks", "analytics", "record", "web")
#: What a room may take from the top: the camera list and the services handed to every camera.
TOP_FOR_ROOMS = {"ingest.config", "ingest.shared"}


def _module(dotted: str) -> str | None:
    path = ROOT / Path(*dotted.split("."))
    return dotted if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file() else None


def _graph() -> dict[str, set[str]]:
    modules = {}
    for path in sorted((ROOT / "ingest").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = {n for n in _imports(path) if n.startswith("ingest.")}
    return modules


def test_the_bridge_has_five_rooms_and_a_room_imports_only_rooms_below_it_and_the_tops_config():
    graph = _graph()
    assert {name.split(".")[1] for name in graph if name.count(".") == 2} == set(ROOMS)
    top = [name for name in graph if name.count(".") == 1 and name.split(".")[1] not in ROOMS]
    assert len(top) <= 6, f"the top holds the CLI, config and the loop, not {top}"
    for name, imported in graph.items():
        room = name.split(".")[1] if name.count(".") == 2 else None
        if room is None:
            continue
        for other in imported:
            if other.count(".") == 1:
                assert other in TOP_FOR_ROOMS, f"{name} reaches up to {other}"
            else:
                there = other.split(".")[1]
                assert ROOMS.index(there) <= ROOMS.index(room), f"{name} ({room}) imports {other} ({there})"


def test_no_import_circle_in_the_bridge():
    graph, done, path = _graph(), set(), []

    def visit(name: str) -> None:
        assert name not in path, f"import circle: {' -> '.join(path[path.index(name):] + [name])}"
        if name in done:
            return
        path.append(name)
        for other in graph.get(name, ()):
            visit(other)
        path.pop()
        done.add(name)

    for name in graph:
        visit(name)
