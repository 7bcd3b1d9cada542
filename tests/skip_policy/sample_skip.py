"""A module that skips on purpose, run only by tests/test_skip_policy.py (its name is not collected)."""

import pytest


def test_runs() -> None:
    assert True


def test_skips() -> None:
    pytest.skip("sample reason for the skip policy test")
