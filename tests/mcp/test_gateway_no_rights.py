"""A caller the policy gives no tools is told so by tool_search, in both eras, and nothing about anyone else's tools.

A real gateway process with static tokens (alice has a rule, carol none) over two toy upstreams; the real `mcp`
client in both eras with carol's token.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_servers import GatewayProcess, http_gateway, toy, write_config, write_tokens
from mcp_servers.clients import text

pytestmark = pytest.mark.slow

MODERN = "2026-07-28"
TOKENS = {"alice": "alice-" + "a" * 40, "carol": "carol-" + "c" * 40}
NO_RIGHTS = "Your access rights give you no tools here, so no search can find one; ask the operator for access."


@contextmanager
def policy_gateway(folder: Path, servers: dict[str, Any], subject: str, granted: list[str]) -> Iterator[GatewayProcess]:
    """A gateway of `servers` whose policy gives `subject` the servers `granted` (and nobody anything else)."""
    config = write_config(folder / "servers.json", servers)
    write_tokens(folder / "tokens.json", TOKENS)
    policy = {"rules": [{"when": {"issuer": "static", "subjects": [subject]}, "servers": granted}]}
    (folder / "policy.json").write_text(json.dumps(policy))
    with http_gateway(
        config, "--backend", "bm25", "--auth-tokens", str(folder / "tokens.json"), "--auth-scope", "tools",
        "--tool-policy", str(folder / "policy.json"), "--rate-limit", "0", "--no-usage-log",
    ) as process:  # fmt: skip
        yield process


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    with policy_gateway(tmp_path, {"safe": toy(), "bank": toy()}, "alice", ["safe"]) as process:
        yield process


@asynccontextmanager
async def carol(gateway: GatewayProcess, mode: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKENS['carol']}"}, timeout=30)
    async with http, Client(streamable_http_client(gateway.url or "", http_client=http), mode=mode) as client:
        yield client


async def test_a_caller_without_rights_is_told_it_has_no_tools_in_both_eras(gateway: GatewayProcess) -> None:
    for mode in (MODERN, "legacy"):
        async with carol(gateway, mode) as client:
            searched = text(await client.call_tool("tool_search", {"query": "echo text"}))
            assert searched.startswith(f"No tools matched 'echo text'. {NO_RIGHTS}"), mode  # not "try other words"
            named = text(await client.call_tool("tool_search", {"query": "echo", "namespace": "safe"}))
            assert named == f"tool_search error: unknown namespace 'safe'. {NO_RIGHTS}", mode
            assert "bank" not in searched + named and "no namespaces" not in named


NONE_LISTED = "None of the tools your access rights give you is available right now; try again later."


async def test_a_caller_whose_granted_server_is_down_is_not_told_it_has_no_rights(tmp_path: Path) -> None:
    servers = {"safe": toy(), "bank": toy(TOY_STARTUP="exit")}
    with policy_gateway(tmp_path, servers, "carol", ["bank"]) as gateway:
        for mode in (MODERN, "legacy"):
            async with carol(gateway, mode) as client:  # her rights name `bank`, which failed to start
                searched = text(await client.call_tool("tool_search", {"query": "echo text"}))
                assert searched.startswith(f"No tools matched 'echo text'. {NONE_LISTED}"), mode
                named = text(await client.call_tool("tool_search", {"query": "echo", "namespace": "bank"}))
                assert named == f"tool_search error: unknown namespace 'bank'. {NONE_LISTED}", mode
                assert "safe" not in searched + named and NO_RIGHTS not in searched + named
