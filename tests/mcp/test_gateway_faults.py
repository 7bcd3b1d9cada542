"""Upstream faults through a real gateway process: each faulty call gets a clear error, everything else goes on.

The faults come from tests/mcp_servers/faulty_server.py, a real MCP server process that hangs,
answers late, exits mid-call, sends 10 MB, or lists malformed tool definitions on request.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_servers import GatewayProcess, gateway_argv, gateway_env, http_gateway, toy, write_config
from mcp_servers.clients import connect, faulty, text

from toolsearch.mcp.config import MCPConfigError, load_config

pytestmark = pytest.mark.slow

CALL_TIMEOUT = 3
LIMIT = 1_000_000
# One tool whose schema nests 250 arrays: past the MCP SDK's JSON reader (about 200 levels), within Python's.
_DEEP: dict[str, Any] = {"type": "string"}
for _ in range(250):
    _DEEP = {"type": "array", "items": _DEEP}
DEEP_TOOL = {"name": "deep_schema", "description": "A tool nested too deeply.",
             "inputSchema": {"type": "object", "properties": {"x": _DEEP}}}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    folder = tmp_path_factory.mktemp("faults")
    servers: dict[str, Any] = {
        "faulty": faulty(callTimeout=CALL_TIMEOUT),
        # a long timeout: 10 MB must be refused for its size, not for its time in a busy pipe
        "bulky": faulty(callTimeout=300),
        "fragile": faulty(callTimeout=CALL_TIMEOUT),
        "malformed": faulty(FAULTY_MALFORMED=1),
        "deep": faulty(FAULTY_EXTRA_TOOLS=json.dumps([DEEP_TOOL])),
        "small": faulty(maxResultBytes=5_000),
        "toy": toy(),
    }
    config = write_config(folder / "servers.json", servers)
    with http_gateway(config, "--max-result-bytes", str(LIMIT)) as process:
        yield process


async def test_malformed_tool_definitions_are_skipped_and_named(gateway: GatewayProcess) -> None:
    log = gateway.stderr
    for tool in ("schema_is_a_string", "schema_is_an_array", "properties_not_an_object"):
        assert f"MCP server 'malformed': skipped a tool (the others are listed): tool '{tool}'" in log
    assert "tool number 4 of the page: malformed definition (name: Field required)" in log  # no name to give
    assert "tool 'lone_surrogate': its definition holds text that is not valid Unicode" in log
    assert "'malformed' skipped" not in log  # the server itself was not dropped
    async with connect(gateway.url or "") as client:
        found = await client.search("echo the given text", namespace="malformed")
        assert "malformed__echo" in text(found) and "schema_is" not in text(found) and "surrogate" not in text(found)
        echoed = await client.call("malformed__echo", {"text": "still listed"})
        assert not echoed.is_error and text(echoed) == "still listed"


async def test_one_tool_nested_past_the_clients_reader_leaves_out_that_tool_alone(gateway: GatewayProcess) -> None:
    # Before: the whole tools/list answer was refused, and every tool of the server with it ("skipped: ... not JSON").
    log = gateway.stderr
    assert "MCP server 'deep': its tool list nests deeper than the MCP client reads" in log
    assert "MCP server 'deep': skipped a tool (the others are listed): tool 'deep_schema': input_schema is nested " \
        "deeper than 64 levels" in log
    assert "'deep' skipped" not in log
    async with connect(gateway.url or "") as client:
        echoed = await client.call("deep__echo", {"text": "still listed"})
        assert not echoed.is_error and text(echoed) == "still listed"


async def test_a_hanging_call_times_out_while_other_sessions_and_servers_go_on(gateway: GatewayProcess) -> None:
    url = gateway.url or ""
    results: dict[str, Any] = {}
    async with connect(url) as stuck, connect(url) as other:

        async def hang() -> None:
            results["hang"] = await stuck.call("call_tool", {"name": "faulty__hang"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(hang)
            # while that call hangs: another session, the same server, and another server all answer
            same = await other.call("call_tool", {"name": "faulty__echo", "arguments": {"text": "same server"}})
            elsewhere = await other.call("call_tool", {"name": "toy__echo", "arguments": {"text": "other server"}})
            assert "hang" not in results  # they answered while the hanging call was still waiting
            assert (text(same), text(elsewhere)) == ("same server", "other server")
        said = text(results["hang"])
        assert results["hang"].is_error
        assert "'faulty'" in said and "'hang'" in said and f"within {CALL_TIMEOUT} s" in said
        assert "Do not assume it worked" in said
        again = await stuck.call("call_tool", {"name": "faulty__echo", "arguments": {"text": "after"}})
        assert text(again) == "after"  # the session that waited goes on too


async def test_an_answer_after_the_timeout_is_dropped(gateway: GatewayProcess) -> None:
    async with connect(gateway.url or "") as client:
        late = await client.call("call_tool", {"name": "faulty__slow", "arguments": {"seconds": CALL_TIMEOUT + 2}})
        assert late.is_error and "did not answer 'slow'" in text(late)
        await anyio.sleep(3)  # the late answer arrives meanwhile, for a request nobody waits for
        for word in ("one", "two"):  # the connection to the server is intact, and answers match their calls
            echoed = await client.call("call_tool", {"name": "faulty__echo", "arguments": {"text": word}})
            assert not echoed.is_error and text(echoed) == word


async def test_a_result_that_is_not_a_tool_result_is_a_clear_error(gateway: GatewayProcess) -> None:
    async with connect(gateway.url or "") as client:
        bad = await client.call("call_tool", {"name": "faulty__garbage"})
        said = text(bad)
        assert bad.is_error and "MCP server 'faulty': calling 'garbage' failed" in said and len(said) < 500
        assert text(await client.call("call_tool", {"name": "faulty__echo", "arguments": {"text": "ok"}})) == "ok"


async def test_a_10_mb_result_is_a_clear_error(gateway: GatewayProcess) -> None:
    async with connect(gateway.url or "") as client:
        huge = await client.call("call_tool", {"name": "bulky__huge", "arguments": {"bytes": 10_000_000}})
        said = text(huge)
        assert huge.is_error and len(said) < 1_000
        assert "'huge'" in said and "'bulky'" in said and f"({LIMIT:,} bytes)" in said and "ask for less" in said
        fits = await client.call("call_tool", {"name": "bulky__huge", "arguments": {"bytes": 900_000}})
        assert not fits.is_error and len(text(fits)) == 900_000
        # a server's own maxResultBytes wins over the gateway's --max-result-bytes
        small = await client.call("call_tool", {"name": "small__huge", "arguments": {"bytes": 10_000}})
        assert small.is_error and "(5,000 bytes)" in text(small)
        ok = await client.call("call_tool", {"name": "bulky__echo", "arguments": {"text": "fine"}})
        assert text(ok) == "fine"
    # logged with server and tool; a stdio line is not read past 3 x the cap (plus 64 KiB), so the size is a bound
    assert gateway.logged("MCP server 'bulky': the result of 'huge' (over 3,065,536 bytes)"), gateway.stderr


async def test_a_dead_upstream_is_reported_restarted_and_others_finish(gateway: GatewayProcess) -> None:
    url = gateway.url or ""
    results: dict[str, Any] = {}
    async with connect(url) as client, connect(url) as other:
        before = text(await client.call("call_tool", {"name": "faulty__pid"}))

        async def in_flight() -> None:
            results["sleep"] = await other.call("call_tool", {"name": "toy__sleep", "arguments": {"seconds": 2}})

        async with anyio.create_task_group() as tg:
            tg.start_soon(in_flight)
            await anyio.sleep(0.5)
            died = await client.call("call_tool", {"name": "faulty__die"})
        said = text(died)
        assert died.is_error and "'faulty'" in said and "'die'" in said and "stopped (connection closed)" in said
        assert "being restarted" in said
        assert not results["sleep"].is_error and text(results["sleep"]) == "awake"  # the call elsewhere finished
        with anyio.fail_after(60):
            while True:  # the restart runs in the background; a call meanwhile waits for it or is refused
                after = await client.call("call_tool", {"name": "faulty__pid"})
                if not after.is_error:
                    break
                await anyio.sleep(0.5)
        assert text(after) != before  # a new process
    assert gateway.logged("MCP server 'faulty': restarting (attempt 1)"), gateway.stderr


RESTARTING = re.compile(r"being restarted \(attempt (\d+), in about ([\d.]+) s\)")


async def test_an_upstream_that_keeps_dying_is_restarted_after_longer_and_longer_waits(gateway: GatewayProcess) -> None:
    """Backoff: each crash soon after a start waits about twice as long for its restart (1, 2, 4, 8 s, each jittered
    to between half and all of that), and a call meanwhile says when the next attempt is due; never a loop."""
    async with connect(gateway.url or "") as client:
        attempts: list[tuple[int, float]] = []
        with anyio.fail_after(120):
            for _ in range(4):
                said = text(await client.call("call_tool", {"name": "fragile__die"}))
                restarting = RESTARTING.search(said)
                assert restarting is not None, said
                attempts.append((int(restarting[1]), float(restarting[2])))
                # a call waits for an attempt due within 5 s, else is refused at once saying when it is due
                while (await client.call("call_tool", {"name": "fragile__pid"})).is_error:
                    await anyio.sleep(0.5)
            died = await client.call("call_tool", {"name": "fragile__die"})  # attempt 5: due in 8 to 16 s
        assert [n for n, _ in attempts] == [1, 2, 3, 4], attempts  # crashes within a minute of each start: a loop
        for n, wait in attempts:  # the wait the server chose, as the message says it (not a measured time)
            assert 2 ** (n - 1) / 2 - 0.05 <= wait <= 2 ** (n - 1) + 0.05, attempts
        restarting = RESTARTING.search(text(died))
        assert restarting is not None and restarting[1] == "5" and 7.95 <= float(restarting[2]) <= 16.05, text(died)
        down = await client.call("call_tool", {"name": "fragile__echo", "arguments": {"text": "x"}})
        said = text(down)
        assert down.is_error and "MCP server 'fragile' is not available" in said, said
        assert "It is being restarted: attempt 5 is due in about" in said and "Use a tool of another server" in said
        ok = await client.call("call_tool", {"name": "toy__echo", "arguments": {"text": "others serve"}})
        assert text(ok) == "others serve"
    assert gateway.logged("MCP server 'fragile': restart attempt 5 in"), gateway.stderr


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--max-result-bytes", "0"], "--max-result-bytes: must be at least 1"),
        (["--max-result-bytes", "1MB"], "expected a whole number of bytes"),
        (["--changed-tools", "ignore"], "invalid choice: 'ignore'"),
    ],
)
def test_bad_guard_flags_are_usage_errors(tmp_path: Path, flags: list[str], said: str) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    done = subprocess.run(gateway_argv(config, *flags), env=gateway_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and said in done.stderr


def test_bad_guard_settings_in_the_config_name_the_server(tmp_path: Path) -> None:
    for key, value, said in (("maxResultBytes", 0, "greater than 0"), ("changedTools", "warn", "'keep' or 'block'")):
        path = write_config(tmp_path / "servers.json", {"toy": {**toy(), key: value}})
        with pytest.raises(MCPConfigError, match=f"server 'toy': {key}") as raised:
            load_config(path)
        assert said in str(raised.value)
