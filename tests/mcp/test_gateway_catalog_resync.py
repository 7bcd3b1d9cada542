"""A gateway worker whose shared catalog (Postgres) could not take an upstream's tool-list change writes it again on
its own once Postgres is back: the catalog every worker searches converges without a further upstream change."""

from __future__ import annotations

import logging
import os

import anyio
import anyio.to_thread
import pytest
from mcp_servers import toy, wait_until
from pg_server import PostgresServer, own_pg_server, stored_names, word_embedder  # noqa: F401  (a fixture)

from toolsearch.mcp import GatewaySettings, WorkerSettings
from toolsearch.mcp.gateway import Gateway
from toolsearch.mcp.source import MCPToolSource
from toolsearch.mcp.startup import _store_index

pytestmark = pytest.mark.slow


def _has(dsn: str, name: str, tool: str) -> bool:
    try:
        return tool in stored_names(dsn, name, timeout=2.0)
    except Exception:  # Postgres still coming up: not yet
        return False


async def test_a_change_the_shared_catalog_missed_while_postgres_was_down_is_written_once_it_is_back(
    own_pg_server: PostgresServer, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    # Before: the failed write was logged ("The next change of an upstream's tools (or a restart) writes it") and never
    # tried again: the shared catalog lacked 'toy__quokka_census' for as long as no upstream changed again.
    caplog.set_level(logging.INFO)
    server = own_pg_server
    dsn = server.dsn()
    workers = WorkerSettings(store=dsn, catalog="resync", catalog_poll=0.2)
    options = {"embedder": word_embedder(), "cache": False, "timeout": 1.0, "connect_timeout": 1.0}
    settings = GatewaySettings(backend="postgres", backend_options=options, workers=workers)
    with open(os.devnull, "w") as quiet:
        async with MCPToolSource({"mcpServers": {"toy": toy()}}, errlog=quiet) as source:
            index = await anyio.to_thread.run_sync(_store_index, workers, source, settings)
            try:
                gateway = await anyio.to_thread.run_sync(lambda: Gateway(source, settings, index=index))
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: gateway.resync_catalog(first=0.2, longest=1.0))
                    await anyio.to_thread.run_sync(server.stop)
                    grown = await source.call_tool("toy__grow", {"name": "quokka_census"})  # its tool list changes
                    assert not grown.is_error, grown

                    def missed() -> bool:
                        return any("the shared catalog was not brought to it" in r.getMessage()
                                   for r in caplog.records if r.levelno == logging.WARNING)

                    assert await anyio.to_thread.run_sync(lambda: wait_until(missed, timeout=30)), caplog.text
                    assert "toy__quokka_census" in source.catalog()
                    await anyio.to_thread.run_sync(lambda: server.start())  # Postgres back, on the same port
                    written = await anyio.to_thread.run_sync(
                        lambda: wait_until(lambda: _has(dsn, "resync", "toy__quokka_census"), timeout=60, interval=0.3))
                    tg.cancel_scope.cancel()
                assert written, caplog.text  # no upstream changed again: the worker wrote it on its own
                assert any("written again after it failed" in r.getMessage() for r in caplog.records), caplog.text
                said = [r.getMessage() for r in caplog.records if "not brought to it" in r.getMessage()]
                assert all("Trying again within" in m for m in said), said
            finally:
                index.close()
