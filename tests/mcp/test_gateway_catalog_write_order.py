"""A catalog write whose caller is cancelled (an upstream's connection ends while its tool-list change is written to the
shared catalog) goes on, but the next write waits for it to end: two writes of one gateway never run at once, so the
newest catalog lands last; and when the cancelled write fails, that is said and written again, as any failed write.

A real gateway over a real Postgres (tests/pg_server.py) and the toy server. Its catalog is `_HeldIndex`, the project's
`PostgresIndex` whose next `sync` first waits for the test (as a write waits behind another worker's build lock) and
which counts the syncs running at once. The cancel is the test's, of a `_sync_catalog` it started.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Collection, Iterable
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp_servers import toy, wait_until
from pg_server import PostgresServer, own_pg_server, pg_server, stored_names, word_embedder  # noqa: F401  (fixtures)

from toolsearch import Tool
from toolsearch.catalog import Catalog
from toolsearch.mcp import GatewaySettings, WorkerSettings
from toolsearch.mcp.gateway import Gateway, shared_catalog
from toolsearch.mcp.source import MCPToolSource
from toolsearch.pg import PostgresIndex

pytestmark = pytest.mark.slow

GROWN = "toy__quokka_census"  # the tool toy__grow adds to the toy server's list


class _HeldIndex(PostgresIndex):
    """A shared catalog in Postgres whose next `sync` waits for `release` (set `hold_next` first), counting the syncs
    that run at once (`most`) and those that ended (`ended`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold_next = False
        self.release = threading.Event()
        self.held = threading.Event()  # the held sync waits
        self.running = self.most = self.ended = 0
        self._count = threading.Lock()

    def sync(self, tools: Iterable[Tool] | Catalog, *, keep_namespaces: Collection[str] = ()) -> None:
        with self._count:
            self.running += 1
            self.most = max(self.most, self.running)
            hold, self.hold_next = self.hold_next, False
        try:
            if hold:
                self.held.set()
                self.release.wait(60)
            super().sync(tools, keep_namespaces=keep_namespaces)
        finally:
            with self._count:
                self.running -= 1
                self.ended += 1


def _settings(dsn: str, catalog: str) -> GatewaySettings:
    options = {"embedder": word_embedder(), "cache": False, "timeout": 1.0, "connect_timeout": 1.0}
    workers = WorkerSettings(store=dsn, catalog=catalog, catalog_poll=0.2)
    return GatewaySettings(backend="postgres", backend_options=options, workers=workers)


def _open(source: MCPToolSource, settings: GatewaySettings) -> _HeldIndex:
    """The catalog, opened with the source's tools as a worker's start opens it (`startup._store_index`)."""
    workers = settings.workers
    catalog, unlisted = shared_catalog(source, workers.catalog)
    index = _HeldIndex.open(workers.store, workers.catalog, catalog, poll=workers.catalog_poll,
                            keep_namespaces=unlisted, **dict(settings.backend_options))
    assert isinstance(index, _HeldIndex)
    return index


async def _until(condition: Callable[[], bool], timeout: float = 60) -> None:
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.05)


async def _cancelled_while_held(gateway: Gateway, index: _HeldIndex, tg: Any) -> None:
    """A `_sync_catalog` of the gateway, cancelled while its write waits for `index.release`."""
    index.hold_next = True
    scope = anyio.CancelScope()

    async def write() -> None:
        with scope:
            await gateway._sync_catalog("toy")

    tg.start_soon(write)
    await _until(index.held.is_set)
    scope.cancel()


async def test_the_write_after_a_cancelled_one_waits_for_it_and_the_newest_catalog_lands_last(
    pg_server: PostgresServer,  # noqa: F811
) -> None:
    # Before: the cancel let go of the write slot at once: the next write (the toy's new tool) ran beside the cancelled
    # one, which wrote the older catalog (without it) last, and every worker searched that stale catalog.
    dsn = pg_server.dsn()
    settings = _settings(dsn, "write-order")
    with open(os.devnull, "w") as quiet:
        async with MCPToolSource({"mcpServers": {"toy": toy()}}, errlog=quiet) as source:
            index = await anyio.to_thread.run_sync(_open, source, settings)
            try:
                gateway = await anyio.to_thread.run_sync(lambda: Gateway(source, settings, index=index))
                async with anyio.create_task_group() as tg:
                    await _cancelled_while_held(gateway, index, tg)  # it writes the toy's tools as they are now
                    grown = await source.call_tool("toy__grow", {"name": "quokka_census"})
                    assert not grown.is_error, grown
                    await _until(gateway._sync_lock.locked)  # the gateway's write of the grown list began
                    with anyio.move_on_after(3):  # before: it ran at once, beside the held one; now it waits for it
                        await _until(lambda: index.ended + index.running >= 2)
                    index.release.set()
                    await _until(lambda: index.ended == 2 and not gateway._sync_lock.locked())
                    tg.cancel_scope.cancel()
            finally:
                index.close()
    assert index.most == 1  # one write at a time
    assert GROWN in stored_names(dsn, "write-order")  # the newest catalog is the one stored


async def test_a_cancelled_write_that_fails_is_said_and_written_again(
    own_pg_server: PostgresServer, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    # Before: its failure was dropped with its thread (nothing logged, nothing owed): the shared catalog lacked the
    # toy's new tool until some upstream's tools changed again.
    caplog.set_level(logging.INFO)
    server = own_pg_server
    dsn = server.dsn()
    settings = _settings(dsn, "write-failed")
    with open(os.devnull, "w") as quiet:
        async with MCPToolSource({"mcpServers": {"toy": toy()}}, errlog=quiet) as source:
            index = await anyio.to_thread.run_sync(_open, source, settings)
            try:
                # grown before the gateway listens: the test's own write is the one that carries the change
                grown = await source.call_tool("toy__grow", {"name": "quokka_census"})
                assert not grown.is_error, grown
                await _until(lambda: GROWN in source.catalog())
                gateway = await anyio.to_thread.run_sync(lambda: Gateway(source, settings, index=index))
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: gateway.resync_catalog(first=0.2, longest=1.0))
                    await _cancelled_while_held(gateway, index, tg)
                    await anyio.to_thread.run_sync(server.stop)
                    index.release.set()  # the cancelled write goes on, and fails: Postgres is down

                    def missed() -> bool:
                        return any("the shared catalog was not brought to it" in r.getMessage()
                                   for r in caplog.records if r.levelno == logging.WARNING)

                    assert await anyio.to_thread.run_sync(lambda: wait_until(missed, timeout=60)), caplog.text
                    await anyio.to_thread.run_sync(lambda: server.start())  # Postgres back, on the same port
                    written = await anyio.to_thread.run_sync(
                        lambda: wait_until(lambda: _has(dsn, "write-failed", GROWN), timeout=60, interval=0.3))
                    tg.cancel_scope.cancel()
            finally:
                index.close()
    assert written, caplog.text
    assert any("written again after it failed" in r.getMessage() for r in caplog.records), caplog.text
    assert index.most == 1


def _has(dsn: str, name: str, tool: str) -> bool:
    try:
        return tool in stored_names(dsn, name, timeout=2.0)
    except Exception:  # Postgres still coming up: not yet
        return False
