"""`--sessions-per-caller` stops counting a session only when it has ended, not when another credential got a 404.

Audit 53 F9: with the memory store, the SDK binds a session to (client id, issuer, subject) and answers
404 to the same caller's token for another client id. The cap counted that 404 as the session's end,
so a caller holding two client ids opened sessions without bound, each still open and usable. Now a
session stops counting when it is deleted, idle past the SDK's timeout, or no longer held by the
SDK's session manager.

A real gateway process over the toy server and the tests' local issuer; raw HTTP requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from fakes.attacks import INITIALIZE, MCP_HEADERS
from fakes.oauth_issuer import LocalIssuer
from mcp_servers import http_gateway, toy, write_config

pytestmark = pytest.mark.slow

VERSION = ("mcp-protocol-version", "2025-11-25")


def initialize(url: str, token: str) -> httpx2.Response:
    headers = [*MCP_HEADERS, ("authorization", f"Bearer {token}")]
    return httpx2.post(url, headers=headers, content=json.dumps(INITIALIZE), timeout=30)


def list_tools(url: str, token: str, session: str) -> int:
    headers = [*MCP_HEADERS, VERSION, ("authorization", f"Bearer {token}"), ("mcp-session-id", session)]
    body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
    return httpx2.post(url, headers=headers, content=body, timeout=30).status_code


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[LocalIssuer, str]]:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    with LocalIssuer() as issuer, http_gateway(
        config, "--backend", "bm25", "--auth-issuer", issuer.url, "--auth-scope", "tools",
        "--sessions-per-caller", "2", "--rate-limit", "0",
    ) as gateway:  # fmt: skip
        yield issuer, gateway.wait_ready()


def test_a_404_for_another_client_id_does_not_free_a_place(served: tuple[LocalIssuer, str]) -> None:
    issuer, url = served
    app1 = issuer.mint("alice", audience=url, client_id="app1")
    app2 = issuer.mint("alice", audience=url, client_id="app2")
    opened = [initialize(url, app1) for _ in range(2)]
    assert [o.status_code for o in opened] == [200, 200]
    sessions = [o.headers["mcp-session-id"] for o in opened]
    # the same caller's other client id is answered as if the sessions did not exist ...
    assert [list_tools(url, app2, s) for s in sessions] == [404, 404]
    # ... and they are still counted: a third one is refused
    third = initialize(url, app1)
    assert third.status_code == 429, third.text
    assert "--sessions-per-caller" in third.json()["error"]["message"]
    assert initialize(url, app2).status_code == 429  # the cap is the caller's, whichever client id asks
    assert [list_tools(url, app1, s) for s in sessions] == [200, 200]  # they go on


def test_a_deleted_session_frees_its_place(served: tuple[LocalIssuer, str]) -> None:
    issuer, url = served
    app1 = issuer.mint("alice", audience=url, client_id="app1")
    sessions = [initialize(url, app1).headers["mcp-session-id"] for _ in range(2)]
    assert initialize(url, app1).status_code == 429
    headers = [("authorization", f"Bearer {app1}"), ("mcp-session-id", sessions[0]), VERSION]
    assert httpx2.delete(url, headers=headers, timeout=30).status_code == 200
    assert list_tools(url, app1, sessions[0]) == 404
    assert initialize(url, app1).status_code == 200
