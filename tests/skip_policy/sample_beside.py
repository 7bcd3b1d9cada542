"""Reads beside the clone on purpose; run only by tests/test_skip_policy.py (its name is not collected)."""

import contextlib
from pathlib import Path


def test_reads_beside_the_clone() -> None:
    beside = Path(__file__).resolve().parents[3] / "datasets" / "sample.jsonl"
    with contextlib.suppress(OSError):  # caught by the code that tried: the session must still fail on it
        beside.read_text()
