"""A stdio gateway whose client leaves while it writes an upstream's tool-list change to the shared catalog (again, as
its resync after a failed write, or first) exits, however long that write would wait: the write is one transaction, so
the catalog stays as it was.

A real `toolsearch mcp serve --store postgresql://...` over a real Postgres (tests/pg_server.py), spoken to in raw
JSON-RPC. The test holds the catalog's build lock as a busy builder does (running a statement all along), so a write
of the gateway waits for it however long it runs. No timing is asserted: the exit's bound is the test's timeout.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest
from mcp_servers import gateway_env, toy, wait_until, write_config
from pg_server import PostgresServer, pg_server  # noqa: F401  (a fixture)
from test_gateway_stdio_start import HELLO, Stdio

from toolsearch.pg.index import _LOCK_SPACE, _advisory_lock
from toolsearch.pg.schema import tools_table

pytestmark = pytest.mark.slow

class _BusyBuilder:
    """Another process's build of the catalog, as its build lock shows it: held, and busy (running a statement) until
    `end` cuts its session."""

    def __init__(self, dsn: str, catalog: str) -> None:
        self.dsn = dsn
        self.conn = psycopg.connect(dsn, application_name="busy builder of the test", autocommit=True)
        self.pid = self.conn.info.backend_pid
        key = _advisory_lock(None, catalog).key  # type: ignore[arg-type]
        self.conn.execute("SELECT pg_advisory_lock(%s, %s)", (_LOCK_SPACE, key))
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def _work(self) -> None:
        with contextlib.suppress(psycopg.Error):  # its session is ended by `end`
            self.conn.execute("SELECT pg_sleep(600)")

    def end(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (self.pid,))
        self.thread.join(30)
        self.conn.close()


def _lock_sessions(dsn: str, gateway_pid: int) -> list[int]:
    """The Postgres sessions of the gateway's build lock connections (one while a write of it waits for its turn)."""
    name = f"toolsearch build lock ({socket.gethostname()}, pid {gateway_pid})"
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,)).fetchall()
    return [row[0] for row in rows]


def _stored(dsn: str, catalog: str) -> tuple[int, set[str]]:
    """The catalog's version and tool names as the store holds them now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute("SELECT id, version FROM toolsearch_catalogs WHERE name = %s", (catalog,)).fetchone()
        assert found is not None
        rows = conn.execute(f"SELECT name FROM {tools_table(found[0])}").fetchall()
    return found[1], {row[0] for row in rows}


@pytest.mark.parametrize("write", ["resync", "first"])
def test_a_stdio_gateway_exits_while_its_catalog_write_waits_for_the_store(
    write: str, pg_server: PostgresServer, tmp_path: Path  # noqa: F811
) -> None:
    # Before: the exit cancelled the write, but it ran on a worker thread that a cancel waits for, and the interpreter
    # waits for at its end too: the gateway stayed up, its client gone, for as long as the busy builder held the lock
    # (here ten minutes).
    dsn, catalog = pg_server.dsn(), f"exit-{write}"
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    argv = [sys.executable, "-m", "toolsearch", "mcp", "serve", "--config", str(config), "--store", dsn,
            "--catalog", catalog]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=gateway_env())
    gateway = Stdio(proc)
    builder: _BusyBuilder | None = None
    try:
        assert "result" in gateway.ask("initialize", HELLO), gateway.stderr
        gateway.tell("notifications/initialized")
        before = _stored(dsn, catalog)
        assert "toy__echo" in before[1] and "toy__quokka_census" not in before[1], before
        builder = _BusyBuilder(dsn, catalog)
        grow = {"name": "toy__grow", "arguments": {"name": "quokka_census"}}
        grown = gateway.ask("tools/call", {"name": "call_tool", "arguments": grow})
        assert not grown["result"].get("isError"), grown
        # its sync after the change waits for the builder
        assert wait_until(lambda: bool(_lock_sessions(dsn, proc.pid)), timeout=60), gateway.stderr
        if write == "resync":  # its session cut, the sync fails, and the resync's write waits for the builder in turn
            [first] = _lock_sessions(dsn, proc.pid)
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (first,))
            assert wait_until(lambda: "the shared catalog was not brought to it" in gateway.stderr, timeout=60)
            assert "Trying again within" in gateway.stderr, gateway.stderr
            assert wait_until(lambda: any(p != first for p in _lock_sessions(dsn, proc.pid)), timeout=60), \
                gateway.stderr

        assert proc.stdin is not None
        proc.stdin.close()  # the client leaves
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, f"the gateway did not exit while its {write} write waited for the store:\n{gateway.stderr}"
        assert wait_until(lambda: not _lock_sessions(dsn, proc.pid), timeout=30)  # its lock connection went with it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        gateway.reader.join(10)
        if builder is not None:
            builder.end()
    # the abandoned write was one transaction that never began: the catalog is as the gateway's start wrote it
    assert _stored(dsn, catalog) == before
