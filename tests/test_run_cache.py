"""The run's embedding cache (tests/conftest.py) is one folder for every pytest-xdist worker of a run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_workers_of_a_run_share_one_embedding_cache(tmp_path: Path) -> None:
    # `--dist each`: both workers run the test, so both set up the session's cache
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "each", "-p", "no:cacheprovider", "--basetemp",
         str(run), "tests/test_docs.py::test_docs_exist"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 passed" in proc.stdout
    assert (run / "toolsearch-cache").is_dir()
    workers = [p for p in run.iterdir() if p.is_dir() and p.name != "toolsearch-cache"]
    assert len(workers) == 2, workers  # each worker's own temp folder, holding no cache of its own
    assert not [p for w in workers for p in w.glob("toolsearch-cache*")]
