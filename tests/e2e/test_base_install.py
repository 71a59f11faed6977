"""The base install alone: a fresh virtual environment with torch and `pip install .` of a clean
copy of the checkout, no extra (pyproject.toml's `dependencies`).

It holds none of the extras' requirements, imports every module of `handler/` from its own
site-packages, packs the README's archive and serves it in a real TorchServe whose worker runs in
it, answering the README's curl; each command that needs an extra says which, in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests import support
from tsutil.server import TorchServe

PYPROJECT = tomllib.loads((support.ROOT / "pyproject.toml").read_text())["project"]
SHOWN = "http://127.0.0.1:8080"  # the address the README shows (offset 0)


@dataclass(frozen=True)
class Venv:
    root: Path
    source: Path  # the copy installed from

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def python(self, code: str, cwd: Path) -> str:
        done = subprocess.run([self.bin / "python", "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Venv:
    top = tmp_path_factory.mktemp("base_install")
    venv = Venv(top / "venv", support.copy_checkout(top / "src"))
    subprocess.run([sys.executable, "-m", "venv", venv.root], check=True)
    pip = [venv.bin / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    for what in (os.environ.get("TORCH_SPEC", "torch==2.13.0"), str(venv.source)):  # as scripts/setup.sh
        done = subprocess.run([*pip, what], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
    return venv


def _requirements(extra: str) -> set[str]:
    """Every distribution `extra` names, through the extras it includes (test includes ingest)."""
    names: set[str] = set()
    for requirement in map(Requirement, PYPROJECT["optional-dependencies"][extra]):
        if canonicalize_name(requirement.name) == PYPROJECT["name"]:
            names |= {name for inner in requirement.extras for name in _requirements(inner)}
        else:
            names.add(canonicalize_name(requirement.name))
    return names


def test_it_holds_the_base_dependencies_and_none_of_the_extras(base, tmp_path):
    installed = {canonicalize_name(name) for name in json.loads(base.python(
        "import json, importlib.metadata as m; print(json.dumps([d.metadata['Name'] for d in m.distributions()]))",
        tmp_path))}
    assert {canonicalize_name(Requirement(r).name) for r in PYPROJECT["dependencies"]} <= installed
    for extra in PYPROJECT["optional-dependencies"]:
        assert _requirements(extra) & installed == set(), f"the base install holds {extra}'s requirements"


def test_every_module_of_the_handler_imports_from_its_site_packages(base, tmp_path):
    modules = sorted(".".join(path.relative_to(base.source).with_suffix("").parts).removesuffix(".__init__")
                     for path in (base.source / "handler").rglob("*.py"))
    assert len(modules) > 30 and "handler.service" in modules and "handler.doors.oip" in modules
    files = json.loads(base.python(f"import importlib, json; print(json.dumps([importlib.import_module(m).__file__ "
                                   f"for m in {modules!r}]))", tmp_path))
    site = str(base.root / "lib")
    assert [f for f in files if not f.startswith(site)] == []


def test_the_readme_archive_packs_and_serves_and_answers_the_readme_curl(base, tmp_path, monkeypatch):
    model = Path(base.python("from pathlib import Path; from handler.models.build import build; "
                             f"print(build('frame_quality', Path({str(tmp_path / 'build')!r})))", tmp_path).strip())
    env = {**os.environ, "PATH": f"{base.bin}:{os.environ['PATH']}", "PYTHON": str(base.bin / "python"),
           "MODEL_STORE": str(tmp_path / "store")}
    packed = subprocess.run(["./archive.sh", "frame_quality", model, "handler/models/frame_quality.yaml"],
                            cwd=base.source, env=env, capture_output=True, text=True, timeout=300)
    assert packed.returncode == 0, packed.stderr[-3000:]

    monkeypatch.setenv("PATH", env["PATH"])  # `torchserve` is the base install's
    server = TorchServe(tmp_path / "ts", {"frame_quality": tmp_path / "store" / "frame_quality.mar"},
                        config=base.source / "config.properties", overlays=["load_models=frame_quality.mar\n"])
    with server:
        [pid] = server.worker_pids("frame_quality")
        worker = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        assert worker.startswith(str(base.root)), worker  # the worker runs the base install's python

        curl = support.fenced_block(support.ROOT / "README.md", "it is this one", "bash").strip()
        shown = json.loads(support.fenced_block(support.ROOT / "README.md", "it is this one", "json"))
        answer = subprocess.run(["bash", "-c", curl.replace(SHOWN, server.inference_url)
                                 .replace("@data/", f"@{support.ROOT}/data/") + " -sS -w '\\n%{http_code}'"],
                                cwd=server.workdir, capture_output=True, text=True, timeout=120)
    body, status = answer.stdout.rsplit("\n", 1)
    assert status == "200", answer.stdout + answer.stderr
    got = json.loads(body)
    assert got.keys() == shown.keys() and got["frames"][0].keys() == shown["frames"][0].keys()
    assert (got["frames"][0]["width"], got["frames"][0]["height"]) == (451, 300)
    support.assert_quality(got["frames"][0]["outputs"], support.decoded((support.IMAGES / "chelsea.png").read_bytes()))


@pytest.mark.parametrize(("command", "name", "extra"), [
    (["video-ingest", "--help"], "video-ingest", "ingest"), (["video-loadgen", "--help"], "video-loadgen", "loadgen"),
    (["video-autotune", "--help"], "video-autotune", "autotune"), (["video-ray", "--help"], "video-ray", "ray"),
    (["python", "-m", "loadgen", "--help"], "video-loadgen", "loadgen"),
    (["python", "-m", "rayserve", "stop"], "video-ray", "ray")])
def test_a_command_without_its_extra_says_in_one_line_which_to_install(base, tmp_path, command, name, extra):
    done = subprocess.run([base.bin / command[0], *command[1:]], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stdout) == (1, "")
    [line] = done.stderr.splitlines()
    assert line.startswith(f"{name} needs the '{extra}' extra (")
    assert line.endswith(f"not installed): pip install 'video-frame-handler[{extra}]'")


def test_video_keys_runs_on_the_base_install(base, tmp_path):
    done = subprocess.run([base.bin / "video-keys", "--help"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "usage: video-keys" in done.stdout, done.stderr
