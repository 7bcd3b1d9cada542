"""Per-caller caps and limits through real `toolsearch mcp serve` processes: one caller's flood never locks out another.

Open sessions and context handles are capped per caller (memory store: one gateway; Redis: two gateway
workers on two ports, requests alternating between them, so every count must be shared), refused
tokens are limited per client address before they are checked, and request rates hold across
workers. Every flood is bounded: a cap of 5 and 20 attempts.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest
from fakes.attacks import INITIALIZE, MCP_HEADERS
from fakes.protected_mcp import serve_protected
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_servers import GatewayProcess, http_gateway, toy, write_config
from redis_server import RedisServer

pytestmark = pytest.mark.slow

TOKENS = {name: f"{name}-" + name[0] * 40 for name in ("alice", "bob", "carol", "dave", "erin")}
CAP = 5
FLOOD = 20
MODERN = "2026-07-28"


def write_tokens(folder: Path) -> Path:
    path = folder / "tokens.json"
    entries = [{"subject": name, "scopes": ["tools"], "token": token} for name, token in TOKENS.items()]
    path.write_text(json.dumps({"tokens": entries}))
    return path


def bearer(name: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {TOKENS[name]}")]


def post(url: str, headers: list[tuple[str, str]] = [], *, source: str | None = None) -> httpx2.Response:  # noqa: B006
    """One `initialize` on a new connection (from `source`, a loopback address, when given)."""
    transport = httpx2.HTTPTransport(local_address=source) if source else None
    with httpx2.Client(transport=transport, timeout=30) as http:
        return http.post(url, headers=[*MCP_HEADERS, *headers], content=json.dumps(INITIALIZE))


def delete(url: str, session: str, headers: list[tuple[str, str]]) -> httpx2.Response:
    return httpx2.delete(url, headers=[*headers, ("mcp-session-id", session)], timeout=30)


@asynccontextmanager
async def handshake_client(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with anyio.fail_after(60):
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            yield client


@asynccontextmanager
async def modern_client(url: str, token: str) -> AsyncIterator[Client]:
    with anyio.fail_after(60):
        async with (
            httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30) as http,
            Client(streamable_http_client(url, http_client=http), mode=MODERN) as client,
        ):
            yield client


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def assert_session_refusal(response: httpx2.Response, flag: str = "--sessions-per-caller") -> None:
    assert response.status_code == 429, response.text
    assert 1 <= int(response.headers["retry-after"]) <= 3600
    message = response.json()["error"]["message"]
    assert f"{CAP} open, at most {CAP} ({flag})" in message, message
    assert "HTTP DELETE" in message and "initialize again" in message


# --- the memory store: one gateway, the SDK's per-connection sessions ------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("caps")
    write_config(path / "servers.json", {"toy": toy()})
    write_tokens(path)
    return path


def test_a_callers_session_flood_stops_at_its_cap_and_locks_no_one_else_out(folder: Path) -> None:
    with http_gateway(
        folder / "servers.json", "--backend", "bm25", "--host", "127.0.0.2",
        "--auth-tokens", str(folder / "tokens.json"), "--auth-scope", "tools",
        "--rate-limit", "0", "--sessions-per-caller", str(CAP),
    ) as gateway:  # fmt: skip
        url = gateway.url or ""
        flood = [post(url, bearer("alice")) for _ in range(FLOOD)]
        assert Counter(r.status_code for r in flood) == {200: CAP, 429: FLOOD - CAP}
        assert_session_refusal(flood[-1])

        async def bob() -> list[str]:
            async with handshake_client(url, TOKENS["bob"]) as client:
                return [t.name for t in (await client.list_tools()).tools]

        assert "tool_search" in anyio.run(bob)  # another caller is not locked out
        # a closed session frees its place at once
        first = flood[0].headers["mcp-session-id"]
        assert delete(url, first, bearer("alice")).status_code == 200
        assert post(url, bearer("alice")).status_code == 200
        assert_session_refusal(post(url, bearer("alice")))
        # another caller cannot close alice's sessions to make room (the SDK answers 404)
        assert delete(url, flood[1].headers["mcp-session-id"], bearer("bob")).status_code == 404
        assert_session_refusal(post(url, bearer("alice")))


def test_unauthenticated_loopback_callers_are_counted_per_client_address(folder: Path) -> None:
    with http_gateway(folder / "servers.json", "--backend", "bm25", "--sessions-per-caller", str(CAP)) as gateway:
        url = gateway.url or ""
        flood = [post(url, source="127.0.0.3") for _ in range(FLOOD)]
        assert Counter(r.status_code for r in flood) == {200: CAP, 429: FLOOD - CAP}
        assert_session_refusal(flood[-1], "--sessions-per-address")  # without auth, the address's shared cap
        assert post(url, source="127.0.0.4").status_code == 200
        assert post(url).status_code == 200  # 127.0.0.1


# --- Redis: two workers, every count shared --------------------------------------------------------------


class Pair:
    """Two gateway workers over one Redis; `url(i)` alternates between them."""

    def __init__(self, gateways: list[GatewayProcess]) -> None:
        self.gateways = gateways
        self.urls = [g.url or "" for g in gateways]

    def url(self, i: int) -> str:
        return self.urls[i % 2]


@pytest.fixture(scope="module")
def pair(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    redis = RedisServer(tmp_path_factory.mktemp("redis")).start()
    flags = (
        "--backend", "bm25", "--host", "127.0.0.2", "--session-store", redis.url,
        "--index-dir", str(folder / "indexes"), "--auth-tokens", str(folder / "tokens.json"), "--auth-scope", "tools",
        "--sessions-per-caller", str(CAP), "--contexts-per-caller", str(CAP),
        "--rate-limit", "1", "--rate-burst", "30", "--auth-failures", str(CAP),
    )  # fmt: skip
    started = [GatewayProcess(folder / "servers.json", *flags) for _ in range(2)]
    try:
        for gateway in started:
            gateway.wait_ready(120)
        yield Pair(started)
    finally:
        for gateway in started:
            gateway.stop()
        redis.stop()


def test_the_session_cap_holds_across_two_workers(pair: Pair) -> None:
    flood = [post(pair.url(i), bearer("alice")) for i in range(FLOOD)]
    assert Counter(r.status_code for r in flood) == {200: CAP, 429: FLOOD - CAP}
    assert_session_refusal(flood[-1])
    granted = [r.headers["mcp-session-id"] for r in flood if r.status_code == 200]

    async def bob() -> list[str]:
        async with handshake_client(pair.url(0), TOKENS["bob"]) as client:
            return [t.name for t in (await client.list_tools()).tools]

    assert "tool_search" in anyio.run(bob)
    # closed on one worker, its place is free on the other
    assert delete(pair.url(0), granted[0], bearer("alice")).status_code == 204
    assert post(pair.url(1), bearer("alice")).status_code == 200
    assert_session_refusal(post(pair.url(0), bearer("alice")))


def test_the_context_handle_cap_holds_across_two_workers(pair: Pair) -> None:
    async def searches(name: str, count: int) -> list[types.CallToolResult]:
        results = []
        for i in range(count):
            async with modern_client(pair.url(i), TOKENS[name]) as client:
                results.append(await client.call_tool("tool_search", {"query": "echo text back"}))
        return results

    flood = anyio.run(searches, "carol", 2 * CAP)
    kept = [r for r in flood if (r.structured_content or {}).get("context")]
    refused = [r for r in flood if "No context was kept" in text(r)]
    assert (len(kept), len(refused)) == (CAP, CAP)
    assert all("toy__echo" in text(r) and not r.is_error for r in refused)  # the search itself still answers
    assert f"you hold {CAP} context handles, at most {CAP} (--contexts-per-caller)" in text(refused[0])
    (other,) = anyio.run(searches, "bob", 1)
    assert other.structured_content and other.structured_content.get("context")


def test_the_request_rate_holds_across_two_workers(pair: Pair) -> None:
    # requests that open no session (an id nobody issued: 404 once past the rate limit)
    unknown = [*bearer("dave"), ("mcp-session-id", "made-up")]
    statuses = Counter(post(pair.url(i), unknown).status_code for i in range(40))
    # per worker, 30 each would have let all 40 through
    assert statuses == {404: 30, 429: 10}, statuses
    assert post(pair.url(0), bearer("erin")).status_code == 200  # another caller's own bucket


def test_refused_tokens_are_limited_per_address_across_two_workers(pair: Pair) -> None:
    bad = [("authorization", "Bearer " + "z" * 43)]
    statuses = [post(pair.url(i), bad, source="127.0.0.5").status_code for i in range(FLOOD)]
    assert statuses == [401] * CAP + [429] * (FLOOD - CAP)
    assert post(pair.url(0), bad, source="127.0.0.6").status_code == 401  # another address is not limited
    assert post(pair.url(1), bearer("erin"), source="127.0.0.6").status_code == 200
    for gateway in pair.gateways:
        assert "z" * 43 not in gateway.stderr


def test_an_unreachable_redis_refuses_rather_than_lifting_the_limits(folder: Path, tmp_path: Path) -> None:
    redis = RedisServer(tmp_path).start()
    try:
        with http_gateway(
            folder / "servers.json", "--backend", "bm25", "--host", "127.0.0.2", "--session-store", redis.url,
            "--auth-tokens", str(folder / "tokens.json"), "--auth-scope", "tools",
        ) as gateway:  # fmt: skip
            url = gateway.url or ""
            assert post(url, bearer("alice")).status_code == 200
            redis.kill()
            refused = post(url, bearer("alice"))
            assert refused.status_code == 503 and refused.headers["retry-after"]
            message = refused.json()["error"]["message"]
            assert "the gateway cannot check its" in message and "redis://" in message and "retry" in message
            bad = post(url, [("authorization", "Bearer " + "y" * 43)])
            assert bad.status_code == 503
    finally:
        redis.stop()


# --- refused tokens, one server ----------------------------------------------------------------------


def test_a_bad_token_flood_gets_429_before_its_tokens_are_checked(folder: Path) -> None:
    with serve_protected(
        "--host", "127.0.0.2", "--auth-tokens", str(folder / "tokens.json"), "--auth-scope", "tools",
        "--rate-limit", "0", "--auth-failures", str(CAP),
    ) as served:  # fmt: skip
        bad = [("authorization", "Bearer " + "q" * 43)]
        flood = [post(served.url, bad, source="127.0.0.7") for _ in range(FLOOD)]
        assert [r.status_code for r in flood] == [401] * CAP + [429] * (FLOOD - CAP)
        limited = flood[-1]
        assert 1 <= int(limited.headers["retry-after"]) <= 60
        assert "--auth-failures" in limited.json()["error"]["message"]
        # even a valid token from that address waits: nothing from it is checked until then
        assert post(served.url, bearer("alice"), source="127.0.0.7").status_code == 429
        # other addresses: bad tokens are still answered 401, valid callers served
        assert post(served.url, bad, source="127.0.0.8").status_code == 401
        assert post(served.url, bearer("alice")).status_code == 200
        # a missing token is the start of the OAuth flow, not a failure
        assert all(post(served.url, source="127.0.0.9").status_code == 401 for _ in range(CAP + 2))
        assert post(served.url, bearer("bob"), source="127.0.0.9").status_code == 200
        served.process.terminate()
        served.process.wait(10)
        assert "q" * 43 not in served.stderr
