"""Client messages the MCP SDK would drop (or answer with a pydantic dump) get the JSON-RPC error the spec gives.

Before: over stdio a JSON-RPC batch, a line that is not JSON, a request whose id is 1.5 and a request holding a lone
surrogate escape (`\\ud800`) got no answer at all, so the client waited for ever (the SDK's transport hands the first,
second and fourth to its dispatcher as exceptions, which it only logs; it reads the third as a notification). Over
HTTP a batch in a 2025-03-26 session got 400 with code -32602 and a kilobyte of pydantic's error. Now each gets a short
-32700 (parse error) or -32600 (invalid request), `id: null` unless the message's id could be read, and the
connection serves on. A batch is refused on every version (MCP removed batches in 2025-06-18), saying so. A real
gateway process over stdio (raw JSON-RPC lines) and over streamable HTTP (raw POSTs), in front of the toy server; and
`Gateway.serve_streams` in this process, for a stream pair whose transport sends such a message on as an exception.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage
from mcp_servers import gateway_argv, gateway_env, http_gateway, toy, write_config

from toolsearch.mcp import GatewaySettings
from toolsearch.mcp.gateway import Gateway
from toolsearch.mcp.source import MCPToolSource

pytestmark = pytest.mark.slow

BATCH = [{"jsonrpc": "2.0", "id": 10, "method": "ping"}, {"jsonrpc": "2.0", "id": 11, "method": "tools/list"}]
SURROGATE = (
    '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"tool_search","arguments":{"query":"\\ud800"}}}'
)
SHORT = 300  # characters: a message that says what is wrong, never a validation dump
# Responses (to the server's requests) the SDK's types refuse: JSON-RPC allows any result, MCP's types want an object
BAD_RESPONSES = (
    '{"jsonrpc": "2.0", "id": 5, "result": null}',
    '{"jsonrpc": "2.0", "id": 1.0, "result": {}}',
    '{"jsonrpc": "2.0", "id": 5, "result": []}',
    '{"jsonrpc": "2.0", "id": 5, "error": {"code": "x", "message": "no"}}',
    '{"jsonrpc": "2.0", "id": 5, "result": {"text": "\\ud800"}}',
)


def _refused(answer: Any, code: int, request_id: Any = None) -> str:
    """The message of a JSON-RPC error answer with `code` and `request_id`, checked to be short."""
    assert isinstance(answer, dict) and answer.get("id", "missing") == request_id, answer
    error = answer["error"]
    assert error["code"] == code and len(error["message"]) < SHORT and "validation error" not in error["message"]
    return str(error["message"])


class _StdioGateway:
    """A gateway process over stdio, driven with raw JSON-RPC lines."""

    def __init__(self, config: Path) -> None:
        self.process = subprocess.Popen(
            gateway_argv(config, "--backend", "bm25", "--quiet"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=gateway_env(),
            text=True,
        )

    def send(self, message: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
        self.process.stdin.flush()

    def read(self, timeout: float = 20.0) -> Any:
        """The next message, or "no answer" after `timeout` seconds (before: every probe below ended here)."""
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            return "no answer"
        line = self.process.stdout.readline()
        return json.loads(line) if line else "closed"

    def request(self, request_id: int, method: str, params: dict[str, Any] | None = None) -> Any:
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, **({"params": params} if params else {})})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            answer = self.read(deadline - time.monotonic())
            if not isinstance(answer, dict) or answer.get("id") == request_id:
                return answer
        return "no answer"

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def stdio_gateway(tmp_path: Path) -> Iterator[_StdioGateway]:
    gateway = _StdioGateway(write_config(tmp_path / "servers.json", {"toy": toy()}))
    try:
        yield gateway
    finally:
        gateway.close()


def test_over_stdio_each_malformed_message_is_answered_and_the_connection_serves_on(
    stdio_gateway: _StdioGateway,
) -> None:
    gateway = stdio_gateway
    hello = {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    assert gateway.request(0, "initialize", hello)["result"]["protocolVersion"] == "2025-03-26"
    gateway.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    gateway.send(BATCH)  # a revision that still had batches: refused all the same, saying so
    assert "batches are not supported" in _refused(gateway.read(), -32600)
    gateway.send("{not json")
    assert _refused(gateway.read(), -32700).startswith("Parse error")
    gateway.send({"jsonrpc": "2.0", "id": 1.5, "method": "ping"})
    assert "string or an integer" in _refused(gateway.read(), -32600)
    gateway.send("42")
    assert "JSON object" in _refused(gateway.read(), -32600)
    gateway.send(SURROGATE)  # valid JSON the SDK cannot read: answered under its id, so the client can match it
    assert "lone surrogate" in _refused(gateway.read(), -32700, request_id=5)

    assert gateway.request(12, "ping") == {"jsonrpc": "2.0", "id": 12, "result": {}}
    listed = gateway.request(13, "tools/list")["result"]["tools"]
    assert [t["name"] for t in listed] == ["tool_search", "call_tool"]


def test_over_stdio_a_response_the_sdk_cannot_read_is_dropped_never_answered_under_its_id(
    stdio_gateway: _StdioGateway,
) -> None:
    # Before: each was answered with -32600 under the response's id, an id of the server's own requests: a client
    # whose own request had that id (here the ping of id 5) took the error for its answer, and the real one came second.
    gateway = stdio_gateway
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    assert gateway.request(0, "initialize", hello)["result"]["protocolVersion"] == "2025-06-18"
    gateway.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    for response in BAD_RESPONSES:
        gateway.send(response)
    gateway.send({"jsonrpc": "2.0", "id": 5, "method": "ping"})
    assert gateway.read() == {"jsonrpc": "2.0", "id": 5, "result": {}}  # the first message since: the ping's answer
    gateway.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert gateway.read() == {"jsonrpc": "2.0", "id": 1, "result": {}}
    # a message that is neither a request nor a response is answered, but under no id: it may be either's
    gateway.send({"jsonrpc": "2.0", "id": 6})
    assert '"method"' in _refused(gateway.read(), -32600)


async def test_over_http_a_malformed_body_is_answered_400_with_a_short_json_rpc_error(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    hello = {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    with http_gateway(config, "--backend", "bm25") as gateway:
        async with httpx.AsyncClient(timeout=30) as http:
            url = gateway.url or ""
            opened = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
                                     headers=headers)  # fmt: skip
            assert opened.status_code == 200
            session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
            session["mcp-protocol-version"] = "2025-03-26"
            done = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            assert done.status_code == 202

            for body, code, says in (
                (json.dumps(BATCH), -32600, "batches are not supported"),  # before: -32602 and pydantic's 1 kB
                ("{not json", -32700, "Parse error"),
                ('{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', -32600, "string or an integer"),
                (SURROGATE, -32700, "lone surrogate"),
                # a response: its 400 (the POST's own answer) says it is one; before: "(method: Field required)"
                (BAD_RESPONSES[0], -32600, "not a valid JSON-RPC 2.0 response (result:"),
            ):
                answer = await http.post(url, content=body, headers=session)
                assert answer.status_code == 400 and answer.headers["content-type"] == "application/json"
                assert says in _refused(answer.json(), code)

            pong = await http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=session)
            assert pong.status_code == 200 and '"result":{}' in pong.text  # the session serves on


async def _served(raws: list[str], answers: int) -> list[types.JSONRPCMessage]:
    """The first `answers` messages a real gateway's `serve_streams` sends back for `raws`, each given to it as the
    exception the SDK's own reader raised on it (as its stdio transport passes on a message it could not read)."""
    unread = []
    for raw in raws:
        try:
            types.jsonrpc_message_adapter.validate_json(raw, by_name=False)
        except Exception as exc:
            unread.append(exc)
    assert len(unread) == len(raws)
    with open(os.devnull, "w") as quiet:
        async with MCPToolSource({"mcpServers": {"toy": toy()}}, errlog=quiet) as source:
            gateway = await anyio.to_thread.run_sync(lambda: Gateway(source, GatewaySettings(backend="bm25")))
            to_gateway, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](4)
            write_stream, from_gateway = anyio.create_memory_object_stream[SessionMessage](4)
            async with anyio.create_task_group() as tg:
                tg.start_soon(gateway.serve_streams, read_stream, write_stream)
                with anyio.fail_after(20):  # before: no answer ever came
                    for item in unread:
                        await to_gateway.send(item)
                    said = [(await from_gateway.receive()).message for _ in range(answers)]
                await to_gateway.aclose()
    return said


async def test_serve_streams_answers_a_message_its_transport_could_not_read() -> None:
    # A transport (the SDK's stdio one among them) sends a message it could not read on as the exception its reader
    # raised; the SDK's dispatcher only logs it. serve_streams answers it instead.
    answers = await _served([json.dumps(BATCH), "{not json"], 2)
    assert [a.error.code for a in answers if isinstance(a, types.JSONRPCError)] == [-32600, -32700]
    assert "batches are not supported" in answers[0].error.message  # type: ignore[union-attr]


async def test_serve_streams_drops_a_response_its_transport_could_not_read() -> None:
    # Before: answered with -32600 (`id: null`), although JSON-RPC answers no response.
    [first] = await _served([BAD_RESPONSES[0], "{not json"], 1)
    assert isinstance(first, types.JSONRPCError) and first.error.code == -32700, first  # the line that is not JSON
