"""Shared fixtures (dataset paths, small catalogs, an offline shared embedding cache) and the skip policy.

`--fail-on-skip` (used by .ci/run) makes the run fail when a test skipped, unless the skip matches
an entry of tests/skips_allowed.txt, each entry with its reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The embedding model ships in a package; nothing may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from redis_server import RedisServer

from toolsearch import Tool, load_tools

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"
SKIPS_ALLOWED = Path(__file__).with_name("skips_allowed.txt")


# --- skip policy --------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fail-on-skip",
        action="store_true",
        help="fail the run when a test skips, unless the skip is listed in tests/skips_allowed.txt",
    )


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


_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append(f"{report.nodeid}: {reason}")


def disallowed_skips(skipped: list[str], entries: list[str]) -> list[str]:
    return [s for s in skipped if not any(entry in s for entry in entries)]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not session.config.getoption("--fail-on-skip"):
        return
    bad = disallowed_skips(_skipped, allowed_skips(SKIPS_ALLOWED.read_text(encoding="utf-8")))
    if bad:
        session.config.stash[_BAD_SKIPS] = bad
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BAD_SKIPS = pytest.StashKey[list[str]]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    bad = config.stash.get(_BAD_SKIPS, [])
    if bad:
        terminalreporter.section("skips not allowed (tests/skips_allowed.txt)", red=True)
        for line in bad:
            terminalreporter.line(line)


@pytest.fixture(scope="session", autouse=True)
def _embedding_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    # One cache for the whole run: the model embeds each text once across tests.
    os.environ["TOOLSEARCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("toolsearch-cache"))


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    if not DATASETS.is_dir():
        # CI runs beside ../shared/datasets; a missing folder is a broken setup, not a reason to skip
        pytest.fail(f"shared datasets not found at {DATASETS}: clone the repository beside shared/datasets")
    return DATASETS


@pytest.fixture(scope="session")
def bfcl_tools(datasets_dir: Path) -> list[Tool]:
    return load_tools(datasets_dir / "bfcl" / "tools.jsonl")


@pytest.fixture(scope="session")
def demo_tools() -> list[Tool]:
    return load_tools(ROOT / "toolsearch" / "data" / "demo_catalog.jsonl")


@pytest.fixture()
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real redis-server of its own on a free port, stopped after the test."""
    server = RedisServer(tmp_path).start()
    try:
        yield server
    finally:
        server.stop()
