"""The session reads nothing beside the clone (tests/clone_only.py): a read there is refused and recorded."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import clone_only
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def checker() -> clone_only.CloneOnly:
    active = clone_only.active()
    assert active is not None, "tests/conftest.py installs the hook before any test runs"
    assert not active.refused, "a read beside the clone happened before this test"
    return active


def test_a_read_beside_the_clone_is_refused_and_recorded(checker: clone_only.CloneOnly) -> None:
    beside = ROOT.parent / "datasets" / "bfcl" / "tools.jsonl"  # a data set in a folder beside the clone
    with pytest.raises(PermissionError, match=r"reads only the clone .* fresh clone has nothing beside it"):
        beside.read_text()
    # caught and ignored by the code that tried, it is still on record: the session fails on it
    with contextlib.suppress(OSError):
        os.listdir(ROOT.parent)
    refused = checker.take_refusals()
    assert refused == [f"open {str(beside)!r}", f"os.listdir {str(ROOT.parent)!r}"]


def test_the_clone_the_venv_temp_and_system_folders_stay_readable(checker: clone_only.CloneOnly) -> None:
    assert (ROOT / "pyproject.toml").read_text()
    assert Path(os.__file__).read_text(encoding="utf-8")  # the standard library
    assert Path(pytest.__file__).read_text(encoding="utf-8")  # the venv's packages
    with tempfile.NamedTemporaryFile("w+") as handle:
        handle.write("x")
    assert Path("/etc/hostname").exists() and checker.allows("/usr/lib")
    assert not checker.allows(ROOT.parent / "anything") and not checker.refused


def test_a_subprocess_handed_a_path_beside_the_clone_is_refused(checker: clone_only.CloneOnly) -> None:
    beside = str(ROOT.parent / "datasets")
    with pytest.raises(PermissionError):
        subprocess.run([sys.executable, "-c", "pass", f"--data={beside}"], check=False)
    assert checker.take_refusals() == [f"a subprocess handed {beside!r}"]
    # an argument that only looks like a path elsewhere is not a path beside the clone: the process starts
    done = subprocess.run([sys.executable, "-c", "import sys; print(sys.argv[1])", "/mcp"], capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "/mcp" and not checker.refused


def test_the_processes_tests_start_are_not_audited(tmp_path: Path) -> None:
    """The hook lives in the test process only: a child reads what it needs (its own interpreter, site-packages)."""
    code = "import sys, toolsearch; print(len(sys.modules) > 10)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          check=True)
    assert done.stdout.strip() == "True"


def test_beside_the_clone_is_refused_even_inside_an_allowed_folder(tmp_path: Path) -> None:
    """A clone under the temp folder (as a fresh-clone check makes one) still may not read its neighbours."""
    clone = tmp_path / "work" / "clone"
    (clone / "tests").mkdir(parents=True)
    (tmp_path / "work" / "data").mkdir()
    checker = clone_only.CloneOnly(clone)  # not installed: the rules alone
    assert checker.allows(clone / "tests" / "x.py") and checker.allows(tmp_path / "elsewhere")
    assert not checker.allows(tmp_path / "work" / "data" / "data.jsonl")
    assert checker.is_beside(str(tmp_path / "work" / "data")) and not checker.is_beside(str(clone / "x"))
    # directly inside the temp folder, the temp folder is the clone's parent: its other entries stay readable
    assert clone_only.CloneOnly(Path(tempfile.gettempdir()) / "clone").beside is None
