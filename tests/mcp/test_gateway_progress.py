"""An upstream tool's progress reaches the client through the gateway: both eras, stdio and HTTP, real processes.

The upstream (tests/mcp_servers/relay_server.py, the `mcp` SDK) reports progress per step; the real `mcp` client
calls it through `call_tool` with a progress callback. A client that gave no progress token gets none, and the
upstream is asked for none.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_servers import HERE, PY, GatewayProcess, http_gateway, write_config
from mcp_servers.clients import gateway_client, text

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
    async with gateway_client(config, mode) as client:
        await progress_flow(client)


@pytest.mark.parametrize("mode", ERAS)
async def test_progress_is_relayed_over_http(gateway: GatewayProcess, mode: str) -> None:
    async with gateway_client(gateway, mode) as client:
        await progress_flow(client)


@pytest.mark.parametrize("mode", ERAS)
async def test_progress_of_a_handshake_era_upstream_is_relayed(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path / "servers.json", {"relay": relay(RELAY_ERA="handshake")})
    async with gateway_client(config, mode) as client:
        await progress_flow(client)


async def test_a_found_tool_called_by_name_relays_progress_too(gateway: GatewayProcess) -> None:
    async with gateway_client(gateway, "legacy") as client:
        found = await client.call_tool("tool_search", {"query": "count steps reporting progress"})
        assert "relay__count_steps" in text(found)
        seen: list[Progress] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))

        result = await client.call_tool("relay__count_steps", {"steps": 3}, progress_callback=on_progress)
        check_relayed(text(result), seen)


SECRET = "sk-live-ENVSECRET111"


async def test_a_credential_split_by_an_invisible_character_stays_hidden(tmp_path: Path) -> None:
    # Before: the progress message read "signing in with sk-live-ENVSECRET111", the model's error "the credential
    # sk-live-ENVSECRET111 was rejected", and the gateway's log "no subscriptions/listen stream (401 Unauthorized: no
    # subscriptions for sk-live-ENVSECRET111)": the upstream wrote "sk-live-ENV\u200bSECRET111", which the scrub did
    # not find, and the cleaning after it dropped the zero-width space, joining the credential again.
    config = write_config(tmp_path / "servers.json", {"acct": relay(API_TOKEN=SECRET, RELAY_LISTEN="refuse")})
    seen: list[Progress] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    with http_gateway(config, "--backend", "bm25") as gateway:
        async with gateway_client(gateway, "legacy") as client:
            result = await client.call_tool(
                "call_tool", {"name": "acct__sign_in", "arguments": {}}, progress_callback=on_progress
            )
        gateway.stop()
    assert seen == [(1, 2, "signing in with ***")]
    assert result.is_error and text(result).endswith("rejected the call to 'sign_in': 401 Unauthorized: the "
                                                     "credential *** was rejected"), text(result)
    assert "no subscriptions/listen stream (401 Unauthorized: no subscriptions for ***)" in gateway.stderr
    assert "SECRET111" not in gateway.stderr, gateway.stderr
