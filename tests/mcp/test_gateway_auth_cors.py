"""`--allowed-origins` lets a browser page on those origins call the gateway: CORS preflights and headers.

Audit 53 F2: a page on an allowed origin could not call at all. Its preflight (OPTIONS, which carries
no token) got 405, or 401 with authentication, and no answer carried `Access-Control-Allow-Origin`,
so the browser blocked every call and `mcp-session-id` could not be read. Now the preflight is
answered before authentication and every answer to such a page (a 401 included) names its origin,
exposes the session id and the challenge, and varies by Origin. Origins the operator did not list
get no CORS: a foreign one is refused (403) as before, and a page on another local port passes the
Origin check but still cannot read an answer.

Real `toolsearch mcp serve` processes over the toy server; raw HTTP as a browser sends it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from fakes.attacks import INITIALIZE, MCP_HEADERS
from mcp_servers import GatewayProcess, http_gateway, toy, write_config

pytestmark = pytest.mark.slow

APP = "https://app.example"
TOKEN = secrets.token_urlsafe(32)
ASKED = "authorization, content-type, mcp-protocol-version, mcp-session-id, mcp-param-region"


def preflight(url: str, origin: str, headers: str = ASKED) -> httpx2.Response:
    asked = {"origin": origin, "access-control-request-method": "POST", "access-control-request-headers": headers}
    return httpx2.request("OPTIONS", url, headers=asked, timeout=30)


def post(url: str, *headers: tuple[str, str]) -> httpx2.Response:
    return httpx2.post(url, headers=[*MCP_HEADERS, *headers], content=json.dumps(INITIALIZE), timeout=30)


def listed(value: str) -> set[str]:
    return {part.strip().lower() for part in value.split(",") if part.strip()}


class Served:
    def __init__(self, url: str, authenticated: bool) -> None:
        self.url = url
        self.authenticated = authenticated


@pytest.fixture(scope="module", params=["no auth", "static tokens"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("cors")
    flags = ["--backend", "bm25", "--allowed-origins", f"{APP},https://other.example:*"]
    if request.param == "static tokens":
        tokens = folder / "tokens.json"
        tokens.write_text(json.dumps({"tokens": [{"subject": "alice", "scopes": ["tools"], "token": TOKEN}]}))
        flags += ["--auth-tokens", str(tokens), "--auth-scope", "tools"]
    with http_gateway(write_config(folder / "servers.json", {"toy": toy()}), *flags) as gateway:
        yield Served(gateway.wait_ready(), request.param == "static tokens")


@pytest.fixture
def url(served: Served) -> str:
    return served.url


def test_a_preflight_from_an_allowed_origin_is_answered_before_authentication(url: str) -> None:
    answer = preflight(url, APP)
    assert answer.status_code == 204, answer.text
    assert answer.headers["access-control-allow-origin"] == APP
    assert {"post", "get", "delete"} <= listed(answer.headers["access-control-allow-methods"])
    assert listed(ASKED) <= listed(answer.headers["access-control-allow-headers"])
    assert "origin" in listed(answer.headers["vary"])
    assert "access-control-allow-credentials" not in answer.headers  # bearer tokens, never cookies
    # a pattern with any port answers with the page's own origin
    other = preflight(url, "https://other.example:8443")
    assert other.status_code == 204 and other.headers["access-control-allow-origin"] == "https://other.example:8443"


def test_answers_to_an_allowed_origin_name_it_and_expose_the_session_id(url: str) -> None:
    answer = post(url, ("origin", APP), ("authorization", f"Bearer {TOKEN}"))  # ignored without authentication
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == APP
    assert "origin" in listed(answer.headers["vary"])
    exposed = listed(answer.headers["access-control-expose-headers"])
    assert {"mcp-session-id", "www-authenticate"} <= exposed
    assert answer.headers["mcp-session-id"]


def test_a_refusal_to_an_allowed_origin_can_be_read_by_its_page(served: Served) -> None:
    answer = post(served.url, ("origin", APP), ("authorization", "Bearer " + "x" * 43))
    assert answer.status_code == (401 if served.authenticated else 200)  # without authentication it is not looked at
    assert answer.headers["access-control-allow-origin"] == APP  # the page reads the challenge to sign in
    assert "www-authenticate" in listed(answer.headers["access-control-expose-headers"])


def test_origins_not_listed_get_no_cors(url: str) -> None:
    foreign = preflight(url, "https://evil.example")
    assert foreign.status_code == 403 and "access-control-allow-origin" not in foreign.headers
    refused = post(url, ("origin", "https://evil.example"), ("authorization", f"Bearer {TOKEN}"))
    assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
    # a page on another local port passes the Origin check on loopback, as the SDK lets it, but is given no CORS
    local = post(url, ("origin", "http://localhost:5173"), ("authorization", f"Bearer {TOKEN}"))
    assert local.status_code == 200 and "access-control-allow-origin" not in local.headers
    assert preflight(url, "http://localhost:5173").status_code != 204


def test_origin_null_is_refused_when_not_listed(url: str) -> None:
    # `Origin: null` is what sandboxed iframes, data: and file: pages send: any site can make its page send it
    for answer in (preflight(url, "null"), post(url, ("origin", "null"), ("authorization", f"Bearer {TOKEN}"))):
        assert answer.status_code == 403, answer.text
        assert "access-control-allow-origin" not in answer.headers
        assert "Origin 'null' is not allowed" in answer.text


@pytest.mark.parametrize("listed", ["null", f"{APP},NULL"])
def test_null_in_allowed_origins_stops_the_gateway_at_start(tmp_path: Path, listed: str) -> None:
    """Listing `null` would give CORS to every sandboxed or data: page, whatever site made it: the gateway refuses
    to start, naming the flag, the value and what to list instead."""
    gateway = GatewayProcess(write_config(tmp_path / "servers.json", {"toy": toy()}), "--allowed-origins", listed)
    try:
        started = gateway.wait_url(90)  # None once the process has ended without listening
    finally:
        code = gateway.stop()
    assert started is None and code != 0, gateway.stderr
    value = listed.rsplit(",", 1)[-1]
    assert f"--allowed-origins {value!r} is sent by any sandboxed or data: page" in gateway.stderr
    assert "list the page's real origin (scheme://host[:port]) instead" in gateway.stderr


@pytest.mark.parametrize("settings", [
    {"allowed_origins": ("null",)},
    {"allowed_origins": ("https://app.example",), "rate_limit": float("nan")},
], ids=["null-origin", "nan-rate"])
def test_an_application_that_wraps_its_own_app_gets_the_same_refusals(settings: dict[str, object]) -> None:
    # Before: protect() checked nothing, so a library caller's AuthSettings(allowed_origins=("null",)) gave CORS to
    # every sandboxed or data: page, which `mcp serve --allowed-origins null` refuses at start.
    from toolsearch.mcp.auth import AuthConfigError, AuthSettings, protect

    async def app(scope: object, receive: object, send: object) -> None:
        raise AssertionError("never reached")

    with pytest.raises(AuthConfigError, match=r"--allowed-origins 'null'|--rate-limit"):
        protect(app, AuthSettings(no_auth=True, **settings), path="/mcp",  # type: ignore[arg-type]
                resource_url="http://127.0.0.1:8000/mcp")
