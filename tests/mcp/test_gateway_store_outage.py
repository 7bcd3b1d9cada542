"""A gateway whose catalog is in Postgres, while Postgres fails: 503 with Retry-After, never a list it could not check.

A real `toolsearch mcp serve --store postgresql://...` over a real Postgres (tests/pg_server.py), which the tests
stop, pause and kill under it. Over HTTP every request that needs the catalog (a handshake-era tools/list or
tools/call, a 2026-07-28 request) is answered 503 with a Retry-After header and a JSON-RPC error naming the store
without its password, both when the failure is known before the request (the pool's and the change watcher's
last word) and when the store fails while the request is served (a search on a hung server); on stdio the same
JSON-RPC error is the answer. Once Postgres answers again, the same gateway answers as before, no restart.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp_servers import PY, GatewayProcess, gateway_env, toy, wait_until, write_config
from pg_server import PASSWORD, PostgresServer, own_pg_server  # noqa: F401  (own_pg_server: a fixture)

from toolsearch.mcp.errors import CATALOG_UNAVAILABLE, RETRY_AFTER_SECONDS

pytestmark = pytest.mark.slow

HANDSHAKE = "2025-11-25"
MODERN = "2026-07-28"
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
OUTAGE_LOGGED = "what needs the catalog store fails until it answers"


def _message(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC message of a response, JSON or one SSE event."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return dict(json.loads(data[-1]))
    return dict(response.json())


class Handshake:
    """A handshake-era session spoken to in raw HTTP: its answers' status and headers are the test's to read."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.next_id = 1
        hello = {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
        opened = self.post("initialize", hello, session=False)
        assert opened.status_code == 200, opened.text
        self.headers = {**ACCEPT, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": HANDSHAKE}
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert httpx2.post(url, json=note, headers=self.headers, timeout=30).status_code == 202

    def post(self, method: str, params: dict[str, Any], *, session: bool = True) -> httpx2.Response:
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        return httpx2.post(self.url, json=body, headers=self.headers if session else ACCEPT, timeout=60)

    def list(self) -> httpx2.Response:
        return self.post("tools/list", {})

    def search(self, query: str) -> httpx2.Response:
        return self.post("tools/call", {"name": "tool_search", "arguments": {"query": query}})


def modern(url: str, method: str, params: dict[str, Any]) -> httpx2.Response:
    """One self-contained 2026-07-28 request."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    }
    headers = {**ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": method}
    if "name" in params:
        headers["mcp-name"] = params["name"]
    body = {"jsonrpc": "2.0", "id": 9, "method": method, "params": {**params, "_meta": meta}}
    return httpx2.post(url, json=body, headers=headers, timeout=60)


def assert_unavailable(response: httpx2.Response, server: PostgresServer, why: str = "") -> None:
    """503, Retry-After, and the JSON-RPC error naming the store (no password) and saying when to retry."""
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == str(RETRY_AFTER_SECONDS)
    assert response.headers["content-type"] == "application/json"
    assert PASSWORD not in response.text
    error = response.json()["error"]
    assert error["code"] == CATALOG_UNAVAILABLE and error["data"] == {"retryAfter": RETRY_AFTER_SECONDS}, error
    assert f"catalog store postgresql://***@127.0.0.1:{server.port}/postgres failed to" in error["message"], error
    assert why in error["message"] and f"retry in {RETRY_AFTER_SECONDS} s" in error["message"], error


def assert_found(response: httpx2.Response, tool: str) -> None:
    assert response.status_code == 200, response.text
    result = _message(response)["result"]
    assert not result.get("isError") and tool in json.dumps(result), result


@contextmanager
def gateway_over(server: PostgresServer, folder: Path) -> Iterator[GatewayProcess]:
    config = write_config(folder / "servers.json", {"toy": toy()})
    gateway = GatewayProcess(config, "--store", server.dsn(), "--catalog", "outage")
    try:
        gateway.wait_ready(300)
        yield gateway
    finally:
        gateway.stop()
    assert PASSWORD not in gateway.stderr  # the DSN's password is in no log line


def test_postgres_down_is_503_with_retry_after_in_both_eras_then_answers_again(
    own_pg_server: PostgresServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    with gateway_over(own_pg_server, tmp_path) as gateway:
        url = gateway.url or ""
        client = Handshake(url)
        assert_found(client.search("echo text back"), "toy__echo")
        assert_found(client.list(), "toy__echo")  # the session's list grew

        own_pg_server.stop()
        assert gateway.logged(OUTAGE_LOGGED, 30), gateway.stderr  # the watcher lost the store at once
        assert_unavailable(client.list(), own_pg_server, "Postgres down or restarting")
        assert_unavailable(client.search("add two integers"), own_pg_server)
        call = {"name": "toy__echo", "arguments": {"text": "hi"}}
        assert_unavailable(client.post("tools/call", call), own_pg_server)
        assert_unavailable(modern(url, "tools/list", {}), own_pg_server)
        search = {"name": "tool_search", "arguments": {"query": "add two integers"}}
        assert_unavailable(modern(url, "tools/call", search), own_pg_server)
        ping = client.post("ping", {})  # what needs no catalog is served
        assert ping.status_code == 200 and "result" in _message(ping), ping.text

        own_pg_server.start()
        assert gateway.logged("answers again", 30), gateway.stderr
        assert_found(client.search("add two integers"), "toy__add_numbers")  # the same session, the same gateway
        listed = client.list()
        assert_found(listed, "toy__echo")
        assert "toy__add_numbers" in json.dumps(_message(listed))
        assert_found(modern(url, "tools/call", search), "toy__add_numbers")
        assert modern(url, "tools/list", {}).status_code == 200


def test_postgres_hung_or_killed_mid_search_is_503_then_answers_again(
    own_pg_server: PostgresServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    with gateway_over(own_pg_server, tmp_path) as gateway:
        url = gateway.url or ""
        client = Handshake(url)
        assert_found(client.search("echo text back"), "toy__echo")

        def answers_again() -> bool:
            response = client.search("add two integers")
            if response.status_code == 503:
                return False
            assert_found(response, "toy__add_numbers")
            return True

        own_pg_server.pause()  # nothing answers, connections stay open: nobody knows yet
        try:
            # the search is inside Postgres when it hangs: cut off by the gateway, answered 503 all the same
            assert_unavailable(client.search("add two integers"), own_pg_server, "did not answer within")
            assert_unavailable(client.list(), own_pg_server, "did not answer within")  # known now: refused at once
        finally:
            own_pg_server.resume()
        assert wait_until(answers_again, timeout=60, interval=0.5), gateway.stderr

        own_pg_server.pause()
        answers: list[httpx2.Response] = []
        searching = threading.Thread(target=lambda: answers.append(client.search("process id of this server")))
        try:
            searching.start()
            searching.join(1.0)  # (most likely) inside Postgres by now
            own_pg_server.kill()  # restarted mid-query
        finally:
            own_pg_server.resume()
        searching.join(60)
        assert len(answers) == 1
        assert_unavailable(answers[0], own_pg_server)
        own_pg_server.start()
        assert wait_until(answers_again, timeout=60, interval=0.5), gateway.stderr


async def test_a_stdio_gateway_says_the_same_in_its_json_rpc_error(
    own_pg_server: PostgresServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    argv = ["-m", "toolsearch.mcp", "--config", str(config), "--store", own_pg_server.dsn(), "--catalog", "stdio"]
    server = StdioServerParameters(command=PY, args=argv, env=gateway_env())
    with (tmp_path / "stderr.txt").open("w+") as errlog:
        async with stdio_client(server, errlog=errlog) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            found = await client.call_tool("tool_search", {"query": "echo text back"})
            assert not found.is_error and "toy__echo" in found.content[0].text  # type: ignore[union-attr]
            own_pg_server.stop()
            with pytest.raises(MCPError) as caught:
                await client.call_tool("tool_search", {"query": "add two integers"})
            error = caught.value.error
            assert error.code == CATALOG_UNAVAILABLE and error.data == {"retryAfter": RETRY_AFTER_SECONDS}
            assert f"catalog store postgresql://***@127.0.0.1:{own_pg_server.port}/postgres" in error.message
            assert PASSWORD not in error.message
            with pytest.raises(MCPError) as listed:
                await client.list_tools()
            assert listed.value.error.code == CATALOG_UNAVAILABLE
            own_pg_server.start()
            assert wait_until(lambda: "answers again" in Path(errlog.name).read_text(), timeout=30)
            again = await client.call_tool("tool_search", {"query": "add two integers"})
            assert not again.is_error and "toy__add_numbers" in again.content[0].text  # type: ignore[union-attr]
        errlog.seek(0)
        assert PASSWORD not in errlog.read()
