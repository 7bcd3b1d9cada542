"""The gateway with the Python SDK's high-level `mcp.Client` in the handshake era (`mode="legacy"`).

The 2026-07-28 era with the same client is tests/mcp/test_gateway_modern.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp_servers import GatewayProcess, gateway_argv, gateway_env, http_gateway, time_server, toy, write_config
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

pytestmark = pytest.mark.slow

META = ["tool_search", "call_tool"]


class Changes:
    """Counts tools/list_changed notifications; `wait()` returns after the next one."""

    def __init__(self) -> None:
        self.count = 0
        self._event = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.count += 1
            self._event.set()

    async def wait(self, timeout: float = 10) -> None:
        with anyio.fail_after(timeout):
            await self._event.wait()
        self._event = anyio.Event()


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def names(client: Client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


async def core_flow(client: Client, changes: Changes) -> None:
    """Connect, list, search, hear list_changed, list again, call what was found."""
    assert client.session.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
    init = client.session.initialize_result
    assert init is not None and init.capabilities.tools is not None and init.capabilities.tools.list_changed
    assert await names(client) == META
    found = await client.call_tool("tool_search", {"query": "convert time between timezones", "max_results": 1})
    assert not found.is_error and "time__convert_time" in text(found)
    await changes.wait()
    assert await names(client) == [*META, "time__convert_time"]
    converted = await client.call_tool(
        "time__convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    )
    assert not converted.is_error and "Asia/Tokyo" in text(converted)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("interop")
    return write_config(folder / "servers.json", {"time": time_server(), "toy": toy()})


@pytest.fixture(scope="module")
def gateway(config: Path) -> Iterator[GatewayProcess]:
    with http_gateway(config) as process:
        yield process


async def test_handshake_client_over_stdio(config: Path) -> None:
    argv = gateway_argv(config, "--quiet")
    changes = Changes()
    server = StdioServerParameters(command=argv[0], args=argv[1:], env=gateway_env())
    with anyio.fail_after(90):
        async with Client(server, message_handler=changes, mode="legacy") as client:
            await core_flow(client, changes)


async def test_handshake_client_over_http(gateway: GatewayProcess) -> None:
    changes = Changes()
    async with Client(gateway.url or "", message_handler=changes, mode="legacy") as client:
        await core_flow(client, changes)


async def test_handshake_clients_are_isolated_over_http(gateway: GatewayProcess) -> None:
    alice_changes, bob_changes = Changes(), Changes()
    url = gateway.url or ""
    async with (
        Client(url, message_handler=alice_changes, mode="legacy") as alice,
        Client(url, message_handler=bob_changes, mode="legacy") as bob,
    ):
        await alice.call_tool("tool_search", {"query": "add two integers sum", "max_results": 1})
        await alice_changes.wait()
        assert await names(alice) == [*META, "toy__add_numbers"]
        assert await names(bob) == META and bob_changes.count == 0
        assert text(await alice.call_tool("toy__add_numbers", {"a": 2, "b": 40})) == "42"
        assert await names(bob) == META


async def test_the_docs_config_works_from_a_venv_that_is_not_activated(tmp_path: Path) -> None:
    # docs/mcp.md writes servers.json with the interpreter's absolute path; run the way a user of an
    # unactivated venv (or a desktop app) does: the venv's `toolsearch` by path, the venv not on PATH.
    from test_docs import ROOT, blocks

    writer = next(b for b in blocks(ROOT / "docs" / "mcp.md") if b.lang == "python" and "servers.json" in b.code)
    subprocess.run([sys.executable, "-c", writer.code], cwd=tmp_path, check=True, timeout=60)
    toolsearch = Path(sys.executable).parent / "toolsearch"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    server = StdioServerParameters(
        command=str(toolsearch), args=["mcp", "serve", "--config", "servers.json", "--quiet"], env=env, cwd=tmp_path
    )
    with anyio.fail_after(90):
        async with Client(server) as client:
            found = await client.call_tool("tool_search", {"query": "current time in a timezone", "max_results": 1})
            assert "time__get_current_time" in text(found)
            now = await client.call_tool("time__get_current_time", {"timezone": "UTC"})
            assert not now.is_error and now.structured_content is not None
