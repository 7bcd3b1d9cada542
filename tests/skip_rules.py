"""The skip policy's rules: tests/skips_allowed.txt read, and the skips it does not allow (conftest applies them).

A module of its own, not conftest: test modules import it by name, and `conftest` names whichever conftest.py
pytest imported last (tests/backends has one too).
"""

from __future__ import annotations

from pathlib import Path

import pytest

SKIPS_ALLOWED = Path(__file__).with_name("skips_allowed.txt")


def allowed_skips(text: str) -> list[str]:
    """The entries of a skips_allowed.txt; an entry without its `  # reason` is refused."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        entry, sep, reason = line.partition("  # ")
        if not sep or not reason.strip() or not entry.strip():
            raise pytest.UsageError(f"{SKIPS_ALLOWED}:{number}: an allowed skip needs `text  # reason`: {line!r}")
        entries.append(entry.strip())
    return entries


def disallowed_skips(skipped: list[str], entries: list[str]) -> list[str]:
    return [s for s in skipped if not any(entry in s for entry in entries)]
