"""What a session is after its Redis restarts without persistence, as docs/deploy.md says: gone, and said so.

A real `toolsearch mcp serve` over a real redis-server started without an append-only file or
snapshots, killed and started again on the same port (empty). A gateway-issued `mcp-session-id`
is then one no store remembers: `404 unknown session`, never taken on trust, and a new
`initialize` starts a new session. A session named by a trusted proxy's header has no id to
refuse: it starts over with the meta-tools only.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from fakes.attacks import INITIALIZE, MCP_HEADERS
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_servers import GatewayProcess, toy, write_config
from redis_server import RedisServer

pytestmark = pytest.mark.slow

PING = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"})


def flags(redis: RedisServer, folder: Path, *extra: str) -> list[str]:
    return ["--session-store", redis.url, "--index-dir", str(folder / "indexes"), "--backend", "bm25", *extra]


def test_a_gateway_issued_session_id_is_unknown_after_a_restart_without_persistence(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path).start()
    gateway = GatewayProcess(write_config(tmp_path / "servers.json", {"toy": toy()}), *flags(redis, tmp_path))
    try:
        url = gateway.wait_ready(120)
        opened = httpx2.post(url, headers=MCP_HEADERS, content=json.dumps(INITIALIZE), timeout=30)
        session = [("mcp-session-id", opened.headers["mcp-session-id"])]
        assert httpx2.post(url, headers=[*MCP_HEADERS, *session], content=PING, timeout=30).status_code == 200

        redis.kill()
        redis.start()  # the same port, nothing kept
        after = httpx2.post(url, headers=[*MCP_HEADERS, *session], content=PING, timeout=30)
        assert after.status_code == 404 and "unknown session" in after.text, after.text
        again = httpx2.post(url, headers=MCP_HEADERS, content=json.dumps(INITIALIZE), timeout=30)
        assert again.status_code == 200 and again.headers["mcp-session-id"] != session[0][1]
    finally:
        gateway.stop()
        redis.stop()


@asynccontextmanager
async def as_user(url: str, user: str) -> AsyncIterator[ClientSession]:
    with anyio.fail_after(60):
        async with (
            httpx2.AsyncClient(headers={"x-user-id": user}, timeout=30) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            yield client


async def test_a_session_named_by_a_proxy_header_starts_over_after_a_restart_without_persistence(
    tmp_path: Path,
) -> None:
    redis = RedisServer(tmp_path).start()
    extra = ("--session-header", "X-User-Id", "--trust-proxy-header")
    gateway = GatewayProcess(write_config(tmp_path / "servers.json", {"toy": toy()}), *flags(redis, tmp_path, *extra))
    try:
        url = gateway.wait_ready(120)
        async with as_user(url, "u1") as client:
            await client.call_tool("tool_search", {"query": "echo text back"})
            assert "toy__echo" in {t.name for t in (await client.list_tools()).tools}
            redis.kill()
            redis.start()
            names = {t.name for t in (await client.list_tools()).tools}
            assert "toy__echo" not in names and "tool_search" in names  # the meta-tools only: it started over
    finally:
        gateway.stop()
        redis.stop()
