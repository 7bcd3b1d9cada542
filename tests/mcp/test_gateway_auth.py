"""`toolsearch mcp serve` with authentication, a tool policy and the request guards, end to end.

A real gateway process on 127.0.0.2 with real upstream servers (the toy server and the time server),
static tokens and a local OAuth issuer; the real `mcp` client with its httpx2 client carrying the
token, and raw httpx2 for the refusals.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from fakes.attacks import INITIALIZE, MCP_HEADERS, origin_attacks, send, token_attacks
from fakes.oauth_issuer import LocalIssuer
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_servers import PY, GatewayProcess, gateway_env, http_gateway, time_server, toy, write_config
from mcp_servers.clients import text

from toolsearch._errors import AuthConfigError
from toolsearch.mcp.auth import AuthSettings
from toolsearch.mcp.settings import GatewaySettings

pytestmark = pytest.mark.slow

TOKENS = {"alice": "alice-" + "a" * 40, "root": "root-" + "r" * 40, "guest": "guest-" + "g" * 40}
POLICY = {
    "rules": [
        {"when": {"scopes": ["tools:admin"]}, "servers": ["*"]},
        {"when": {"issuer": "static", "subjects": ["alice"]}, "servers": ["toy"]},
        {"when": {"claims": {"groups": "ops"}}, "servers": ["time"]},
    ]
}


class Deployment:
    def __init__(self, gateway: GatewayProcess, issuer: LocalIssuer) -> None:
        self.gateway = gateway
        self.issuer = issuer
        self.url = gateway.url or ""


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    folder = tmp_path_factory.mktemp("authgw")
    config = write_config(folder / "servers.json", {"toy": toy(), "time": time_server()})
    entries = [
        {"subject": "alice", "scopes": ["tools"], "token": TOKENS["alice"]},
        {"subject": "root", "scopes": ["tools", "tools:admin"], "token": TOKENS["root"]},
        {"subject": "guest", "scopes": ["tools"], "token": TOKENS["guest"]},
    ]
    (folder / "tokens.json").write_text(json.dumps({"tokens": entries}))
    (folder / "policy.json").write_text(json.dumps(POLICY))
    with LocalIssuer() as issuer, http_gateway(
        config, "--backend", "bm25", "--host", "127.0.0.2", "--auth-tokens", str(folder / "tokens.json"),
        "--auth-issuer", issuer.url, "--auth-scope", "tools", "--tool-policy", str(folder / "policy.json"),
    ) as gateway:  # fmt: skip
        yield Deployment(gateway, issuer)


@asynccontextmanager
async def session(url: str, token: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


def post(url: str, headers: list[tuple[str, str]]) -> httpx2.Response:
    return httpx2.post(url, headers=[*MCP_HEADERS, *headers], content=json.dumps(INITIALIZE), timeout=10)


def test_no_token_gets_401_with_the_metadata_url(deployment: Deployment) -> None:
    response = post(deployment.url, [])
    assert response.status_code == 401
    assert "resource_metadata=" in response.headers["www-authenticate"]
    metadata = httpx2.get(deployment.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp"), timeout=10)
    assert metadata.json()["resource"] == deployment.url


def test_a_foreign_origin_is_refused_even_with_a_token(deployment: Deployment) -> None:
    headers = [("authorization", f"Bearer {TOKENS['root']}"), ("origin", "http://evil.example")]
    assert post(deployment.url, headers).status_code == 403


def test_every_forged_token_origin_and_host_attack_is_refused(deployment: Deployment) -> None:
    # "guest" has the scope but no policy rule; an unscoped static token would be refused the same way
    attacks = token_attacks(deployment.issuer, deployment.url, TOKENS["alice"], "unused-" + "u" * 40)
    attacks = [a for a in attacks if a.name != "static token without the required scope"]
    attacks += origin_attacks(TOKENS["root"], deployment.url)
    got = {a.name: a.shown(send(deployment.url, a).status_code) for a in attacks}
    assert got == {a.name: a.expected for a in attacks}


async def test_a_caller_sees_searches_and_calls_only_its_tools(deployment: Deployment) -> None:
    async with session(deployment.url, TOKENS["alice"]) as alice:
        found = await alice.call_tool("tool_search", {"query": "current time in a timezone", "max_results": 5})
        assert "time__" not in text(found)
        refused = await alice.call_tool(
            "call_tool", {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}
        )
        assert refused.is_error
        echoed = await alice.call_tool("call_tool", {"name": "toy__echo", "arguments": {"text": "mine"}})
        assert not echoed.is_error and text(echoed) == "mine"
    # The issuer's "alice" is not the token file's: the rule names its issuer (before, a subject matched either).
    namesake = deployment.issuer.mint("alice", audience=deployment.url, scopes=["tools"])
    async with session(deployment.url, namesake) as other:
        echoed = await other.call_tool("call_tool", {"name": "toy__echo", "arguments": {"text": "not mine"}})
        assert echoed.is_error and "not mine" not in text(echoed)


def test_a_subject_rule_without_an_issuer_is_refused_where_two_sources_vouch(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    (tmp_path / "tokens.json").write_text(json.dumps({"tokens": [{"subject": "alice", "token": TOKENS["alice"]}]}))
    (tmp_path / "policy.json").write_text(json.dumps({"rules": [{"when": {"subjects": ["alice"]}, "servers": ["*"]}]}))
    refused = subprocess.run(
        [PY, "-m", "toolsearch", "mcp", "serve", "--config", str(config), "--transport", "http",
         "--auth-tokens", str(tmp_path / "tokens.json"), "--auth-issuer", "https://id.example", "--auth-scope", "tools",
         "--tool-policy", str(tmp_path / "policy.json")],
        capture_output=True, text=True, timeout=60, env=gateway_env(),
    )  # fmt: skip
    assert refused.returncode != 0 and "ready" not in refused.stderr
    assert "rule 1 names subjects without an issuer" in refused.stderr and '"issuer": "static"' in refused.stderr


async def test_an_admin_and_an_oauth_caller_get_what_their_rules_give(deployment: Deployment) -> None:
    async with session(deployment.url, TOKENS["root"]) as root:
        now = await root.call_tool("call_tool", {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}})
        assert not now.is_error and json.loads(text(now))["timezone"] == "UTC"
    token = deployment.issuer.mint("olga", audience=deployment.url, groups=["ops"])
    async with session(deployment.url, token) as olga:
        now = await olga.call_tool("call_tool", {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}})
        assert not now.is_error
        echoed = await olga.call_tool("call_tool", {"name": "toy__echo", "arguments": {"text": "x"}})
        assert echoed.is_error
    async with session(deployment.url, TOKENS["guest"]) as guest:  # no rule: nothing
        found = await guest.call_tool("tool_search", {"query": "echo text", "max_results": 5})
        assert "toy__echo" not in text(found)


def test_a_non_loopback_gateway_without_auth_refuses_to_start(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    refused = subprocess.run(
        [PY, "-m", "toolsearch", "mcp", "serve", "--config", str(config), "--transport", "http", "--host", "0.0.0.0"],
        capture_output=True, text=True, timeout=60, env=gateway_env(),
    )  # fmt: skip
    assert refused.returncode != 0
    assert "refusing to listen on 0.0.0.0 without authentication" in refused.stderr
    assert "ready" not in refused.stderr  # refused before any upstream server started


def test_authentication_flags_on_stdio_are_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    refused = subprocess.run(
        [PY, "-m", "toolsearch", "mcp", "serve", "--config", str(config), "--no-auth"],
        capture_output=True, text=True, timeout=60, env=gateway_env(), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert refused.returncode != 0 and "authentication applies to the http transport" in refused.stderr


def test_settings_for_every_interface_without_auth_are_refused_in_the_library_too() -> None:
    with pytest.raises(AuthConfigError, match=r"refusing to listen on 0\.0\.0\.0 without authentication"):
        GatewaySettings(transport="http", host="0.0.0.0")
    GatewaySettings(transport="http", host="0.0.0.0", auth=AuthSettings(no_auth=True))
    GatewaySettings(transport="http", host="127.0.0.1")


async def test_run_http_refuses_every_interface_without_auth_whatever_the_settings_say() -> None:
    # The library's own entry point: a host given to run_http is checked as the settings' host is.
    from toolsearch.mcp import Gateway, MCPToolSource

    async with MCPToolSource({"mcpServers": {"toy": toy()}}) as source:
        gateway = Gateway(source, GatewaySettings(backend="bm25"))  # stdio settings: their host was never checked
        with anyio.fail_after(60), pytest.raises(AuthConfigError, match=r"refusing to listen on 0\.0\.0\.0 without"):
            await gateway.run_http(host="0.0.0.0", port=0)  # (served forever, unauthenticated, before)
        http = Gateway(source, GatewaySettings(backend="bm25", transport="http"))  # a host not the settings' own
        with anyio.fail_after(60), pytest.raises(AuthConfigError, match=r"refusing to listen on 10\.1\.2\.3 without"):
            await http.run_http(host="10.1.2.3")
