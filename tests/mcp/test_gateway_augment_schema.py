"""`--augment` against tools whose own parameter is named like the augmented field, through a real gateway process.

- At start the whole schema is checked: a `reason` inside `allOf`, behind a `$ref` into `$defs`, or in one
  branch of a `oneOf` refuses the start, naming the tool, as a top-level one does.
- An upstream that later adds a colliding parameter (tests/mcp_servers/faulty_server.py's `mutate`) blanks
  nothing: a 2026-07-28 `tool_search` whose hits include that tool answers without it and says why; the
  handshake era's `tools/list` still answers (without it); a call of it is an ordinary tool error in both
  eras (never a JSON-RPC error).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_servers import GatewayProcess, gateway_argv, gateway_env, http_gateway, write_config
from mcp_servers.clients import connect, faulty, text

pytestmark = pytest.mark.slow

REASON = {"type": "string", "description": "Why you call this tool, in one sentence."}
AUGMENT = {"type": "object", "properties": {"reason": REASON}, "required": ["reason"]}
WHY = "the test asks"
OWN_REASON = {"type": "string", "description": "The refund's own reason code"}

NESTED: dict[str, dict[str, Any]] = {
    "allOf": {"type": "object", "allOf": [{"properties": {"reason": OWN_REASON}, "required": ["reason"]}]},
    "$ref": {
        "type": "object",
        "$ref": "#/$defs/Refund",
        "$defs": {"Refund": {"type": "object", "properties": {"reason": OWN_REASON, "payment": {"type": "string"}}}},
    },
    "oneOf": {
        "type": "object",
        "properties": {"payment": {"type": "string"}},
        "oneOf": [{"properties": {"amount": {"type": "number"}}}, {"properties": {"reason": OWN_REASON}}],
    },
}


def _augment_file(folder: Path) -> Path:
    path = folder / "augment.json"
    path.write_text(json.dumps(AUGMENT), encoding="utf-8")
    return path


@pytest.mark.parametrize("where", list(NESTED))
def test_a_colliding_parameter_anywhere_in_the_schema_refuses_the_start(tmp_path: Path, where: str) -> None:
    refund = {"name": "refund", "description": "Refund a payment.", "inputSchema": NESTED[where]}
    config = write_config(tmp_path / "servers.json", {"pay": faulty(FAULTY_EXTRA_TOOLS=json.dumps([refund]))})
    done = subprocess.run(
        gateway_argv(config, "--augment", str(_augment_file(tmp_path)), "--backend", "bm25"),
        env=gateway_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0, done.stderr
    assert "'reason' collide with the parameter(s) of the same name of tool 'pay__refund'" in done.stderr


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    config = write_config(tmp_path / "servers.json", {"up": faulty()})
    with http_gateway(config, "--augment", str(_augment_file(tmp_path)), "--backend", "bm25") as process:
        yield process


def _names(result: Any) -> list[str]:
    return [t["name"] for t in (result.structured_content or {}).get("tools", [])]


QUERY = "echo the given text back unchanged"
COLLIDING = {"type": "object", "properties": {"text": {"type": "string"}, "reason": OWN_REASON}}


async def _collide(client: Any, gateway: GatewayProcess) -> None:
    """The upstream gives its `echo` a parameter named like the augmented field; wait until the gateway sees it."""
    arguments = {"tool": "echo", "schema": COLLIDING, "reason": WHY}
    changed = await client.call_tool("call_tool", {"name": "up__mutate", "arguments": arguments})
    assert not changed.is_error, text(changed)
    assert gateway.logged("cannot be offered with --augment", timeout=30), gateway.stderr


async def test_a_2026_search_whose_hits_collide_answers_without_them_and_says_why(gateway: GatewayProcess) -> None:
    async with Client(gateway.url or "") as modern:
        assert "up__echo" in _names(await modern.call_tool("tool_search", {"query": QUERY}))
        await _collide(modern, gateway)

        searched = await modern.call_tool("tool_search", {"query": QUERY})
        assert not searched.is_error, text(searched)
        assert "up__echo" not in _names(searched)
        assert "up__echo" in text(searched) and "'reason'" in text(searched)  # left out, and why
        called = await modern.call_tool("call_tool", {"name": "up__echo", "arguments": {"text": "x", "reason": WHY}})
        assert called.is_error and "'reason'" in text(called)
        healthy = await modern.call_tool("call_tool", {"name": "up__pid", "arguments": {"reason": WHY}})
        assert not healthy.is_error, text(healthy)


async def test_a_handshake_session_keeps_listing_and_a_colliding_call_is_a_tool_error(gateway: GatewayProcess) -> None:
    async with connect(gateway.url or "") as old:
        await old.search(QUERY, max_results=3)
        await old.wait_changed()
        assert "up__echo" in await old.names()
        await _collide(old.session, gateway)

        listed = await old.names()  # answers; the colliding tool is no longer offered
        assert "up__echo" not in listed and "call_tool" in listed
        for called in (
            await old.call("up__echo", {"text": "x", "reason": WHY}),
            await old.call("call_tool", {"name": "up__echo", "arguments": {"text": "x", "reason": WHY}}),
        ):
            assert called.is_error and "'reason'" in text(called) and "Traceback" not in text(called)
        again = await old.search(QUERY, max_results=3)
        assert not again.is_error and "up__echo" in text(again) and "'reason'" in text(again)
        healthy = await old.call("up__pid", {"reason": WHY})
        assert not healthy.is_error, text(healthy)
