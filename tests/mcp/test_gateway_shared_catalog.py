"""A gateway worker whose catalog is shared in Postgres never removes the tools of an upstream server it could not
list: a server that failed to start on one host is up on another, and every worker follows the one catalog. A call to
such a tool on the worker where its server is down says so, and that server's restart is tried. A sync behind a writer
stopped mid-change fails in time, and the worker serves on."""

from __future__ import annotations

import logging
import os

import anyio
import anyio.to_thread
import psycopg
import pytest
from mcp_servers import toy
from pg_server import PostgresServer, pg_server, stored_names, word_embedder  # noqa: F401  (a fixture)

from toolsearch import Tool
from toolsearch.mcp import GatewaySettings, WorkerSettings
from toolsearch.mcp.gateway import Gateway
from toolsearch.mcp.source import MCPToolSource
from toolsearch.mcp.startup import _store_index

pytestmark = pytest.mark.slow


async def test_a_worker_keeps_the_shared_tools_of_a_server_it_could_not_start(
    pg_server: PostgresServer, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    # Before: worker B's start brought the shared catalog to B's own list, so 'toy' lost its 7 tools on every
    # worker (A's 'toy' was up), logged only as "writing 0 new, 0 changed, 7 removed tools".
    caplog.set_level(logging.INFO)
    workers = WorkerSettings(store=pg_server.dsn(), catalog="unlisted", catalog_poll=0.2)
    settings = GatewaySettings(backend="postgres", backend_options={"embedder": word_embedder(), "cache": False},
                               workers=workers)
    with open(os.devnull, "w") as quiet:
        async with MCPToolSource({"mcpServers": {"toy": toy(), "calc": toy()}}, errlog=quiet) as healthy:
            first = await anyio.to_thread.run_sync(_store_index, workers, healthy, settings)
            first.close()
        everything = stored_names(pg_server.dsn(), "unlisted")
        assert any(name.startswith("toy__") for name in everything)

        servers = {"mcpServers": {"toy": toy(TOY_STARTUP="exit"), "calc": toy()}}
        async with MCPToolSource(servers, errlog=quiet, restart=False) as one_down:
            assert list(one_down.failures) == ["toy"]
            index = await anyio.to_thread.run_sync(_store_index, workers, one_down, settings)
            try:
                assert set(index.catalog.names) == everything
                said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
                assert any("MCP server not listed by this worker (toy:" in m and "kept" in m for m in said), said
                # a sync this worker runs later (after an upstream change) writes what it lists, and keeps 'toy'
                stray = Tool("calc__stray", "A tool no calc server lists.", namespace="calc")
                await anyio.to_thread.run_sync(index.upsert, [stray])
                gateway = await anyio.to_thread.run_sync(lambda: Gateway(one_down, settings, index=index))
                await gateway._apply_catalog(one_down)
                assert stored_names(pg_server.dsn(), "unlisted") == everything
            finally:
                index.close()


async def test_a_call_to_a_kept_tool_of_a_server_down_here_says_the_server_is_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Before: "no MCP server offers a tool named 'toy__add_numbers'; search for tools first", though the shared catalog
    # (and so this worker's search) offers it, and no restart of 'toy' was tried.
    caplog.set_level(logging.WARNING)
    with open(os.devnull, "w") as quiet:
        async with MCPToolSource({"mcpServers": {"toy": toy(TOY_STARTUP="exit")}}, errlog=quiet) as source:
            assert list(source.failures) == ["toy"] and source.route("toy__add_numbers") is None
            result = await source.call_tool("toy__add_numbers", {"a": 1, "b": 2})
            said = " ".join(getattr(part, "text", "") for part in result.content)
            assert result.is_error and said.startswith("MCP server 'toy' is not available"), said
            assert "search for tools first" not in said
            assert any("MCP server 'toy': restart" in r.getMessage() for r in caplog.records), caplog.text
            other = await source.call_tool("nowhere__add_numbers", {})  # a name of no configured server
            assert "no MCP server offers a tool named 'nowhere__add_numbers'" in getattr(other.content[0], "text", "")


async def test_a_sync_behind_a_writer_stopped_mid_change_fails_in_time_and_the_worker_serves_on(
    pg_server: PostgresServer, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    # Before: the sync waited for the catalog's lock with no bound (a stopped writer keeps it for hours), holding the
    # gateway's sync lock, so every later upstream change of this worker waited behind it.
    caplog.set_level(logging.WARNING)
    dsn = pg_server.dsn()
    workers = WorkerSettings(store=dsn, catalog="stopped", catalog_poll=0.2)
    options = {"embedder": word_embedder(), "cache": False, "timeout": 0.3, "lock_wait": 1.0}
    settings = GatewaySettings(backend="postgres", backend_options=options, workers=workers)
    with open(os.devnull, "w") as quiet:
        async with MCPToolSource({"mcpServers": {"calc": toy()}}, errlog=quiet) as source:
            index = await anyio.to_thread.run_sync(_store_index, workers, source, settings)
            try:
                gateway = await anyio.to_thread.run_sync(lambda: Gateway(source, settings, index=index))
                stray = Tool("calc__stray", "A tool no calc server lists.", namespace="calc")
                await anyio.to_thread.run_sync(index.upsert, [stray])  # so that the sync has a change to write
                holder = psycopg.connect(dsn, application_name="stopped writer")
                holder.execute("SELECT 1 FROM toolsearch_catalogs WHERE name = 'stopped' FOR UPDATE")
                try:
                    with anyio.fail_after(20):
                        await gateway._upstream_changed(source, "calc")
                finally:
                    holder.rollback()
                    holder.close()
                said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
                assert any("the shared catalog was not brought to it" in m and "a lock, not an outage" in m
                           and "'stopped writer'" in m for m in said), said
                assert index.outage() is None and "calc__stray" in index.catalog
            finally:
                index.close()
