"""Tool-list change notices follow each caller's rights: `subscriptions/listen` (2026-07-28) and the handshake
era's `notifications/tools/list_changed` tell a caller of a change only when the tools it may see changed.

A real gateway process with static tokens, two toy upstreams that grow on demand (`safe`, `bank`), every tool
pinned, and a policy giving alice `safe` and bob `bank`; the real `mcp` client in both eras.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_servers import GatewayProcess, http_gateway, toy, write_config, write_tokens
from mcp_servers.clients import change_events, text

pytestmark = pytest.mark.slow

MODERN = "2026-07-28"
TOKENS = {"alice": "alice-" + "a" * 40, "bob": "bob-" + "b" * 40}
POLICY = {
    "rules": [
        {"when": {"issuer": "static", "subjects": ["alice"]}, "servers": ["safe"]},
        {"when": {"issuer": "static", "subjects": ["bob"]}, "servers": ["bank"]},
    ]
}


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    config = write_config(tmp_path / "servers.json", {"safe": toy(), "bank": toy()})
    write_tokens(tmp_path / "tokens.json", TOKENS)
    (tmp_path / "policy.json").write_text(json.dumps(POLICY))
    with http_gateway(
        config, "--backend", "bm25", "--auth-tokens", str(tmp_path / "tokens.json"), "--auth-scope", "tools",
        "--tool-policy", str(tmp_path / "policy.json"), "--pin", "safe__*", "--pin", "bank__*",
        "--rate-limit", "0", "--no-usage-log",
    ) as process:  # fmt: skip
        yield process


class Heard:
    """The handshake-era tools/list_changed notifications a client got."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.count += 1


@asynccontextmanager
async def as_caller(gateway: GatewayProcess, who: str, mode: str, heard: Heard | None = None) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKENS[who]}"}, timeout=httpx2.Timeout(30, read=60))
    transport = streamable_http_client(gateway.url or "", http_client=http)
    async with http, Client(transport, mode=mode, message_handler=heard) as client:
        yield client


@asynccontextmanager
async def both_eras(gateway: GatewayProcess) -> AsyncIterator[tuple[Client, Client, Heard, Heard]]:
    """alice and bob in the 2026 era, and what each one's handshake-era session hears (each has made a request)."""
    alice_heard, bob_heard = Heard(), Heard()
    async with (
        as_caller(gateway, "alice", MODERN) as alice,
        as_caller(gateway, "bob", MODERN) as bob,
        as_caller(gateway, "alice", "legacy", alice_heard) as alice_legacy,
        as_caller(gateway, "bob", "legacy", bob_heard) as bob_legacy,
    ):
        await alice_legacy.list_tools()  # each handshake-era session has made a request: it can be told
        await bob_legacy.list_tools()
        yield alice, bob, alice_heard, bob_heard


async def grow(client: Client, server: str, name: str) -> None:
    """Have `server` add the tool `name`, and wait until the gateway lists it (pinned, its caller's list shows it)."""
    grown = await client.call_tool("call_tool", {"name": f"{server}__grow", "arguments": {"name": name}})
    assert not grown.is_error, text(grown)
    with anyio.fail_after(30):
        while f"{server}__{name}" not in [t.name for t in (await client.list_tools(cache_mode="bypass")).tools]:
            await anyio.sleep(0.2)


async def test_a_caller_hears_of_changes_to_its_own_tools_only_in_both_eras(gateway: GatewayProcess) -> None:
    async with both_eras(gateway) as (alice, bob, alice_heard, bob_heard):
        before = (await alice.list_tools(cache_mode="bypass")).model_dump()
        async with change_events(alice) as alice_events, change_events(bob) as bob_events:
            await grow(bob, "bank", "wire_transfer")  # bob's server changes: nothing alice may see
            await anyio.sleep(1.5)
            assert alice_events == [] and alice_heard.count == 0
            assert (await alice.list_tools(cache_mode="bypass")).model_dump() == before
            assert len(bob_events) == 1 and bob_heard.count >= 1

            await grow(alice, "safe", "quokka_census")  # alice's server changes: she hears, bob does not
            with anyio.fail_after(30):
                while not (alice_events and alice_heard.count):
                    await anyio.sleep(0.1)
            await anyio.sleep(1)
            assert len(bob_events) == 1 and bob_heard.count == 1


async def test_a_policy_edit_is_announced_to_the_callers_whose_tools_it_changed_in_both_eras(
    gateway: GatewayProcess, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.json"
    granted = {"rules": [{**POLICY["rules"][0], "servers": ["safe", "bank"]}, POLICY["rules"][1]]}
    async with (
        both_eras(gateway) as (alice, bob, alice_heard, bob_heard),
        change_events(alice) as alice_events,
        change_events(bob) as bob_events,
    ):
        await anyio.sleep(0.5)
        for edit, heard in ((granted, 1), (POLICY, 2)):  # bank granted to alice, then revoked
            policy.write_text(json.dumps(edit))
            await bob.list_tools(cache_mode="bypass")  # a request (anyone's): the file is read again
            with anyio.fail_after(30):
                while len(alice_events) < heard or alice_heard.count < heard:
                    await anyio.sleep(0.1)
            await anyio.sleep(1)
            # once per edit in each era; bob's tools did not change: he hears nothing
            assert (len(alice_events), alice_heard.count) == (heard, heard)
            assert bob_events == [] and bob_heard.count == 0
        listed = [t.name for t in (await alice.list_tools(cache_mode="bypass")).tools]
        assert "bank__echo" not in listed and "safe__echo" in listed

        # compared against her new rights: a change to bob's server (no longer hers) is not announced to her
        await grow(bob, "bank", "wire_transfer")
        await anyio.sleep(1.5)
        assert (len(alice_events), alice_heard.count) == (2, 2)
        assert len(bob_events) == 1
