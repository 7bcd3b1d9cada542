"""MCP servers as a tool source: config parsing, paging, namespacing, routing, list changes, failures."""

from __future__ import annotations

import json
import random
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_servers import PY, git_server, make_git_repo, time_server, toy

from toolsearch import ToolIndex
from toolsearch.mcp import MCPConfigError, load_config, parse_config
from toolsearch.mcp.source import (
    MCPToolSource,
    collect_tools,
    mcp_definition,
    namespaced_name,
    restart_delay,
    tool_from_mcp,
    upstream_of,
)

# --- config ------------------------------------------------------------------------------------


def test_config_reads_stdio_and_http_entries(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC", "N": 3}},
                    "remote": {"url": "https://example.test/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
                    "legacy": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
                    "local": {"command": "./run.sh", "cwd": "sub", "startupTimeout": 5},
                    "off": {"command": "nothing", "disabled": True},
                    "extras": {"command": "x", "autoApprove": ["a"], "type": "stdio"},
                }
            }
        )
    )
    config = load_config(path, environ={"TOKEN": "s3cret"})
    assert config.names == ["time", "remote", "legacy", "local", "extras"]
    assert config["time"].transport == "stdio"
    assert config["time"].args == ("mcp-server-time",)
    assert config["time"].env == {"TZ": "UTC", "N": "3"}
    assert config["remote"].transport == "http"
    assert config["remote"].headers == {"Authorization": "Bearer s3cret"}
    assert config["legacy"].transport == "sse"
    assert config["local"].cwd == str(tmp_path / "sub")
    assert config["local"].startup_timeout == 5
    assert "s3cret" not in config["remote"].describe()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "no 'mcpServers'"),
        ({"mcpServers": []}, "must be an object"),
        ({"mcpServers": {}}, "no enabled servers"),
        ({"mcpServers": {"a": {"args": ["x"]}}}, r"neither 'command' \(a stdio server\) nor 'url'.*keys: 'args'"),
        ({"mcpServers": {"a": {"type": "http"}}}, "needs 'url'"),
        ({"mcpServers": {"a": {"type": "stdio"}}}, "needs 'command'"),
        ({"mcpServers": {"a": {"type": "websocket", "url": "ws://x"}}}, "unknown type 'websocket'"),
        ({"mcpServers": {"a": {"url": "ftp://x"}}}, "must start with http"),
        ({"mcpServers": {"bad name": {"command": "x"}}}, "names must start"),
        ({"mcpServers": {"a": {"command": "x", "args": "not-a-list"}}}, "args"),
        ({"mcpServers": {"a": {"command": "${MISSING_VAR}"}}}, "MISSING_VAR is not set"),
        ({"mcpServers": {"a": {"command": "x", "startupTimeout": 0}}}, "startupTimeout"),
    ],
)
def test_config_errors_say_what_to_fix(data: Any, message: str) -> None:
    with pytest.raises(MCPConfigError, match=message):
        parse_config(data, environ={})


