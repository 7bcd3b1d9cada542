"""`toolsearch list` and `info` show an index with a file this user may not read as unreadable, and list the rest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from capabilities import CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, as_any_user

from toolsearch import IndexStore, Tool

TOOLS = [Tool("finance_get_invoice", "Get an invoice by its number."), Tool("weather_now", "Current weather.")]


def toolsearch(*argv: str) -> subprocess.CompletedProcess[str]:
    """The real command, in a process that may not read what its mode forbids, whoever runs the tests."""
    return subprocess.run([sys.executable, "-m", "toolsearch", *argv], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, preexec_fn=as_any_user(CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH))


@pytest.mark.parametrize(("hidden", "named"), [
    ("tools.jsonl", "file tools.jsonl cannot be read (Permission denied)"),  # a file its owner keeps to itself
    ("backend", "file backend/"),  # a folder of it this user may not search
])
def test_an_index_this_user_may_not_read_is_listed_as_unreadable_beside_the_others(
    tmp_path: Path, hidden: str, named: str
) -> None:
    root = tmp_path / "r"
    store = IndexStore(root)
    for name in ("good", "private"):
        store.build(TOOLS, backend="bm25", name=name)
    path = (root / "private").resolve() / hidden
    path.chmod(0)
    try:
        listed = toolsearch("list", "--json", "--root", str(root))
        table = toolsearch("list", "--root", str(root))
        info = toolsearch("info", "private", "--root", str(root))
        query = toolsearch("query", "private", "invoice", "--root", str(root))
        good = toolsearch("query", "good", "invoice", "-k", "1", "--root", str(root))
    finally:
        path.chmod(0o755 if path.is_dir() else 0o644)
    # before: list and info failed whole (exit 1, "…/tools.jsonl: Permission denied"), hiding the good index
    assert listed.returncode == 0, listed.stderr
    entries = {e["name"]: e for e in json.loads(listed.stdout)["indexes"]}
    assert entries["good"]["health"] == "ok"
    health = entries["private"]["health"]
    assert health.startswith(f"unreadable: {root / 'private'}: {named}"), health
    assert "this user may not read it" in health and "rebuild" not in health
    assert table.returncode == 0, table.stderr
    rows = {line.split()[0]: line for line in table.stdout.splitlines()[1:3]}
    assert rows["good"].endswith(" ok") and rows["private"].endswith("unreadable (see below)")
    assert f"private: {health}" in table.stdout
    assert info.returncode == 0 and f"health        {health}" in info.stdout, info.stderr
    assert query.returncode == 1 and named in query.stderr and "may not read" in query.stderr, query.stderr
    assert good.returncode == 0 and "finance_get_invoice" in good.stdout, good.stderr


def test_a_damaged_index_is_still_damaged(tmp_path: Path) -> None:
    root = tmp_path / "r"
    IndexStore(root).build(TOOLS, backend="regex", name="broken")
    stored = (root / "broken").resolve() / "tools.jsonl"
    stored.unlink()
    stored.mkdir()  # a folder where a file was: damage, not a permission
    listed = toolsearch("list", "--json", "--root", str(root))
    assert listed.returncode == 0, listed.stderr
    (entry,) = json.loads(listed.stdout)["indexes"]
    assert entry["health"].startswith("damaged: ") and "tools.jsonl is missing; rebuild" in entry["health"]
