"""Request guards through a real server process: Origin and Host on every address, rate limits, slow headers."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx2
import pytest
from fakes.attacks import INITIALIZE, MCP_HEADERS, Attack, origin_attacks, send, slow_headers
from fakes.protected_mcp import Served, serve_protected
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from toolsearch.mcp.caller import CALLER_SCOPE_KEY, Caller
from toolsearch.mcp.guard import RateLimit, is_loopback, origin_allowed

pytestmark = pytest.mark.slow


def post(url: str, headers: list[tuple[str, str]] = []) -> httpx2.Response:  # noqa: B006 (never mutated)
    return httpx2.post(url, headers=[*MCP_HEADERS, *headers], content=json.dumps(INITIALIZE), timeout=10)


@pytest.fixture(scope="module")
def loopback2() -> Iterator[Served]:
    # 127.0.0.2: the SDK's own DNS-rebinding check is off there (it knows only 127.0.0.1/localhost/::1)
    with serve_protected("--host", "127.0.0.2", "--allowed-origins", "https://app.example", "--rate-limit", "0") as s:
        yield s


def test_a_foreign_origin_is_refused_for_every_method_on_127_0_0_2(loopback2: Served) -> None:
    attacks = origin_attacks("unused", loopback2.url)
    statuses = {a.name: a.shown(send(loopback2.url, a).status_code) for a in attacks}
    assert statuses == {a.name: a.expected for a in attacks}
    refused = send(loopback2.url, attacks[0])
    body = refused.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None and "--allowed-origins" in body["error"]["message"]


def test_allowed_same_and_absent_origins_pass(loopback2: Served) -> None:
    own = f"http://{urlsplit(loopback2.url).netloc}"
    for headers in ([], [("origin", "https://app.example")], [("origin", own)], [("origin", "http://localhost:5173")]):
        response = post(loopback2.url, headers)
        assert response.status_code == 200, headers


def test_a_delete_with_a_foreign_origin_leaves_the_session_alone(loopback2: Served) -> None:
    opened = post(loopback2.url)
    session = opened.headers["mcp-session-id"]
    forged = Attack("origin", "delete", (("origin", "http://evil.example"),), 403, "DELETE")
    assert send(loopback2.url, forged, session_id=session).status_code == 403
    ping = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    still = httpx2.post(
        loopback2.url,
        headers=[*MCP_HEADERS, ("mcp-session-id", session), ("mcp-protocol-version", "2025-11-25")],
        content=ping,
        timeout=10,
    )
    assert still.status_code == 200 and '"result"' in still.text


def test_every_interface_checks_origin_too() -> None:
    with serve_protected("--host", "0.0.0.0", "--no-auth", "--rate-limit", "0") as served:
        port = urlsplit(served.url).port
        url = f"http://127.0.0.1:{port}/mcp"
        assert post(url, [("origin", "http://evil.example")]).status_code == 403
        assert post(url, [("origin", f"http://127.0.0.1:{port}")]).status_code == 403  # not its resource origin
        assert post(url).status_code == 200  # non-browser clients send no Origin
        assert post(url, [("host", "anything.internal")]).status_code == 200  # Host unknowable without --resource-url


async def test_the_mcp_client_works_through_the_guards(loopback2: Served) -> None:
    async with (
        httpx2.AsyncClient(headers={"origin": "https://app.example"}, timeout=10) as http,
        Client(streamable_http_client(loopback2.url, http_client=http)) as client,
    ):
        assert [t.name for t in (await client.list_tools()).tools] == ["echo", "whoami"]
        me = await client.call_tool("whoami", {})
        assert json.loads(me.content[0].text)["subject"] == "anonymous"  # type: ignore[union-attr]


def test_the_rate_limit_answers_429_with_retry_after_per_caller(tmp_path: Path) -> None:
    tokens = {"a": "a" * 40, "b": "b" * 40}
    path = tmp_path / "tokens.json"
    path.write_text(
        json.dumps({"tokens": [{"subject": k, "scopes": ["tools"], "token": v} for k, v in tokens.items()]})
    )
    with serve_protected(
        "--host", "127.0.0.2", "--auth-tokens", str(path), "--auth-scope", "tools",
        "--rate-limit", "1", "--rate-burst", "5",
    ) as served:  # fmt: skip
        a = [("authorization", f"Bearer {tokens['a']}")]
        statuses = [post(served.url, a).status_code for _ in range(8)]
        assert statuses == [200] * 5 + [429] * 3
        limited = post(served.url, a)
        assert limited.status_code == 429 and 1 <= int(limited.headers["retry-after"]) <= 60
        error = limited.json()["error"]
        assert "Rate limit exceeded" in error["message"] and "Retry-After" in error["message"]
        # another caller has its own bucket
        assert post(served.url, [("authorization", f"Bearer {tokens['b']}")]).status_code == 200


def test_rate_limit_buckets_refill_and_stay_bounded() -> None:
    async def app(scope: object, receive: object, send: object) -> None:
        raise AssertionError("not called")

    limit = RateLimit(app, per_minute=60, burst=2, max_callers=3)  # type: ignore[arg-type]
    assert [limit.take("x", now=0.0) for _ in range(3)] == [0.0, 0.0, 1.0]
    assert limit.take("x", now=1.0) == 0.0  # one a second comes back
    for i in range(10):
        limit.take(f"other{i}", now=2.0)
    assert len(limit.buckets) == 3


def test_unauthenticated_requests_are_limited_per_address_except_from_loopback() -> None:
    with serve_protected("--host", "127.0.0.2", "--rate-limit", "1", "--rate-burst", "1") as served:
        assert [post(served.url).status_code for _ in range(4)] == [200] * 4  # the local user is not limited

    async def app(scope: object, receive: object, send: object) -> None:
        raise AssertionError("not called")

    limit = RateLimit(app, per_minute=60, burst=2)  # type: ignore[arg-type]
    assert limit._key({"client": ("10.1.2.3", 5000)}) == "addr:10.1.2.3"
    assert limit._key({"client": ("127.0.0.1", 5000)}) is None
    alice = Caller.authenticated_as("static", "alice")
    assert limit._key({"client": ("127.0.0.1", 5000), CALLER_SCOPE_KEY: alice}) == alice.key


def test_slow_headers_are_cut_off_in_bounded_time() -> None:
    with serve_protected("--host", "127.0.0.2", "--header-timeout", "1", "--rate-limit", "0") as served:
        start = time.monotonic()
        closed, still_open = slow_headers(served.url, 60, wait=4)
        assert (closed, still_open) == (60, 0)
        assert time.monotonic() - start < 15
        assert post(served.url).status_code == 200  # the server still answers


def test_a_connection_is_cut_off_after_a_response_when_the_next_headers_stall() -> None:
    with serve_protected("--host", "127.0.0.2", "--header-timeout", "1", "--rate-limit", "0") as served:
        parts = urlsplit(served.url)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
            request = (
                f"POST /nowhere HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode() + body
            sock.sendall(request)
            assert sock.recv(65536).startswith(b"HTTP/1.1 404")
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: ")  # then nothing more
            start = time.monotonic()
            sock.settimeout(10)
            while sock.recv(65536):
                pass
            assert time.monotonic() - start < 6


@pytest.mark.parametrize(
    ("origin", "allowed", "ok"),
    [
        ("https://app.example", ["https://app.example"], True),
        ("HTTPS://APP.EXAMPLE", ["https://app.example"], True),
        ("https://app.example:8443", ["https://app.example:*"], True),
        ("https://app.example.evil", ["https://app.example:*"], False),
        ("https://app.example:84x", ["https://app.example:*"], False),
        ("https://app.example.evil", ["https://app.example"], False),
        ("null", ["https://app.example"], False),
    ],
)
def test_origin_patterns(origin: str, allowed: list[str], ok: bool) -> None:
    assert origin_allowed(origin, allowed) is ok


def test_loopback_addresses() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "127.example.com"))
