"""The skip policy of .ci/run: with --fail-on-skip a skip fails the run unless tests/skips_allowed.txt lists it; and
a read beside the clone fails the run, also where .ci/run spreads the tests over pytest-xdist workers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from skip_rules import SKIPS_ALLOWED, allowed_skips, disallowed_skips

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = "tests/skip_policy/sample_skip.py"
BESIDE = "tests/skip_policy/sample_beside.py"


def _pytest(*args: str, sample: str = SAMPLE) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", sample, *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_a_skip_fails_the_run_with_fail_on_skip(workers: list[str]) -> None:
    proc = _pytest("--fail-on-skip", *workers)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "skips not allowed" in proc.stdout
    assert "sample_skip.py::test_skips: Skipped: sample reason for the skip policy test" in proc.stdout
    assert "1 passed, 1 skipped" in proc.stdout  # the usual summary line is still printed


def test_an_allowed_skip_needs_its_reason() -> None:
    assert allowed_skips("# comment\n\nsample reason  # the sample skips on purpose\n") == ["sample reason"]
    with pytest.raises(pytest.UsageError, match="needs `text  # reason`"):
        allowed_skips("sample reason\n")
    skipped = ["a.py::test_x: sample reason", "b.py::test_y: other"]
    assert disallowed_skips(skipped, ["sample reason"]) == ["b.py::test_y: other"]


def test_the_repository_allows_no_skip() -> None:
    assert allowed_skips(SKIPS_ALLOWED.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_a_read_beside_the_clone_fails_the_run(workers: list[str]) -> None:
    # the test itself passes (it caught the refusal): the session's end must still fail it, a worker's included
    proc = _pytest(*workers, sample=BESIDE)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "reads outside the clone" in proc.stdout and "datasets/sample.jsonl" in proc.stdout, proc.stdout
    assert "1 passed" in proc.stdout
