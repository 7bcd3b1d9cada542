"""A gateway whose usage store fails: searches and calls are answered, and the log says usage was not recorded.

A real `toolsearch mcp serve` process over stdio, driven by the real MCP client. Its sessions are kept in memory
by a plug-in session store scheme whose usage store is a real Redis usage store at a port nothing listens on (a
Redis that is down): every search and call the gateway tries to record fails with a connection error. The rule
(toolsearch.mcp.rules, one guard with the executor's and the plug-ins'): the answer stands, and the failure is
said once per request as a warning naming the store.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_servers import PY, gateway_env, toy, write_config
from plugin_site import write_distribution

pytestmark = pytest.mark.slow

PLUGIN = '''
from toolsearch.stores import InMemorySessionStore
from toolsearch.stores.usage_redis import RedisUsageStore


def sessions(url, *, ttl_seconds=None, **options):
    return InMemorySessionStore(ttl_seconds=ttl_seconds, **options)


def usage(url, *, path=None, **options):
    return RedisUsageStore("redis://" + url.split("://", 1)[1], **options)
'''


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_searches_and_calls_are_answered_while_the_usage_store_is_down(tmp_path: Path) -> None:
    entry_points = {"toolsearch.session_stores": {"downusage": "downusage:sessions"},
                    "toolsearch.usage_stores": {"downusage": "downusage:usage"}}
    site = write_distribution(tmp_path / "site", "downusage", entry_points, downusage=PLUGIN)
    env = gateway_env()
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    store = f"downusage://127.0.0.1:{_closed_port()}/0"
    argv = ["-m", "toolsearch.mcp", "--config", str(config), "--backend", "bm25", "--session-store", store]
    server = StdioServerParameters(command=PY, args=argv, env=env)
    with (tmp_path / "stderr.txt").open("w+") as errlog:
        async with stdio_client(server, errlog=errlog) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            found = await client.call_tool("tool_search", {"query": "echo text back"})
            assert not found.is_error and "toy__echo" in found.content[0].text  # type: ignore[union-attr]
            called = await client.call_tool("toy__echo", {"text": "still answered"})
            assert not called.is_error and "still answered" in called.content[0].text  # type: ignore[union-attr]
        errlog.seek(0)
        log = errlog.read()
    # Both failures are said, naming what was not recorded and the store; neither failed the request.
    assert "usage of a tool search not recorded" in log, log
    assert "usage of a call of 'toy__echo' not recorded" in log, log
    assert "(pending searches in RedisPendingSearches(" in log, log
