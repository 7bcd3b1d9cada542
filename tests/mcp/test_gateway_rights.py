"""Rights are decided on every request, and nothing leaks about what a caller may not use: a real gateway process.

One `toolsearch mcp serve` with two upstream servers (`safe` and `bank`, both the toy server), a local OAuth
issuer, a policy giving `tools:admin` every server and `tools` only `safe`, and `--require-discovery`. The
caller `alice` holds two tokens with one subject: an admin token and a narrower tools-only one. Each era is
driven by the real `mcp` client whose HTTP client carries the token, which a test swaps between requests.

- A 2026-07-28 context handle made with the admin token, then used with the narrower token, reaches no
  `bank` tool: no call runs, no search finds one.
- A handshake-era session opened with the admin token lists and calls no `bank` tool once the narrower
  token is presented.
- The instructions (initialize, server/discover) count and name only the caller's servers.
- Under --require-discovery a forbidden tool and a missing one get the same answer, in both eras.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from fakes.oauth_issuer import LocalIssuer
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_servers import GatewayProcess, http_gateway, toy, write_config
from mcp_servers.clients import text

pytestmark = pytest.mark.slow

MODERN = "2026-07-28"
POLICY = {
    "rules": [
        {"when": {"scopes": ["tools:admin"]}, "servers": ["*"]},
        {"when": {"scopes": ["tools"]}, "servers": ["safe"]},
    ]
}
TOY_TOOLS = 7  # tools of tests/mcp_servers/toy_server.py


class Deployment:
    def __init__(self, gateway: GatewayProcess, issuer: LocalIssuer) -> None:
        self.gateway = gateway
        self.issuer = issuer
        self.url = gateway.url or ""

    def admin(self) -> str:
        return self.issuer.mint("alice", scopes=["tools", "tools:admin"], audience=self.url)

    def narrow(self) -> str:
        return self.issuer.mint("alice", scopes=["tools"], audience=self.url)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    folder = tmp_path_factory.mktemp("rights")
    config = write_config(folder / "servers.json", {"safe": toy(), "bank": toy()})
    (folder / "policy.json").write_text(json.dumps(POLICY))
    with LocalIssuer() as issuer, http_gateway(
        config, "--backend", "bm25", "--host", "127.0.0.2", "--auth-issuer", issuer.url, "--auth-scope", "tools",
        "--tool-policy", str(folder / "policy.json"), "--require-discovery", "--rate-limit", "0",
    ) as gateway:  # fmt: skip
        yield Deployment(gateway, issuer)


class Token:
    """The bearer token an HTTP client sends; `use` swaps it before the next request."""

    def __init__(self, http: httpx2.AsyncClient) -> None:
        self.http = http

    def use(self, token: str) -> None:
        self.http.headers["authorization"] = f"Bearer {token}"


@asynccontextmanager
async def modern(url: str, token: str) -> AsyncIterator[tuple[Client, Token]]:
    with anyio.fail_after(90):
        async with (
            httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30) as http,
            Client(streamable_http_client(url, http_client=http)) as client,  # auto: probes server/discover
        ):
            assert client.protocol_version == MODERN
            yield client, Token(http)


@asynccontextmanager
async def handshake(url: str, token: str) -> AsyncIterator[tuple[ClientSession, Token, Any]]:
    with anyio.fail_after(90):
        async with (
            httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            initialized = await session.initialize()
            yield session, Token(http), initialized


def _bank(names: Any) -> list[str]:
    return [n for n in names if str(n).startswith("bank__")]


def _found(result: Any) -> list[str]:
    return [t["name"] for t in (result.structured_content or {}).get("tools", [])]


# --- rights decided on every request --------------------------------------------------------------------


async def test_a_context_handle_carries_no_rights_past_a_narrower_token(deployment: Deployment) -> None:
    async with modern(deployment.url, deployment.admin()) as (client, token):
        found = await client.call_tool("tool_search", {"query": "echo the given text back", "max_results": 10})
        handle = (found.structured_content or {})["context"]
        assert "bank__echo" in _found(found)
        ran = await client.call_tool(
            "call_tool", {"name": "bank__echo", "arguments": {"text": "as admin"}, "context": handle}
        )
        assert not ran.is_error and text(ran) == "as admin"

        token.use(deployment.narrow())  # the same subject, a tools-only token
        refused = await client.call_tool(
            "call_tool", {"name": "bank__echo", "arguments": {"text": "as tools"}, "context": handle}
        )
        assert refused.is_error and "as tools" not in text(refused)
        assert "is not available" in text(refused)
        again = await client.call_tool(
            "tool_search", {"query": "echo the given text back", "max_results": 10, "context": handle}
        )
        assert not again.is_error and _bank(_found(again)) == [] and "bank__" not in text(again)
        listed = await client.list_tools()
        assert _bank(t.name for t in listed.tools) == []
        mine = await client.call_tool(
            "call_tool", {"name": "safe__echo", "arguments": {"text": "still mine"}, "context": handle}
        )
        assert not mine.is_error and text(mine) == "still mine"  # the handle's own state is kept


async def test_a_handshake_session_lists_and_calls_only_what_the_current_token_gives(deployment: Deployment) -> None:
    async with handshake(deployment.url, deployment.admin()) as (session, token, _):
        await session.call_tool("tool_search", {"query": "echo the given text back", "max_results": 10})
        names = [t.name for t in (await session.list_tools()).tools]
        assert "bank__echo" in names and "safe__echo" in names
        ran = await session.call_tool("bank__echo", {"text": "as admin"})
        assert not ran.is_error and text(ran) == "as admin"

        token.use(deployment.narrow())
        names = [t.name for t in (await session.list_tools()).tools]
        assert _bank(names) == [] and "safe__echo" in names
        for call in (
            session.call_tool("bank__echo", {"text": "as tools"}),
            session.call_tool("call_tool", {"name": "bank__echo", "arguments": {"text": "as tools"}}),
        ):
            refused = await call
            assert refused.is_error and "is not available" in text(refused) and "as tools" not in text(refused)
        searched = await session.call_tool("tool_search", {"query": "echo the given text back", "max_results": 10})
        assert "bank__" not in text(searched)

        token.use(deployment.admin())  # rights come back with the token that gives them
        ran = await session.call_tool("bank__echo", {"text": "admin again"})
        assert not ran.is_error and text(ran) == "admin again"


# --- nothing leaks about what a caller may not use ------------------------------------------------------


def _servers(instructions: str | None) -> tuple[int, list[str]]:
    found = re.search(r"fronts (\d+) tools from these MCP servers: ([^.]+)\.", instructions or "")
    assert found, instructions
    return int(found.group(1)), [s.strip() for s in found.group(2).split(",")]


async def test_the_instructions_name_only_the_callers_servers(deployment: Deployment) -> None:
    async with handshake(deployment.url, deployment.narrow()) as (_, _token, initialized):
        assert _servers(initialized.instructions) == (TOY_TOOLS, ["safe"])
    async with modern(deployment.url, deployment.narrow()) as (client, _token):
        assert _servers(client.instructions) == (TOY_TOOLS, ["safe"])
    async with handshake(deployment.url, deployment.admin()) as (_, _token, initialized):
        assert _servers(initialized.instructions) == (2 * TOY_TOOLS, ["safe", "bank"])


def _alike(result: Any, name: str) -> str:
    assert result.is_error
    return text(result).replace(name, "<tool>")


async def test_a_forbidden_tool_and_a_missing_one_get_the_same_answer(deployment: Deployment) -> None:
    forbidden, missing = "bank__echo", "bank__no_such_tool"
    async with modern(deployment.url, deployment.narrow()) as (client, _token):
        answers = [
            _alike(await client.call_tool("call_tool", {"name": name, "arguments": {"text": "x"}}), name)
            for name in (forbidden, missing)
        ]
        assert answers[0] == answers[1], answers
    async with handshake(deployment.url, deployment.narrow()) as (session, _token, _):
        for via_proxy in (False, True):
            answers = []
            for name in (forbidden, missing):
                if via_proxy:
                    result = await session.call_tool("call_tool", {"name": name, "arguments": {"text": "x"}})
                else:
                    result = await session.call_tool(name, {"text": "x"})
                answers.append(_alike(result, name))
            assert answers[0] == answers[1], answers

