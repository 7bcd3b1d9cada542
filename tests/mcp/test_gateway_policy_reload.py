"""`--tool-policy` followed while the gateway runs: an edit decides the next request; a bad edit keeps the last rules.

A real gateway process with static tokens and two toy upstreams (`safe`, `bank`); the real `mcp` client in
both protocol eras, each carrying alice's token.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_servers import GatewayProcess, http_gateway, toy, write_config
from mcp_servers.clients import text

pytestmark = pytest.mark.slow

MODERN = "2026-07-28"
TOKEN = "alice-" + "a" * 40
BOTH = {"rules": [{"when": {"issuer": "static", "subjects": ["alice"]}, "servers": ["safe", "bank"]}]}
SAFE_ONLY = {"rules": [{"when": {"issuer": "static", "subjects": ["alice"]}, "servers": ["safe"]}]}


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[tuple[GatewayProcess, Path]]:
    config = write_config(tmp_path / "servers.json", {"safe": toy(), "bank": toy()})
    entry = {"subject": "alice", "scopes": ["tools"], "token": TOKEN}
    (tmp_path / "tokens.json").write_text(json.dumps({"tokens": [entry]}))
    (tmp_path / "tokens.json").chmod(0o600)
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(BOTH))
    with http_gateway(
        config, "--backend", "bm25", "--auth-tokens", str(tmp_path / "tokens.json"), "--auth-scope", "tools",
        "--tool-policy", str(policy), "--rate-limit", "0", "--no-usage-log",
    ) as gateway:  # fmt: skip
        yield gateway, policy


@asynccontextmanager
async def alice(gateway: GatewayProcess, mode: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"}, timeout=30)
    async with http, Client(streamable_http_client(gateway.url or "", http_client=http), mode=mode) as client:
        yield client


async def echo(client: Client, name: str) -> Any:
    return await client.call_tool("call_tool", {"name": name, "arguments": {"text": "hi"}})


async def test_an_edited_policy_decides_the_next_request_and_a_bad_edit_keeps_the_last_rules(
    deployment: tuple[GatewayProcess, Path],
) -> None:
    gateway, policy = deployment
    async with alice(gateway, MODERN) as modern, alice(gateway, "legacy") as legacy:
        assert text(await echo(modern, "bank__echo")) == "hi"
        assert text(await echo(legacy, "bank__echo")) == "hi"

        policy.write_text(json.dumps(SAFE_ONLY))  # bank revoked: the very next request is refused, in both eras
        for client in (modern, legacy):
            refused = await echo(client, "bank__echo")
            assert refused.is_error and "not available" in text(refused)
            assert text(await echo(client, "safe__echo")) == "hi"
        assert gateway.logged(f"policy {policy} reloaded: 1 rules")
        found = await modern.call_tool("tool_search", {"query": "echo text", "max_results": 10})
        assert {t["name"] for t in (found.structured_content or {})["tools"]} <= {"safe__echo", "safe__add_numbers"}
        async with alice(gateway, "legacy") as fresh:  # what initialize says follows the file too
            assert "from these MCP servers: safe." in (fresh.instructions or "")

        # a bad edit (here: a server this gateway does not front, then a file that is not JSON) is not applied
        policy.write_text(json.dumps({"rules": [{**SAFE_ONLY["rules"][0], "servers": ["bnak"]}]}))
        for _ in range(2):
            assert text(await echo(modern, "safe__echo")) == "hi"  # the last good rules still serve
            assert (await echo(modern, "bank__echo")).is_error
        assert gateway.logged("rule 1 names the server 'bnak'")
        policy.write_text("{not json")
        assert text(await echo(legacy, "safe__echo")) == "hi"
        assert (await echo(legacy, "bank__echo")).is_error
        assert gateway.logged(f"policy {policy}: not valid JSON")
    errors = [line for line in gateway.stderr.splitlines() if "keeps serving the rules it read before" in line]
    assert len(errors) == 2  # once per change, not once per request
