"""An upstream tool's progress reaches the client through the gateway: both eras, stdio and HTTP, real processes.

The upstream (tests/mcp_servers/relay_server.py, the `mcp` SDK) reports progress per step; the real `mcp` client
calls it through `call_tool` with a progress callback. A client that gave no progress token gets none, and the
upstream is asked for none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_servers import HERE, PY, GatewayProcess, gateway_argv, gateway_env, http_gateway, write_config
from mcp_servers.clients import text

pytestmark = pytest.mark.slow

RELAY = HERE / "relay_server.py"
ERAS = ["2026-07-28", "legacy"]
Progress = tuple[float, float | None, str | None]


def relay(**env: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"command": PY, "args": [str(RELAY)]}
    if env:
        entry["env"] = env
    return entry


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("progress") / "servers.json", {"relay": relay()})


@pytest.fixture(scope="module")
def gateway(config: Path) -> Iterator[GatewayProcess]:
    with http_gateway(config, "--backend", "bm25") as process:
        yield process


@asynccontextmanager
async def client_of(target: GatewayProcess | Path, mode: str) -> AsyncIterator[Client]:
    """The real `mcp` client in `mode`: over HTTP to a running gateway, or over stdio to one it starts."""
    if isinstance(target, GatewayProcess):
        server: Any = target.url or ""
    else:
        argv = gateway_argv(target, "--quiet", "--backend", "bm25")
        server = StdioServerParameters(command=argv[0], args=argv[1:], env=gateway_env())
    with anyio.fail_after(120):
        async with Client(server, mode=mode) as client:
            yield client


async def count_steps(client: Client, *, watch: bool) -> tuple[str, list[Progress]]:
    """Call the upstream's count_steps through call_tool (with a progress callback when `watch`): its text and the
    progress the client received."""
    seen: list[Progress] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    result = await client.call_tool(
        "call_tool",
        {"name": "relay__count_steps", "arguments": {"steps": 3}},
        progress_callback=on_progress if watch else None,
    )
    assert not result.is_error, text(result)
    return text(result), seen


def check_relayed(answer: str, seen: list[Progress]) -> None:
    assert answer == "3 steps done; progress token given"  # the upstream was asked, under a token of the gateway's
    assert [(p, t) for p, t, _ in seen] == [(1, 3), (2, 3), (3, 3)]  # "step 2 again" did not move forward
    assert seen[0][2] == "step 1" and seen[2][2] == "step 3"
    noisy = seen[1][2]
    assert noisy is not None and noisy.startswith("step 2 red FAKE LOG LINE xxx")  # one line, nothing hidden
    assert noisy.isprintable() and "\x1b" not in noisy and "\u202e" not in noisy
    assert len(noisy) <= 503 and noisy.endswith("...")  # a status line, not the server's 3,000 characters


async def progress_flow(client: Client) -> None:
    answer, seen = await count_steps(client, watch=True)
    check_relayed(answer, seen)
    unasked, none = await count_steps(client, watch=False)
    assert unasked == "3 steps done; progress token none" and none == []


@pytest.mark.parametrize("mode", ERAS)
async def test_progress_is_relayed_over_stdio(config: Path, mode: str) -> None:
    async with client_of(config, mode) as client:
        await progress_flow(client)


@pytest.mark.parametrize("mode", ERAS)
async def test_progress_is_relayed_over_http(gateway: GatewayProcess, mode: str) -> None:
    async with client_of(gateway, mode) as client:
        await progress_flow(client)


@pytest.mark.parametrize("mode", ERAS)
async def test_progress_of_a_handshake_era_upstream_is_relayed(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path / "servers.json", {"relay": relay(RELAY_ERA="handshake")})
    async with client_of(config, mode) as client:
        await progress_flow(client)


async def test_a_found_tool_called_by_name_relays_progress_too(gateway: GatewayProcess) -> None:
    async with client_of(gateway, "legacy") as client:
        found = await client.call_tool("tool_search", {"query": "count steps reporting progress"})
        assert "relay__count_steps" in text(found)
        seen: list[Progress] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))

        result = await client.call_tool("relay__count_steps", {"steps": 3}, progress_callback=on_progress)
        check_relayed(text(result), seen)
