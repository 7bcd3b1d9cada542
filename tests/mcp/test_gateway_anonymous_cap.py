"""Callers without authentication share one session cap per client address: said in the 429, set on its own.

Real `toolsearch mcp serve` processes; each `initialize` is a raw HTTP request on its own
connection. Without authentication the gateway tells callers apart only by address, so every
local client counts against one cap (`--sessions-per-address`, default: `--sessions-per-caller`);
before, the 429 read as if one client held them all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
from fakes.attacks import INITIALIZE, MCP_HEADERS
from mcp_servers import GatewayProcess, toy, write_config
from redis_server import RedisServer

pytestmark = pytest.mark.slow

SHARED = (
    "This gateway has no authentication, so it tells callers apart only by client address: every client at "
    "127.0.0.1 (on loopback, every local client) shares this one cap."
)


@contextmanager
def serving(folder: Path, *flags: str) -> Iterator[str]:
    """A gateway over the toy server; its URL (a start-up on a loaded machine may take a while)."""
    gateway = GatewayProcess(write_config(folder / "servers.json", {"toy": toy()}), *flags)
    try:
        yield gateway.wait_ready(120)
    finally:
        gateway.stop()


def initialize(url: str, headers: list[tuple[str, str]] = []) -> httpx2.Response:  # noqa: B006
    return httpx2.post(url, headers=[*MCP_HEADERS, *headers], content=json.dumps(INITIALIZE), timeout=30)


def refusal(answer: httpx2.Response) -> str:
    assert answer.status_code == 429 and int(answer.headers["retry-after"]) >= 1
    return str(answer.json()["error"]["message"])


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_anonymous_local_clients_share_the_address_cap_and_the_429_says_so(tmp_path: Path, store: str) -> None:
    flags = ["--backend", "bm25", "--rate-limit", "0", "--sessions-per-caller", "1", "--sessions-per-address", "3"]
    redis = RedisServer(tmp_path).start() if store == "redis" else None
    if redis is not None:
        flags += ["--session-store", redis.url, "--index-dir", str(tmp_path / "indexes")]
    try:
        with serving(tmp_path, *flags) as url:
            # three local clients, each its own connection: the address cap, not the per-caller one
            assert [initialize(url).status_code for _ in range(3)] == [200, 200, 200]
            said = refusal(initialize(url))
            assert said.startswith("Too many open sessions from 127.0.0.1: 3 open, at most 3 (--sessions-per-address).")
            assert SHARED in said and "raise --sessions-per-address" in said and "turn on authentication" in said
    finally:
        if redis is not None:
            redis.stop()


def test_the_address_cap_follows_the_caller_cap_unless_set(tmp_path: Path) -> None:
    with serving(tmp_path, "--backend", "bm25", "--rate-limit", "0", "--sessions-per-caller", "2") as url:
        assert [initialize(url).status_code for _ in range(2)] == [200, 200]
        said = refusal(initialize(url))
        assert "2 open, at most 2 (--sessions-per-address)" in said and SHARED in said


def test_authenticated_callers_keep_their_own_cap(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    entries = [{"subject": n, "scopes": ["tools"], "token": f"{n}-" + n[0] * 40} for n in ("alice", "bob")]
    tokens.write_text(json.dumps({"tokens": entries}))
    flags = ["--backend", "bm25", "--rate-limit", "0", "--host", "127.0.0.2", "--auth-tokens", str(tokens)]
    flags += ["--auth-scope", "tools", "--sessions-per-caller", "1", "--sessions-per-address", "5"]
    with serving(tmp_path, *flags) as url:
        alice, bob = ([("authorization", f"Bearer {e['token']}")] for e in entries)
        assert initialize(url, alice).status_code == 200
        said = refusal(initialize(url, alice))
        assert said.startswith("Too many open sessions for this caller: 1 open, at most 1 (--sessions-per-caller).")
        assert "no authentication" not in said
        assert initialize(url, bob).status_code == 200  # one address, two callers: each has its own cap


@pytest.mark.parametrize(("value", "said"), [("-1", "--sessions-per-address must be >= 0")])
def test_a_bad_address_cap_is_a_usage_error(tmp_path: Path, value: str, said: str) -> None:
    import subprocess

    from mcp_servers import gateway_argv, gateway_env

    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    argv = gateway_argv(config, "--transport", "http", "--port", "0", "--sessions-per-address", value)
    done = subprocess.run(argv, env=gateway_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and said in done.stderr, done.stderr  # a usage error
