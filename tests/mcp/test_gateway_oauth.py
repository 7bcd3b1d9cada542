"""The HTTP gateway's resource-server authentication, through a real server process and real clients.

A local issuer (keys made here, metadata and JWK set on loopback) signs tokens; a real MCP server
behind `toolsearch.mcp.auth.protect` runs under uvicorn on 127.0.0.2; the real `mcp` client and
raw httpx2 requests drive it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from fakes.attacks import INITIALIZE, MCP_HEADERS, origin_attacks, send, token_attacks
from fakes.oauth_issuer import LocalIssuer
from fakes.protected_mcp import Served, run_protected, serve_protected
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from toolsearch._errors import AuthConfigError
from toolsearch.mcp.auth import AuthSettings, StaticTokens, add_auth_arguments, check_exposure
from toolsearch.mcp.caller import Caller

pytestmark = pytest.mark.slow


class Deployment:
    def __init__(self, issuer: LocalIssuer, served: Served, static: dict[str, str]) -> None:
        self.issuer = issuer
        self.served = served
        self.url = served.url
        self.static = static

    def token(self, subject: str = "alice", **kwargs: object) -> str:
        return self.issuer.mint(subject, audience=self.url, **kwargs)  # type: ignore[arg-type]


def write_tokens(folder: Path) -> tuple[Path, dict[str, str]]:
    static = {"ci": secrets.token_urlsafe(32), "reader": secrets.token_urlsafe(32)}
    digest = hashlib.sha256(static["ci"].encode()).hexdigest()
    path = folder / "tokens.json"
    path.write_text(
        json.dumps(
            {
                "tokens": [
                    {"subject": "ci-bot", "scopes": ["tools", "deploy"], "sha256": digest},
                    {"subject": "reader", "scopes": ["read"], "token": static["reader"]},
                ]
            }
        )
    )
    return path, static


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tokens, static = write_tokens(tmp_path_factory.mktemp("auth"))
    with LocalIssuer() as issuer, serve_protected(
        "--host", "127.0.0.2", "--auth-issuer", issuer.url, "--auth-scope", "tools",
        "--auth-tokens", str(tokens), "--rate-limit", "0", "--auth-failures", "0",
    ) as served:  # fmt: skip
        yield Deployment(issuer, served, static)


def post(url: str, headers: list[tuple[str, str]]) -> httpx2.Response:
    return httpx2.post(url, headers=[*MCP_HEADERS, *headers], content=json.dumps(INITIALIZE), timeout=10)


def challenge(response: httpx2.Response) -> str:
    return response.headers.get("www-authenticate", "")


def test_protected_resource_metadata_at_both_well_known_paths(deployment: Deployment) -> None:
    base = deployment.url.removesuffix("/mcp")
    for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
        response = httpx2.get(base + path, headers={"origin": "https://client.example"}, timeout=10)
        assert response.status_code == 200, path
        document = response.json()
        assert document["resource"] == deployment.url
        assert document["authorization_servers"] == [deployment.issuer.url]
        assert document["scopes_supported"] == ["tools"]
        assert response.headers["access-control-allow-origin"] == "*"


def test_a_request_without_a_token_is_challenged_with_the_metadata_url(deployment: Deployment) -> None:
    response = post(deployment.url, [])
    assert response.status_code == 401
    header = challenge(response)
    metadata = deployment.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
    assert header.startswith("Bearer ") and f'resource_metadata="{metadata}"' in header
    assert 'scope="tools"' in header
    assert "error=" not in header  # RFC 6750 §3.1: no error code when no credential was sent


def test_every_forged_or_misdirected_token_is_refused(deployment: Deployment) -> None:
    attacks = token_attacks(deployment.issuer, deployment.url, deployment.static["ci"], deployment.static["reader"])
    assert len(attacks) >= 20
    expected = {attack.name: attack.expected for attack in attacks}
    got = {attack.name: send(deployment.url, attack) for attack in attacks}
    assert {a.name: a.shown(got[a.name].status_code) for a in attacks} == expected
    for name, response in got.items():
        assert "mcp-session-id" not in response.headers, name
        if response.status_code == 403:
            assert 'error="insufficient_scope"' in challenge(response) and 'scope="tools"' in challenge(response)
    assert 'error="invalid_token"' in challenge(got["expired JWT"])
    assert "expired" in got["expired JWT"].json()["error_description"]
    assert "audience" in got["JWT for another resource"].json()["error_description"]


async def whoami(url: str, token: str) -> dict[str, object]:
    async with (
        httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=10) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        names = [t.name for t in (await client.list_tools()).tools]
        assert names == ["echo", "whoami"]
        echoed = await client.call_tool("echo", {"text": "hi"})
        assert echoed.content[0].text == "hi"  # type: ignore[union-attr]
        result = await client.call_tool("whoami", {})
        return json.loads(result.content[0].text)  # type: ignore[union-attr,no-any-return]


async def test_a_valid_jwt_reaches_the_tools_as_its_caller(deployment: Deployment) -> None:
    me = await whoami(deployment.url, deployment.token("alice", scopes=["tools", "extra"]))
    expected = Caller.authenticated_as(deployment.issuer.url, "alice")
    assert me == {"subject": "alice", "key": expected.key, "scopes": ["extra", "tools"]}


async def test_a_static_token_reaches_the_tools_as_its_subject(deployment: Deployment) -> None:
    me = await whoami(deployment.url, deployment.static["ci"])
    assert me == {
        "subject": "ci-bot",
        "key": Caller.authenticated_as("static", "ci-bot").key,
        "scopes": ["deploy", "tools"],
    }


async def test_the_issuers_keys_are_read_once_and_unknown_key_ids_cannot_force_refetches(
    deployment: Deployment,
) -> None:
    token = deployment.token("bob")
    for _ in range(5):
        assert post(deployment.url, [("authorization", f"Bearer {token}")]).status_code == 200
    before = deployment.issuer.jwks_requests
    for i in range(20):
        forged = deployment.issuer.mint("bob", audience=deployment.url, key=deployment.issuer.rogue_key, kid=f"k{i}")
        answer = post(deployment.url, [("authorization", f"Bearer {forged}")])
        # 401 after a re-read found no such key; 503 with Retry-After while none is due (it may be a rotated key)
        assert answer.status_code in (401, 503), answer.text
        if answer.status_code == 503:
            assert int(answer.headers["retry-after"]) >= 1
    assert deployment.issuer.jwks_requests - before <= 1  # at most one re-read per 30 s


def test_a_session_cannot_be_used_with_another_callers_token(deployment: Deployment) -> None:
    opened = post(deployment.url, [("authorization", f"Bearer {deployment.token('alice')}")])
    assert opened.status_code == 200
    session = opened.headers["mcp-session-id"]
    ping = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    mallory = [("authorization", f"Bearer {deployment.token('mallory')}"), ("mcp-session-id", session)]
    hijack = httpx2.post(deployment.url, headers=[*MCP_HEADERS, *mallory], content=ping, timeout=10)
    assert hijack.status_code == 404
    for attack in origin_attacks(deployment.token("alice"), deployment.url):
        assert attack.answered(send(deployment.url, attack, session_id=session).status_code), attack.name


def test_the_token_file_and_tokens_never_reach_the_log(deployment: Deployment) -> None:
    for secret in deployment.static.values():
        assert secret not in deployment.served.stderr


# --- start-up refusals ----------------------------------------------------------------------------


def test_a_non_loopback_address_without_auth_refuses_to_start() -> None:
    refused = run_protected("--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 2
    assert "refusing to listen on 0.0.0.0 without authentication" in refused.stderr
    assert "--auth-issuer" in refused.stderr and "--no-auth" in refused.stderr


def test_no_auth_serves_a_non_loopback_address_as_anonymous() -> None:
    with serve_protected("--host", "0.0.0.0", "--no-auth") as served:
        port = served.url.rsplit(":", 1)[1]
        response = post(f"http://127.0.0.1:{port}", [])
        assert response.status_code == 200
        assert served.logged("without authentication (--no-auth)"), served.stderr


def parse(*argv: str) -> AuthSettings:
    parser = argparse.ArgumentParser()
    add_auth_arguments(parser)
    return AuthSettings.from_args(parser.parse_args(list(argv)))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--auth-issuer", "https://id.example"], "at least one --auth-scope"),
        (["--auth-issuer", "http://id.example", "--auth-scope", "t"], "must be https://"),
        (["--no-auth", "--auth-issuer", "https://id.example", "--auth-scope", "t"], "contradicts"),
        (["--auth-audience", "https://gw.example/mcp"], "need --auth-issuer"),
        (["--auth-issuer", "id.example", "--auth-scope", "t"], "not an absolute http(s) URL"),
        (["--allowed-origins", "https://app.example/path"], "is not an origin"),
        (["--rate-limit", "-1"], "--rate-limit"),
        (["--header-timeout", "0"], "--header-timeout"),
    ],
)
def test_bad_flags_are_refused_naming_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(AuthConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(*argv)


def test_an_issuer_on_every_interface_needs_the_public_url() -> None:
    settings = parse("--auth-issuer", "https://id.example", "--auth-scope", "tools")
    with pytest.raises(AuthConfigError, match="needs --resource-url"):
        check_exposure("0.0.0.0", settings)
    check_exposure(
        "0.0.0.0",
        parse("--auth-issuer", "https://id.example", "--auth-scope", "t", "--resource-url", "https://gw.example/mcp"),
    )
    check_exposure("127.0.0.1", AuthSettings())  # loopback needs nothing


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "not valid JSON at line 1"),
        ('{"tokens": []}', "tokens: List should have at least 1 item"),
        ('{"tokens": [{"subject": "a", "token": "short-secret-value"}]}', "at least 32 visible ASCII"),
        ('{"tokens": [{"subject": "a"}]}', "tokens.0: give exactly one of 'token' or 'sha256'"),
        ('{"tokens": [{"subject": "a", "sha256": "abc"}]}', "64 hex digits"),
        ('{"tokens": [{"subject": "a", "token": "%s"}, {"subject": "b", "token": "%s"}]}', "listed twice"),
        ('{"tokens": [{"subject": "a", "token": "%s", "admin": true}]}', "Extra inputs are not permitted"),
    ],
)
def test_a_bad_token_file_names_the_entry_and_never_shows_a_token(tmp_path: Path, content: str, message: str) -> None:
    secret = "s3cr3t-" + "q" * 40
    path = tmp_path / "tokens.json"
    path.write_text(content.replace("%s", secret))
    with pytest.raises(AuthConfigError) as caught:
        StaticTokens.load(path)
    assert str(path) in str(caught.value) and message in str(caught.value)
    assert secret not in str(caught.value) and "short-secret-value" not in str(caught.value)
    assert secret not in repr(StaticTokens([], str(path)))


def test_a_bad_token_file_stops_the_server_before_it_listens(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text('{"tokens": [{"subject": "a", "token": "abc"}]}')
    refused = run_protected("--host", "127.0.0.2", "--auth-tokens", str(path), "--auth-scope", "tools")
    assert refused.returncode == 2 and f"--auth-tokens {path}: tokens.0.token" in refused.stderr


def test_an_unreachable_issuer_is_a_503_not_a_401() -> None:
    # nothing listens on port 9 of 127.0.0.1 (discard): the keys cannot be read, the client should retry, not re-login
    with LocalIssuer() as issuer:
        token = issuer.mint("alice", audience="http://127.0.0.2:1/mcp")
    with serve_protected(
        "--host", "127.0.0.2", "--auth-issuer", "http://127.0.0.1:9", "--auth-scope", "tools"
    ) as served:
        response = post(served.url, [("authorization", f"Bearer {token}")])
        assert response.status_code == 503 and response.json()["error"] == "temporarily_unavailable"
        assert "signing keys" in response.json()["error_description"] and "retry-after" in response.headers
        assert served.logged("ConnectError"), served.stderr  # logged (the log handler wraps long lines)


def test_an_explicit_jwks_url_skips_discovery() -> None:
    with LocalIssuer() as issuer, serve_protected(
        "--host", "127.0.0.2", "--auth-issuer", issuer.url, "--auth-jwks-url", f"{issuer.url}/jwks.json",
        "--auth-scope", "tools",
    ) as served:  # fmt: skip
        token = issuer.mint("alice", audience=served.url)
        assert post(served.url, [("authorization", f"Bearer {token}")]).status_code == 200
        assert issuer.metadata_requests == 0 and issuer.jwks_requests == 1


def test_an_explicit_audience_replaces_the_resource_url() -> None:
    with LocalIssuer() as issuer, serve_protected(
        "--host", "127.0.0.2", "--auth-issuer", issuer.url, "--auth-audience", "api://toolsearch",
        "--auth-scope", "tools",
    ) as served:  # fmt: skip
        ok = issuer.mint("alice", audience="api://toolsearch")
        assert post(served.url, [("authorization", f"Bearer {ok}")]).status_code == 200
        for_url = issuer.mint("alice", audience=served.url)
        assert post(served.url, [("authorization", f"Bearer {for_url}")]).status_code == 401


def test_origins_and_hosts_are_repeatable_and_comma_separated() -> None:
    settings = parse(
        "--allowed-origins", "https://a.example,https://b.example", "--allowed-origins", "https://c.example"
    )
    assert settings.allowed_origins == ("https://a.example", "https://b.example", "https://c.example")
    assert parse("--allowed-hosts", "mcp.internal:*").allowed_hosts == ("mcp.internal:*",)
