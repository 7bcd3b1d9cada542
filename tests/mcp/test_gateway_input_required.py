"""An upstream tool that asks for input first (MCP 2026-07-28 `InputRequiredResult`, SEP-2322) through the gateway.

A 2026-07-28 client that can answer gets the request, answers it, and its retry (`inputResponses`, `requestState`)
reaches the upstream; any other client gets a tool error that says what the tool asks for and where it can be
answered, never the SDK's advice to its programmer. Real gateway processes over stdio and HTTP, the real `mcp` client,
an upstream written with the `mcp` SDK (tests/mcp_servers/relay_server.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp_servers import HERE, PY, GatewayProcess, gateway_argv, gateway_env, http_gateway, write_config
from mcp_servers.clients import text
from mcp_types import SERVER_INFO_META_KEY

pytestmark = pytest.mark.slow

RELAY = HERE / "relay_server.py"
MODERN = "2026-07-28"
CONFIRM = {"name": "relay__confirm", "arguments": {"what": "archive"}}


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    servers = {"relay": {"command": PY, "args": [str(RELAY)]}}
    return write_config(tmp_path_factory.mktemp("input") / "servers.json", servers)


@pytest.fixture(scope="module")
def gateway(config: Path) -> Iterator[GatewayProcess]:
    with http_gateway(config, "--backend", "bm25") as process:
        yield process


@pytest.fixture(params=["stdio", "http"])
def target(request: pytest.FixtureRequest, config: Path) -> GatewayProcess | Path:
    """The gateway to talk to: one a stdio client starts (its config), or the running HTTP one."""
    return config if request.param == "stdio" else request.getfixturevalue("gateway")


@asynccontextmanager
async def client_of(target: GatewayProcess | Path, mode: str, asked: list[str] | None) -> AsyncIterator[Client]:
    """The real `mcp` client in `mode`; with `asked`, it answers an elicitation by accepting (its messages go there),
    without it, it declares no elicitation at all."""
    if isinstance(target, GatewayProcess):
        server: Any = target.url or ""
    else:
        argv = gateway_argv(target, "--quiet", "--backend", "bm25")
        server = StdioServerParameters(command=argv[0], args=argv[1:], env=gateway_env())
    options: dict[str, Any] = {}
    if asked is not None:

        async def on_elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked.append(params.message)
            return types.ElicitResult(action="accept", content={"ok": True})

        options["elicitation_callback"] = on_elicit
    with anyio.fail_after(120):
        async with Client(server, mode=mode, **options) as client:
            yield client


def no_sdk_advice(message: str) -> None:
    """The model is never told the SDK's steps for a programmer."""
    assert "allow_input_required" not in message and "input_responses" not in message
    assert "InputRequiredResult" not in message


async def test_a_modern_client_answers_the_upstream_question(target: GatewayProcess | Path) -> None:
    asked: list[str] = []
    async with client_of(target, MODERN, asked) as client:
        result = await client.call_tool("call_tool", CONFIRM)
        assert not result.is_error, text(result)
        assert asked == ["Really wipe the archive?"]  # the user was asked, by the upstream's own words
        assert text(result) == "wiped archive after {'ok': True}; state relay-state-1"  # answer and state reached it


async def test_a_modern_retry_carries_its_answers_and_the_state_upstream(gateway: GatewayProcess) -> None:
    async with client_of(gateway, MODERN, []) as client:
        first = await client.session.call_tool("call_tool", CONFIRM, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.request_state == "relay-state-1" and first.input_requests is not None
        question = first.input_requests["confirm"]
        assert isinstance(question, types.ElicitRequest) and question.params.message == "Really wipe the archive?"
        server_info = (first.meta or {}).get(SERVER_INFO_META_KEY)
        assert server_info is not None and server_info["name"] != "relay"  # the gateway's, not the upstream's

        declined = types.ElicitResult(action="accept", content={"ok": False})
        done = await client.session.call_tool(
            "call_tool", CONFIRM, input_responses={"confirm": declined}, request_state=first.request_state
        )
        assert isinstance(done, types.CallToolResult) and not done.is_error, done
        assert text(done) == "wiped archive after {'ok': False}; state relay-state-1"


async def test_a_modern_client_that_cannot_answer_gets_a_tool_error(target: GatewayProcess | Path) -> None:
    async with client_of(target, MODERN, None) as client:
        result = await client.call_tool("call_tool", CONFIRM)
        assert result.is_error
        message = text(result)
        no_sdk_advice(message)
        assert "'confirm' asks for input" in message and "a question for the user (elicitation)" in message
        assert "did not declare that it can answer them" in message and "MCP server 'relay' directly" in message


async def test_a_handshake_era_client_gets_a_tool_error_that_says_why(target: GatewayProcess | Path) -> None:
    asked: list[str] = []
    async with client_of(target, "legacy", asked) as client:
        result = await client.call_tool("call_tool", CONFIRM)
        assert result.is_error and asked == []
        message = text(result)
        no_sdk_advice(message)
        assert "'confirm' asks for input" in message and "a question for the user (elicitation)" in message
        assert "only to clients of MCP 2026-07-28" in message and "Do not retry it here" in message


async def test_an_input_request_over_the_result_limit_says_the_call_did_not_run(tmp_path: Path) -> None:
    # The upstream asks before running: an input request too large to pass on is no result of a call that "ran".
    servers = {"relay": {"command": PY, "args": [str(RELAY)], "maxResultBytes": 100}}
    config = write_config(tmp_path / "servers.json", servers)
    async with client_of(config, MODERN, []) as client:
        result = await client.call_tool("call_tool", CONFIRM)
    assert result.is_error
    message = text(result)
    no_sdk_advice(message)
    # before: "The call to 'confirm' on MCP server 'relay' ran, but its result (... bytes) is larger than ..."
    assert "asked for input before running 'confirm'" in message and "the call did not run" in message
    assert " ran, but" not in message
