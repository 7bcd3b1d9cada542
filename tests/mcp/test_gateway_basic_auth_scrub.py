"""An HTTP upstream's URL user info (`http://user:password@host/mcp`) reaches the upstream as `Authorization: Basic
<base64>`; an upstream that quotes that header back (tests/fakes/hostile_upstream.py, over real HTTP) is scrubbed of
it, for the model and the log. A URL with user info and an Authorization header as well is a config error."""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Iterator

import pytest
from fakes.hostile_upstream import hostile_over_http
from mcp_servers.clients import text

from toolsearch.mcp.config import MCPConfigError, parse_config
from toolsearch.mcp.source import MCPToolSource

pytestmark = pytest.mark.slow

PASSWORD = "PWSECRET444"
TOKEN_USER = "ghpUSERTOKEN0123456789"


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger="toolsearch.mcp"):
        yield caplog


def leaked(text: str) -> list[str]:
    """The credentials `text` shows, plain or in a `Basic` header's base64."""
    decoded = [base64.b64decode(token).decode(errors="replace") for token in re.findall(r"[A-Za-z0-9+/]{8,}={0,2}",
                                                                                         text)
               if len(token) % 4 == 0]
    return [secret for secret in (PASSWORD, TOKEN_USER) if secret in text or any(secret in d for d in decoded)]


async def test_the_basic_form_of_a_url_password_reaches_neither_the_model_nor_the_log(
    log: pytest.LogCaptureFixture,
) -> None:
    # Before: "rejected the call to 'login': 401 Unauthorized: the credential 'Basic Ym9iOlBXU0VDUkVUNDQ0' was
    # rejected" to the model (base64 of bob:PWSECRET444), the same for a token as the user name, and the same in the
    # log line of a server whose listing failed at start.
    with hostile_over_http() as (_, url), hostile_over_http(HOSTILE_LIST="fail") as (_, failing):
        config = {"mcpServers": {
            "remote": {"url": url.replace("http://", f"http://bob:{PASSWORD}@"), "startupTimeout": 10},
            "tokenuser": {"url": url.replace("http://", f"http://{TOKEN_USER}@"), "startupTimeout": 10},
            "encoded": {"url": url.replace("http://", "http://b%40b:PWSECRET444%2F1@"), "startupTimeout": 10},
            "broken": {"url": failing.replace("http://", f"http://bob:{PASSWORD}@"), "startupTimeout": 10},
        }}
        async with MCPToolSource(config) as source:
            for name in ("remote", "tokenuser", "encoded"):
                rejected = text(await source.call_tool(f"{name}__login"))
                # the upstream got the Basic header (what it quotes), and the model sees it hidden
                assert rejected.endswith("401 Unauthorized: the credential 'Basic ***' was rejected"), rejected
                assert leaked(rejected) == [], rejected
                as_tool = text(await source.call_tool(f"{name}__login_result"))
                assert as_tool == "401 Unauthorized: the credential 'Basic ***' was rejected", as_tool
            assert "the credential 'Basic ***' was rejected" in source.failures["broken"]
    assert "MCP server 'broken' skipped" in log.text
    assert leaked(log.text) == [], log.text


@pytest.mark.parametrize("header", ["Authorization", "authorization", " AUTHORIZATION"])
def test_url_user_info_and_an_authorization_header_are_refused_together(header: str) -> None:
    # Before: accepted, and the HTTP client sent the URL's Basic header in place of the configured one, silently
    entry = {"url": "https://bob:${PW}@mcp.example.com/mcp", "headers": {header: "Bearer ${TOKEN}"}}
    with pytest.raises(MCPConfigError) as refused:
        parse_config({"mcpServers": {"acct": entry}}, environ={"PW": PASSWORD, "TOKEN": "tok-SECRET-1234"})
    message = str(refused.value)
    assert message.startswith("server 'acct': url 'https://***@mcp.example.com/mcp' carries a user name or password")
    assert f"'headers' sets {header!r} too" in message
    assert "removing the user info from the url or the Authorization header" in message
    assert PASSWORD not in message and "tok-SECRET" not in message


@pytest.mark.parametrize("entry", [
    {"url": "https://bob:pw-1@mcp.example.com/mcp"},  # the URL's credential alone
    {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer t-1"}},  # the header's alone
    {"url": "https://@mcp.example.com/mcp", "headers": {"Authorization": "Bearer t-1"}},  # an empty user info: no Basic
    {"url": "https://bob:pw-1@mcp.example.com/mcp", "headers": {"X-Api-Key": "k-1"}},  # another header
])
def test_one_credential_either_way_is_accepted(entry: dict[str, object]) -> None:
    assert parse_config({"mcpServers": {"acct": entry}}, environ={})["acct"].url == entry["url"]
