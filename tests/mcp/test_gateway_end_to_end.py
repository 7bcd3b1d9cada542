"""The gateway end to end: a real process in front of real MCP servers, driven by the real `mcp` client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp_servers import (
    PY,
    GatewayProcess,
    everything_command,
    gateway_argv,
    gateway_env,
    git_server,
    http_gateway,
    make_git_repo,
    time_server,
    toy,
    write_config,
)
from mcp_servers.clients import GatewayClient, connect, text
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from toolsearch.embeddings import ToolsEmbedder

pytestmark = pytest.mark.slow

META = ["tool_search", "call_tool"]


Client_ = GatewayClient
over_http = connect


@asynccontextmanager
async def over_stdio(config: Path, *extra: str) -> AsyncIterator[Client_]:
    argv = gateway_argv(config, *extra)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=gateway_env())
    holder: list[Client_] = []

    async def handler(message: Any) -> None:
        if holder:
            await holder[0].on_message(message)

    async with stdio_client(params) as (read, write), ClientSession(read, write, message_handler=handler) as s:
        client = Client_(s)
        holder.append(client)
        with anyio.fail_after(60):
            await s.initialize()
        yield client


# --- stdio ---------------------------------------------------------------------------------------------


async def test_stdio_gateway_search_notify_and_call_real_servers(tmp_path: Path) -> None:
    repo = make_git_repo(tmp_path / "repo")
    config = write_config(tmp_path / "servers.json", {"time": time_server(), "git": git_server()})
    async with over_stdio(config) as client:
        init = client.session.initialize_result
        assert init is not None and init.capabilities.tools is not None and init.capabilities.tools.list_changed
        assert "tool_search" in (init.instructions or "")
        assert await client.names() == META

        found = await client.call("tool_search", {"query": "current time in a timezone"})
        assert not found.is_error and "time__get_current_time" in text(found)
        await client.wait_changed()
        names = await client.names()
        assert names[:2] == META and "time__get_current_time" in names
        listed = {t.name: t for t in (await client.session.list_tools()).tools}
        assert listed["time__get_current_time"].output_schema is not None  # the upstream's schema, unchanged

        now = await client.call("time__get_current_time", {"timezone": "UTC"})
        assert not now.is_error and now.structured_content is not None
        assert now.structured_content["timezone"] == "UTC"

        # through the passthrough, without a search for git first
        status = await client.call("call_tool", {"name": "git__git_status", "arguments": {"repo_path": str(repo)}})
        assert not status.is_error and "notes.txt" in text(status)
        await client.wait_changed()  # a tool called by name joins the session's list
        assert "git__git_status" in await client.names()

        # the upstream's own error comes back as a tool error
        bad = await client.call("time__get_current_time", {"timezone": "Not/AZone"})
        assert bad.is_error and "Not/AZone" in text(bad)


async def test_stdio_gateway_pins_and_other_backends(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"time": time_server()})
    async with over_stdio(config, "--pin", "time__convert_time", "--backend", "regex", "--no-call-tool") as client:
        assert await client.names() == ["tool_search", "time__convert_time"]
        found = await client.call("tool_search", {"query": "current_time$"})
        assert "time__get_current_time" in text(found)
        await client.wait_changed()
        assert await client.names() == ["tool_search", "time__convert_time", "time__get_current_time"]
        bad = await client.call("tool_search", {"query": "(unclosed"})
        assert bad.is_error and "escape" in text(bad).lower()


@pytest.mark.parametrize("quiet", [False, True])
def test_quiet_also_quiets_the_upstream_servers(tmp_path: Path, quiet: bool) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy(TOY_STDERR="toy chatter on stderr")})
    process = GatewayProcess(config, *(["--quiet"] if quiet else []))
    try:
        process.wait_ready()  # ready means the toy server has started, and written its line
    finally:
        process.stop()
    assert ("toy chatter on stderr" in process.stderr) is not quiet
    assert ("gateway ready" in process.stderr) is not quiet
    assert "listening on" in process.stderr  # the URL is the one line a quiet HTTP gateway prints


# --- streamable HTTP -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    folder = tmp_path_factory.mktemp("gateway")
    servers: dict[str, Any] = {
        "time": time_server(),
        "toy": toy(),
        "broken": {"command": str(folder / "no-such-server")},
    }
    command = everything_command()
    if command:
        servers["everything"] = {"command": command, "args": ["stdio"]}
    with http_gateway(write_config(folder / "servers.json", servers), "--pin", "toy__echo") as process:
        yield process


async def test_http_gateway_skips_a_broken_server_and_serves_the_rest(gateway: GatewayProcess) -> None:
    assert "'broken' skipped: command not found" in gateway.stderr
    async with over_http(gateway.url or "") as client:
        assert await client.names() == [*META, "toy__echo"]
        echoed = await client.call("toy__echo", {"text": "pinned"})
        assert text(echoed) == "pinned"
        missing = await client.call("broken__anything", {})
        assert missing.is_error and "tool_search" in text(missing)


async def test_two_clients_are_isolated(gateway: GatewayProcess) -> None:
    url = gateway.url or ""
    async with over_http(url) as alice, over_http(url) as bob:
        await alice.call("tool_search", {"query": "convert time between timezones", "max_results": 1})
        await alice.wait_changed()
        assert await alice.names() == [*META, "toy__echo", "time__convert_time"]
        assert await bob.names() == [*META, "toy__echo"]
        assert bob.changes == 0

        await bob.call("tool_search", {"query": "add two integers sum", "max_results": 1})
        await bob.wait_changed()
        assert await bob.names() == [*META, "toy__echo", "toy__add_numbers"]
        assert await alice.names() == [*META, "toy__echo", "time__convert_time"]
        assert text(await bob.call("toy__add_numbers", {"a": 2, "b": 40})) == "42"
    # a new connection is a new session
    async with over_http(url) as carol:
        assert await carol.names() == [*META, "toy__echo"]


async def test_upstream_crash_mid_session_is_a_tool_error(gateway: GatewayProcess) -> None:
    async with over_http(gateway.url or "") as client:
        await client.call("tool_search", {"query": "terminate server process crash", "max_results": 1})
        await client.wait_changed()
        assert "toy__crash" in await client.names()
        crashed = await client.call("toy__crash")
        assert crashed.is_error and "stopped (connection closed)" in text(crashed)
        # the gateway is still up, other servers answer, and the crashed one is restarted
        assert "toy__crash" in await client.names()
        now = await client.call("call_tool", {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}})
        assert not now.is_error and json.loads(text(now))["timezone"] == "UTC"
        again = await client.call("toy__echo", {"text": "back"})
        assert not again.is_error and text(again) == "back"


async def test_errors_come_back_as_tool_errors(gateway: GatewayProcess) -> None:
    async with over_http(gateway.url or "") as client:
        failed = await client.call("call_tool", {"name": "toy__fail"})
        assert failed.is_error and "always fails" in text(failed)
        wrong = await client.call("call_tool", {"name": "toy__add_numbers", "arguments": {"a": "two"}})
        assert wrong.is_error and "Schema: " in text(wrong) and '"b"' in text(wrong)
        nameless = await client.call("call_tool", {"arguments": {}})
        assert nameless.is_error and "needs" in text(nameless)
        empty = await client.call("tool_search", {"query": "  "})
        assert empty.is_error and "query" in text(empty)


async def test_upstream_list_changes_reach_search_and_clients(gateway: GatewayProcess) -> None:
    async with over_http(gateway.url or "") as watcher, over_http(gateway.url or "") as client:
        await watcher.names()  # the gateway knows a connection after its first request
        grown = await client.call("call_tool", {"name": "toy__grow", "arguments": {"name": "quokka_census"}})
        assert not grown.is_error
        await watcher.wait_changed()  # every client hears that the catalog changed
        found = await client.call("tool_search", {"query": "quokka census", "max_results": 1})
        assert "toy__quokka_census" in text(found)


async def test_high_level_client_in_legacy_mode_gets_the_handshake_era(gateway: GatewayProcess) -> None:
    # A handshake-era client keeps its progressive list: found tools join it.
    async with Client(gateway.url or "", mode="legacy") as client:
        assert client.session.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
        assert [t.name for t in (await client.list_tools()).tools][:2] == META
        await client.call_tool("tool_search", {"query": "current time"})
        names = [t.name for t in (await client.list_tools()).tools]
        assert "time__get_current_time" in names


async def test_high_level_auto_client_picks_the_2026_era_on_the_same_endpoint(gateway: GatewayProcess) -> None:
    # mcp.Client probes `server/discover` first; the gateway answers it, so the client speaks 2026-07-28
    # and its list stays the same after a search (the found definition is in the result).
    async with Client(gateway.url or "") as client:
        assert client.session.protocol_version == "2026-07-28"
        before = [t.name for t in (await client.list_tools(cache_mode="bypass")).tools]
        found = await client.call_tool("tool_search", {"query": "current time"})
        assert "time__get_current_time" in text(found)
        assert [t.name for t in (await client.list_tools(cache_mode="bypass")).tools] == before


async def test_npm_reference_server_through_the_gateway(gateway: GatewayProcess) -> None:
    # installed by .ci/setup.d/mcp-server-everything.sh, which fails CI when it cannot
    assert everything_command(), "@modelcontextprotocol/server-everything is not installed (see .ci/setup.d)"
    async with over_http(gateway.url or "") as client:
        found = await client.call("tool_search", {"query": "sum of two numbers", "namespace": "everything"})
        assert "everything__get-sum" in text(found)
        await client.wait_changed()
        summed = await client.call("everything__get-sum", {"a": 19, "b": 23})
        assert not summed.is_error and "42" in text(summed)
        echoed = await client.call("call_tool", {"name": "everything__echo", "arguments": {"message": "hi"}})
        assert "hi" in text(echoed)


async def test_http_gateway_advertises_tool_list_changes(gateway: GatewayProcess) -> None:
    # The gateway sends tools/list_changed over HTTP too, so it must say so: a client that follows
    # the capability (the TypeScript SDK's `listChanged` option) refreshes only when it is true.
    async with over_http(gateway.url or "") as client:
        init = client.session.initialize_result
        assert init is not None and init.capabilities.tools is not None
        assert init.capabilities.tools.list_changed is True


async def test_tool_search_input_is_checked_like_its_schema_says(gateway: GatewayProcess) -> None:
    async with over_http(gateway.url or "") as client:
        listed = {t.name: t for t in (await client.session.list_tools()).tools}
        schema = listed["tool_search"].input_schema
        limit = schema["properties"]["query"]["maxLength"]
        assert schema["properties"]["max_results"]["type"] == "integer"

        huge = "quokka " * 3000
        long_query = await client.call("tool_search", {"query": huge})
        said = text(long_query)
        assert long_query.is_error and f"{len(huge.strip())} characters" in said and f"limit is {limit}" in said
        assert "quokka quokka" not in said and len(said) < 500  # the query is not repeated back

        for wrong in ("3", True, 2.5):
            result = await client.call("tool_search", {"query": "current time", "max_results": wrong})
            assert result.is_error and "`max_results`" in text(result) and "integer" in text(result)
        assert client.changes == 0  # nothing was searched, so nothing was added


async def test_tools_list_with_an_unknown_cursor_is_invalid_params(gateway: GatewayProcess) -> None:
    async with over_http(gateway.url or "") as client:
        with pytest.raises(MCPError) as raised:
            await client.session.list_tools(params=types.PaginatedRequestParams(cursor="not-a-cursor"))
        assert raised.value.error.code == types.INVALID_PARAMS and "cursor" in raised.value.error.message
        assert await client.names() == [*META, "toy__echo"]  # the connection is still fine


# --- start-up ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--port", "99999", "argument --port: must be from 0 to 65535"),
        ("--path", "mcp", "argument --path: must start with '/'"),
        ("--max-discovered", "0", "argument --max-discovered: must be at least 1"),
        ("--usage-privacy", "secret", "argument --usage-privacy: invalid choice: 'secret'"),
    ],
)
def test_bad_values_are_refused_before_any_upstream_starts(tmp_path: Path, flag: str, value: str, said: str) -> None:
    import subprocess

    marker = tmp_path / "started"
    config = write_config(tmp_path / "servers.json", {"toy": toy(TOY_STDERR=f"started {marker}")})
    toolsearch = Path(PY).parent / "toolsearch"
    done = subprocess.run(
        [str(toolsearch), "mcp", "serve", "--config", str(config), "--transport", "http", flag, value],
        capture_output=True,
        text=True,
        env=gateway_env(),
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
    assert "ExceptionGroup" not in done.stderr and "started" not in done.stderr  # no upstream was started


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        # Before: NaN compared false with every bound, so it passed the checks and turned the limit off.
        ("--rate-limit", "nan", "--rate-limit must be >= 0"),
        ("--session-ttl", "nan", "--session-ttl must be a positive number of seconds, got nan"),
        # Before: found only after the upstream servers had started, and said twice.
        ("--backend", "bogus", "unknown backend 'bogus'; choose one of: auto, bm25"),
    ],
)
def test_settings_that_cannot_work_are_refused_once_before_any_upstream_starts(
    tmp_path: Path, flag: str, value: str, said: str
) -> None:
    import subprocess

    marker = tmp_path / "started"
    config = write_config(tmp_path / "servers.json", {"toy": toy(TOY_STDERR=f"started {marker}")})
    done = subprocess.run(
        [str(Path(PY).parent / "toolsearch"), "mcp", "serve", "--config", str(config), "--transport", "http", flag,
         value],
        capture_output=True, text=True, env=gateway_env(), timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    # a usage error (docs/cli.md: exit 2), as `toolsearch build --backend bogus` is
    assert done.returncode == 2 and len(lines) == 1 and said in lines[0], done.stderr
    assert "started" not in done.stderr  # no upstream was started


def test_an_ipv6_host_is_announced_in_brackets_and_the_backend_choice_is_logged(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    with http_gateway(config, "--host", "::1") as gateway:
        assert (gateway.url or "").startswith("http://[::1]:")
        # the default backend says which it is and why; faiss's CPU-build lines are not shown
        ready = next(line for line in gateway.lines if "gateway ready" in line)
        assert f"hybrid index, model {ToolsEmbedder().model_id}: the vector extra and its embedding model are " \
            "installed" in ready
        assert " tools from 1 server (" in ready  # one server, not "1 servers"
        assert "AVX512" not in gateway.stderr


def test_the_listening_socket_sends_small_writes_at_once() -> None:
    """TCP_NODELAY on the gateway's socket (accepted connections inherit it): without it a 2026-era response,
    written as headers then body, waited for the client's delayed ACK, about 40 ms per request on loopback."""
    import socket

    from toolsearch.mcp.gateway import reuse_port_socket

    for reuse in (False, True):
        sock = reuse_port_socket("127.0.0.1", 0, reuse=reuse)
        try:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        finally:
            sock.close()
