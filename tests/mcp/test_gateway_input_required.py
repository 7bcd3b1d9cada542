"""An upstream tool that asks for input first (MCP 2026-07-28 `InputRequiredResult`, SEP-2322) through the gateway.

A 2026-07-28 client that can answer gets the request, answers it, and its retry (`inputResponses`, `requestState`)
reaches the upstream; any other client gets a tool error that says what the tool asks for and where it can be
answered, never the SDK's advice to its programmer. Real gateway processes over stdio and HTTP, the real `mcp` client,
an upstream written with the `mcp` SDK (tests/mcp_servers/relay_server.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp_servers import HERE, PY, GatewayProcess, http_gateway, write_config
from mcp_servers.clients import gateway_client, text
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


def answering(asked: list[str] | None) -> dict[str, Any]:
    """The client's options: with `asked`, it answers an elicitation by accepting (its messages go there); without
    it, it declares no elicitation at all."""
    if asked is None:
        return {}

    async def on_elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"ok": True})

    return {"elicitation_callback": on_elicit}


def no_sdk_advice(message: str) -> None:
    """The model is never told the SDK's steps for a programmer."""
    assert "allow_input_required" not in message and "input_responses" not in message
    assert "InputRequiredResult" not in message


async def test_a_modern_client_answers_the_upstream_question(target: GatewayProcess | Path) -> None:
    asked: list[str] = []
    async with gateway_client(target, MODERN, **answering(asked)) as client:
        result = await client.call_tool("call_tool", CONFIRM)
        assert not result.is_error, text(result)
        assert asked == ["Really wipe the archive?"]  # the user was asked, by the upstream's own words
        assert text(result) == "wiped archive after {'ok': True}; state relay-state-1"  # answer and state reached it


async def test_a_modern_retry_carries_its_answers_and_the_state_upstream(gateway: GatewayProcess) -> None:
    async with gateway_client(gateway, MODERN, **answering([])) as client:
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
    async with gateway_client(target, MODERN, **answering(None)) as client:
        result = await client.call_tool("call_tool", CONFIRM)
        assert result.is_error
        message = text(result)
        no_sdk_advice(message)
        assert "'confirm' asks for input" in message and "a question for the user (elicitation)" in message
        assert "did not declare that it can answer them" in message and "MCP server 'relay' directly" in message


async def test_a_handshake_era_client_gets_a_tool_error_that_says_why(target: GatewayProcess | Path) -> None:
    asked: list[str] = []
    async with gateway_client(target, "legacy", **answering(asked)) as client:
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
    async with gateway_client(config, MODERN, **answering([])) as client:
        result = await client.call_tool("call_tool", CONFIRM)
    assert result.is_error
    message = text(result)
    no_sdk_advice(message)
    # before: "The call to 'confirm' on MCP server 'relay' ran, but its result (... bytes) is larger than ..."
    assert "asked for input before running 'confirm'" in message and "the call did not run" in message
    assert " ran, but" not in message


async def test_a_sampling_request_for_tool_use_needs_a_client_that_declared_it(gateway: GatewayProcess) -> None:
    # The upstream asks for sampling with `tools: []`; the SDK counts that as tool use (`wants_sampling_tools`), which
    # needs `sampling.tools`. Before, the gateway read an empty list as plain sampling and passed the request on, to a
    # client that declared no tool use.
    sampled: list[types.CreateMessageRequestParams] = []

    async def on_sampling(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        sampled.append(params)
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="hi"), model="m")

    async with gateway_client(gateway, MODERN, sampling_callback=on_sampling) as client:
        result = await client.call_tool("call_tool", {"name": "relay__draft", "arguments": {}})
    assert result.is_error and sampled == [], text(result)
    message = text(result)
    no_sdk_advice(message)
    assert "'draft' asks for input" in message and "a reply from the client's model (sampling)" in message
    assert "did not declare that it can answer them" in message
