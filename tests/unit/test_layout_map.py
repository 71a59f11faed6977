"""docs/layout.md names every source folder and file of the repository, and only files that exist.

A source file is every file git tracks (or would track: untracked files that `.gitignore` does not
exclude), except under `data/`, `model_store/`, `docs/` and `deploy/schemas/`. Without git (a
tarball, a copy of the checkout), the tree is walked with the same exclusions and the ignored
paths of `.gitignore` left out. The map lists each one on a line that starts with `- ` and the
path in backticks, then what it holds; folder paths end in `/`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

from tests.support import ROOT

MAP = ROOT / "docs" / "layout.md"
#: Folders whose files the map does not list (data, built archives, the docs themselves, vendored schemas).
EXCLUDED = ("data/", "model_store/", "docs/", "deploy/schemas/")
#: What the walk leaves out when git is not there: the .gitignore entries, and git's own folder.
WALK_SKIPPED_DIRS = {".git", ".venv", ".venv-vision", ".whl", "__pycache__", ".pytest_cache", ".hypothesis", "build", "logs",
                     ".mypy_cache", ".ruff_cache"}
WALK_SKIPPED_FILES = (".git", "*.pyc", "key_file.json", "model_store/*.mar")  # .git: a worktree's link file
ENTRY = re.compile(r"^- `([^`]+)`")


def _git_files(root: Path) -> list[str] | None:
    """Paths git tracks or would track under `root`, or None when git cannot say."""
    if shutil.which("git") is None:
        return None
    done = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          capture_output=True, timeout=60, check=False)
    if done.returncode != 0:
        return None
    return [p for p in done.stdout.decode().split("\0") if p]


def _walked_files(root: Path) -> list[str]:
    """Paths under `root` by walking it, leaving out what `.gitignore` leaves out."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in WALK_SKIPPED_DIRS and not d.endswith(".egg-info")]
        for name in names:
            relative = (Path(folder) / name).relative_to(root).as_posix()
            if not any(PurePosixPath(relative).match(pattern) for pattern in WALK_SKIPPED_FILES):
                found.append(relative)
    return found


def source_files(root: Path = ROOT) -> set[str]:
    """Every source file of the repository, as a POSIX path relative to `root`."""
    listed = _git_files(root)
    if listed is None:
        listed = _walked_files(root)
    return {p for p in listed if not p.startswith(EXCLUDED) and (root / p).is_file()}


def source_folders(files: set[str]) -> set[str]:
    """Every folder holding a source file, at any depth, as `path/` (the top level not counted)."""
    return {parent.as_posix() + "/" for f in files for parent in PurePosixPath(f).parents if parent.parts}


def map_entries(text: str) -> set[str]:
    """The paths the map names: the backticked path opening each `- ` line."""
    return {m[1] for line in text.splitlines() if (m := ENTRY.match(line))}


def test_the_map_names_every_source_file_and_folder_and_only_files_that_exist():
    files = source_files()
    named = map_entries(MAP.read_text())
    unmapped = sorted((files | source_folders(files)) - named)
    stale = sorted(p for p in named if not p.endswith("/") and p not in files)
    problems = []
    if unmapped:
        problems.append("docs/layout.md has no line for " + ", ".join(unmapped)
                        + " (add a line '- `path`: what it holds' under its folder's heading)")
    if stale:
        problems.append("docs/layout.md names files that do not exist: " + ", ".join(stale)
                        + " (remove or rename their lines)")
    assert not problems, "\n".join(problems)


def test_the_walk_finds_what_git_finds():
    listed = _git_files(ROOT)
    if listed is None:
        return  # nothing to compare against
    walked = {p for p in _walked_files(ROOT) if not p.startswith(EXCLUDED)}
    tracked = {p for p in listed if not p.startswith(EXCLUDED) and (ROOT / p).is_file()}
    assert tracked == walked, f"without git the walk misses {sorted(tracked - walked)}, adds {sorted(walked - tracked)}"


def test_the_parts_see_folders_and_entries(tmp_path):
    assert source_folders({"a/b/c.py", "d.sh"}) == {"a/", "a/b/"}
    assert map_entries("- `a/`: x\n- `a/b.py`: y\n  - `not/an/entry`\ntext `c.py`\n") == {"a/", "a/b.py"}
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "m.py").write_text("")
    (tmp_path / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_text("")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.png").write_text("")
    assert source_files(tmp_path) == {"pkg/m.py"}  # not a git checkout: walked