def test_config_variable_defaults_and_file_errors(tmp_path: Path) -> None:
    config = parse_config({"mcpServers": {"a": {"command": "${CMD:-python}", "args": ["${ARG:-}"]}}}, environ={})
    assert config["a"].command == "python" and config["a"].args == ("",)
    with pytest.raises(MCPConfigError, match="not found"):
        load_config(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"mcpServers": {')
    with pytest.raises(MCPConfigError, match=r"broken.json:1: invalid JSON"):
        load_config(broken)


# --- names and conversion ------------------------------------------------------------------------


def test_namespaced_names_are_provider_safe() -> None:
    assert namespaced_name("time", "get_current_time") == "time__get_current_time"
    assert namespaced_name("my.server", "get-sum") == "my_server__get-sum"
    long = namespaced_name("server", "x" * 100)
    assert len(long) <= 64 and long.startswith("server__x")
    assert namespaced_name("s", "a.b/c") != namespaced_name("s", "a_b_c")


def test_tool_from_mcp_keeps_origin_and_output_schema() -> None:
    definition = {
        "name": "get-sum",
        "title": "Sum",
        "description": "Returns the sum of two numbers",
        "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
        "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}},
        "annotations": {"readOnlyHint": True},
    }
    tool = tool_from_mcp(definition, "everything")
    assert tool.name == "everything__get-sum"
    assert tool.namespace == "everything"
    assert upstream_of(tool) == ("everything", "get-sum")
    shown = mcp_definition(tool).model_dump(by_alias=True, exclude_none=True)
    assert shown["name"] == "everything__get-sum"
    assert shown["outputSchema"] == definition["outputSchema"]
    assert shown["title"] == "Sum" and shown["annotations"]["readOnlyHint"] is True


def test_pins_expand_names_servers_and_globs() -> None:
    from toolsearch import Catalog
    from toolsearch.mcp.gateway import resolve_pins

    catalog = Catalog(
        tool_from_mcp({"name": n, "inputSchema": {"type": "object"}}, server)
        for server, n in [("git", "git_status"), ("git", "git_log"), ("github", "create_issue"), ("time", "now")]
    )
    pinned, unmatched = resolve_pins(["time__now", "git", "github__*", "nope", "git__git_log"], catalog)
    assert pinned == ["time__now", "git__git_status", "git__git_log", "github__create_issue"]
    assert unmatched == ["nope"]


# --- real servers ------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_lists_every_page_and_namespaces_equal_names_apart() -> None:
    config = {"mcpServers": {"a": toy(TOY_PAGE_SIZE="1", TOY_EXTRA_TOOLS="5"), "b": toy(TOY_PAGE_SIZE="4")}}
    async with MCPToolSource(config) as source:
        assert source.failures == {}
        names = [t.name for t in source.tools()]
        assert len([n for n in names if n.startswith("a__")]) == 12  # 7 tools + 5 fillers, one per page
        assert "a__echo" in names and "b__echo" in names
        assert source.route("b__echo") == ("b", "echo")
        # equal names on two servers reach two different processes
        pid_a = (await source.call_tool("a__pid")).content[0].text  # type: ignore[union-attr]
        pid_b = (await source.call_tool("b__pid")).content[0].text  # type: ignore[union-attr]
        assert pid_a != pid_b
        echoed = await source.call_tool("b__echo", {"text": "hello"})
        assert not echoed.is_error and echoed.content[0].text == "hello"  # type: ignore[union-attr]


@pytest.mark.slow
async def test_real_time_and_git_servers(tmp_path: Path) -> None:
    repo = make_git_repo(tmp_path / "repo")
    async with MCPToolSource({"mcpServers": {"time": time_server(), "git": git_server()}}) as source:
        names = {t.name for t in source.tools()}
        assert {"time__get_current_time", "time__convert_time", "git__git_status", "git__git_log"} <= names
        now = await source.call_tool("time__get_current_time", {"timezone": "UTC"})
        assert not now.is_error and now.structured_content["timezone"] == "UTC"  # type: ignore[index]
        status = await source.call_tool("git__git_status", {"repo_path": str(repo)})
        assert not status.is_error
        assert "notes.txt" in status.content[0].text  # type: ignore[union-attr]
        # the upstream's own error is a tool error, not an exception
        bad = await source.call_tool("time__get_current_time", {"timezone": "Not/AZone"})
        assert bad.is_error and "Not/AZone" in bad.content[0].text  # type: ignore[union-attr]
        unknown = await source.call_tool("time__nope", {})
        assert unknown.is_error and "no MCP server offers" in unknown.content[0].text  # type: ignore[union-attr]


ERAS = {
    # TOY_ERA / TOY_LISTEN -> (the version spoken, how changes reach the gateway)
    "handshake-only": (toy(TOY_ERA="handshake"), "2025-11-25", "notifications"),
    "modern-only": (toy(TOY_ERA="modern", TOY_LISTEN="1"), "2026-07-28", "listen"),
    "dual-era": (toy(TOY_LISTEN="1"), "2026-07-28", "listen"),
    "modern without listen": (toy(TOY_ERA="modern"), "2026-07-28", "ttl"),
    "dual-era without listen": (toy(), "2026-07-28", "ttl"),
}


@pytest.mark.slow
@pytest.mark.parametrize("era", list(ERAS))
async def test_list_changed_refreshes_the_catalog_and_the_index(era: str) -> None:
    """Each stdio upstream is spoken to in the newest era it serves, and its tool changes are heard in that era."""
    entry, version, changes = ERAS[era]
    async with MCPToolSource({"mcpServers": {"toy": entry}}) as source:
        upstream = source.servers["toy"]
        assert (upstream.protocol_version, upstream.changes) == (version, changes)
        assert upstream.era.startswith(f"speaks {version} (")
        index = ToolIndex.build(source.catalog(), backend="bm25")
        changed = anyio.Event()

        async def listener(src: MCPToolSource, server: str) -> None:
            index.sync(src.catalog())
            changed.set()

        source.add_listener(listener)
        assert not index.search("zebra", 3).hits
        await source.call_tool("toy__grow", {"name": "zebra_counter"})
        with anyio.fail_after(30):  # without listen: the next re-listing, RELIST_FLOOR (ttlMs 0) from the last
            await changed.wait()
        assert "toy__zebra_counter" in {t.name for t in source.tools()}
        assert index.search("zebra counter", 3).names[0] == "toy__zebra_counter"
        assert (await source.call_tool("toy__zebra_counter")).content[0].text == "zebra_counter did nothing"  # type: ignore[union-attr]


@pytest.mark.slow
async def test_failing_servers_are_reported_and_skipped() -> None:
    config = {
        "mcpServers": {
            "good": toy(),
            "missing": {"command": "/nonexistent/mcp-server"},
            "exits": toy(TOY_STARTUP="exit"),
            "hangs": {**toy(TOY_STARTUP="hang"), "startupTimeout": 1},
            # a credential in the URL (a ${VAR} expanded there) must not reach the message
            "unreachable": {"url": "http://ana:hunter2@127.0.0.1:9/mcp?key=hunter2", "startupTimeout": 5},
        }
    }
    async with MCPToolSource(config) as source:
        failures = source.failures
        assert set(failures) == {"missing", "exits", "hangs", "unreachable"}
        assert "command not found" in failures["missing"]
        assert "before completing the MCP handshake" in failures["exits"]
        assert "within 1 s" in failures["hangs"]
        assert "127.0.0.1:9" in failures["unreachable"] and "hunter2" not in failures["unreachable"]
        assert source.ready == ["good"]
        assert {t.namespace for t in source.tools()} == {"good"}
        assert (await source.call_tool("good__echo", {"text": "still here"})).content[0].text == "still here"  # type: ignore[union-attr]


@contextmanager
def web_page_at() -> Iterator[str]:
    """The URL of a local server that answers every GET with a web page, as a site that is no MCP server does."""

    class Page(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            body = b"<html><body>Welcome</body></html>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/sse"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_failure_without_words_of_its_own_is_named_by_its_class_and_message() -> None:
    """An error the source has no sentence for (here the SSE client's, for a legacy SSE URL that serves a web page)
    is quoted as `Name: message`, the form every error quoted for a user takes."""
    with web_page_at() as url:
        async with MCPToolSource({"mcpServers": {"page": {"type": "sse", "url": url, "startupTimeout": 5}}}) as source:
            failure = source.failures["page"]
    assert failure.startswith("SSEError: ") and "'text/html'" in failure, failure


@pytest.mark.slow
async def test_a_probe_met_strangely_falls_back_to_the_handshake_or_fails_clearly() -> None:
    """A stdio server that closes its pipe, stays silent or answers garbage to server/discover: never a hang."""
    config = {
        "mcpServers": {
            "closes": toy(TOY_PROBE="close"),  # started again, spoken to with the handshake
            "silent": {**toy(TOY_PROBE="silent"), "startupTimeout": 9},  # the probe waits 3 s, then the handshake
            "garbage": toy(TOY_PROBE="garbage"),  # a stray line ends the probe at once: the handshake
            "all-garbage": toy(TOY_PROBE="garbage-all"),
            "refuses-2026": toy(TOY_ERA="handshake"),  # -32601 to the probe
        }
    }
    async with MCPToolSource(config) as source:
        # No server waited out its startup timeout (30 s; 9 s for "silent", whose probe gives up after 3 s): each
        # started, and the one that failed failed for its garbage, not for a timeout ("... within N s").
        assert set(source.failures) == {"all-garbage"}
        failure = source.failures["all-garbage"]
        assert "within" not in failure
        assert "initialize handshake with output that is not JSON-RPC" in failure
        assert "'toy server: this line is not JSON-RPC'" in failure
        for name in ("closes", "silent", "garbage", "refuses-2026"):
            server = source.servers[name]
            assert server.protocol_version == "2025-11-25" and server.changes == "notifications", name
            echoed = await source.call_tool(f"{name}__echo", {"text": name})
            assert echoed.content[0].text == name  # type: ignore[union-attr]
        # the re-started server still hears of changes, in the handshake era
        changed = anyio.Event()

        async def listener(src: MCPToolSource, server: str) -> None:
            if server == "closes":
                changed.set()

        source.add_listener(listener)
        await source.call_tool("closes__grow", {"name": "late"})
        with anyio.fail_after(10):
            await changed.wait()
        assert "closes__late" in {t.name for t in source.tools()}


@pytest.mark.slow
async def test_upstream_crash_is_a_tool_error_and_the_server_restarts() -> None:
    async with MCPToolSource({"mcpServers": {"toy": toy()}}) as source:
        before = (await source.call_tool("toy__pid")).content[0].text  # type: ignore[union-attr]
        crashed = await source.call_tool("toy__crash")
        assert crashed.is_error
        assert "stopped (connection closed) while running 'crash'" in crashed.content[0].text  # type: ignore[union-attr]
        after = await source.call_tool("toy__pid")  # waits for the restart
        assert not after.is_error and after.content[0].text != before  # type: ignore[union-attr]
        failed = await source.call_tool("toy__fail")
        assert failed.is_error and "always fails" in failed.content[0].text  # type: ignore[union-attr]


@pytest.mark.slow
async def test_a_crash_found_by_a_relisting_restarts_the_server_at_the_next_call() -> None:
    """A 2026 server without listen is re-listed on ttlMs; a re-listing that finds it gone marks it crashed."""
    import os
    import signal

    async with MCPToolSource({"mcpServers": {"toy": toy(TOY_ERA="modern")}}) as source:
        upstream = source.servers["toy"]
        assert upstream.changes == "ttl"
        before = (await source.call_tool("toy__pid")).content[0].text  # type: ignore[union-attr]
        os.kill(int(before), signal.SIGKILL)
        with anyio.fail_after(30):
            while upstream.state != "crashed":
                await anyio.sleep(0.2)
        assert "re-listed" in (upstream.error or "")
        after = await source.call_tool("toy__pid")  # restarts it
        assert not after.is_error and after.content[0].text != before  # type: ignore[union-attr]
        assert upstream.changes == "ttl" and upstream.protocol_version == "2026-07-28"


def test_restart_waits_double_up_to_a_minute_and_are_jittered() -> None:
    rng = random.Random(7)
    for attempt, whole in [(0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (6, 32.0), (7, 60.0), (10_000, 60.0)]:
        waits = [restart_delay(attempt, rng=rng) for _ in range(200)]
        assert all(whole / 2 <= w <= whole for w in waits), (attempt, min(waits), max(waits))
        assert max(waits) - min(waits) > whole / 4, attempt  # servers that crashed together restart apart


@pytest.mark.slow
async def test_with_max_restarts_a_server_that_keeps_crashing_is_left_down_saying_so() -> None:
    async with MCPToolSource({"mcpServers": {"toy": toy()}}, max_restarts=1) as source:
        first = (await source.call_tool("toy__crash")).content[0].text  # type: ignore[union-attr]
        assert "being restarted (attempt 1, in about" in first
        assert not (await source.call_tool("toy__pid")).is_error  # waited for the attempt, due within a second
        second = (await source.call_tool("toy__crash")).content[0].text  # type: ignore[union-attr]
        assert "It is down and will not be restarted; use another tool." in second
        down = await source.call_tool("toy__echo", {"text": "x"})
        said = down.content[0].text  # type: ignore[union-attr]
        assert down.is_error and "It will not be restarted; use a tool of another server." in said
        assert "left down after 1 restart attempts in a row (max_restarts)" in said


@pytest.mark.slow
async def test_without_restart_a_crashed_server_stays_down() -> None:
    async with MCPToolSource({"mcpServers": {"toy": toy()}}, restart=False) as source:
        await source.call_tool("toy__crash")
        later = await source.call_tool("toy__echo", {"text": "x"})
        assert later.is_error and "not available" in later.content[0].text  # type: ignore[union-attr]
        assert "toy" in source.failures


@pytest.mark.slow
async def test_a_slow_call_times_out_as_a_tool_error() -> None:
    # the slow call never answers, so it times out whatever the load; the timeout is wide enough that
    # the quick call after it, which the same limit applies to, answers in time on a loaded machine
    async with MCPToolSource({"mcpServers": {"toy": {**toy(), "callTimeout": 3}}}) as source:
        slow = await source.call_tool("toy__sleep", {"seconds": 3600})
        assert slow.is_error and "did not answer 'sleep' within 3 s" in slow.content[0].text  # type: ignore[union-attr]
        quick = await source.call_tool("toy__echo", {"text": "still connected"})
        assert quick.content[0].text == "still connected"  # type: ignore[union-attr]


@pytest.mark.slow
def test_collect_tools_is_a_one_shot_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(
        json.dumps({"mcpServers": {"time": time_server(), "gone": {"command": PY, "args": ["-c", "pass"]}}})
    )
    collected = collect_tools(path)
    assert [t.name for t in collected.tools] == ["time__get_current_time", "time__convert_time"]
    assert list(collected.failures) == ["gone"]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("a", "a__b"),  # 'a' listing 'b__c' and 'a__b' listing 'c' both give 'a__b__c'
        ("a", "a."),  # one prefix: '.' is read as '_', and '_' at either end is dropped
        ("x" * 55 + "1", "x" * 55 + "2"),  # long names keep 55 characters before a 32-bit digest a server can match
    ],
)
def test_servers_whose_tools_names_could_coincide_are_refused(first: str, second: str) -> None:
    # Before: a re-listing of the first server took the second one's tool name, and its calls.
    servers = {"mcpServers": {first: toy(), second: toy()}}
    with pytest.raises(MCPConfigError, match=rf"servers '{first}' and '{re.escape(second)}': their tools' names could"):
        MCPToolSource(servers)


def test_servers_whose_names_only_look_alike_are_accepted() -> None:
    names = ["ab", "abc", "a_b", "a-b", "a_b_c", "b__a"]
    source = MCPToolSource({"mcpServers": {name: toy() for name in names}})
    assert list(source.servers) == names


def test_an_upstream_tool_keeps_what_clients_are_shown_and_its_fingerprint_ignores_volatile_meta() -> None:
    listed = {"name": "echo", "description": "Echo text back", "inputSchema": {"type": "object"},
              "title": "Echo", "annotations": {"readOnlyHint": True},
              "outputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
              "_meta": {"listed_at": "2026-12-05T20:00:00Z"}, "icons": [{"src": "https://example.test/e.png"}]}
    tool = tool_from_mcp(listed, "toy")
    assert set(tool.metadata) == {"title", "annotations", "mcp"}
    assert tool.metadata["mcp"]["outputSchema"] == listed["outputSchema"]  # kept once, where mcp_definition reads it
    shown = mcp_definition(tool).model_dump(by_alias=True, exclude_none=True)
    assert shown["title"] == "Echo" and shown["annotations"] == {"readOnlyHint": True} and "outputSchema" in shown
    # Before: `_meta` and `icons` went into the metadata the fingerprint covers, so a server stamping each listing
    # made every session see a changed tool.
    relisted = tool_from_mcp({**listed, "_meta": {"listed_at": "2026-12-05T20:00:05Z"}}, "toy")
    assert relisted.fingerprint == tool.fingerprint
    assert tool_from_mcp({**listed, "annotations": {"destructiveHint": True}}, "toy").fingerprint != tool.fingerprint
