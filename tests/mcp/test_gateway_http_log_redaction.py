"""An application that logs at INFO (`logging.basicConfig(level=logging.INFO)`) and lists an HTTP upstream's tools
(`acollect_tools`, `MCPToolSource`: docs/mcp.md "From Python") gets the HTTP client's one line per request, and at
DEBUG the SDK transport's, with the URL's user info and credential-named query values hidden. The upstream is the toy
server over real HTTP; caplog's handler stands for the application's."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from mcp_servers import toy_over_http

from toolsearch._redact import RedactedRecords
from toolsearch.mcp.source import MCPToolSource, acollect_tools

pytestmark = pytest.mark.slow

PASSWORD = "PWSECRET444"
TOKEN = "QTOKSECRET333"
LOGGERS = ("httpx2", "mcp.client.streamable_http")


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger="httpx2"), \
            caplog.at_level(logging.DEBUG, logger="mcp.client.streamable_http"):
        yield caplog


def lines(log: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [record.getMessage() for record in log.records if record.name == name]


async def test_the_http_clients_request_lines_hide_the_urls_credentials(log: pytest.LogCaptureFixture) -> None:
    # Before: `HTTP Request: POST http://bob:PWSECRET444@127.0.0.1:38711/mcp?token=QTOKSECRET333 "HTTP/1.1 200 OK"`
    # at INFO, and `Connecting to StreamableHTTP endpoint: http://bob:PWSECRET444@...?token=QTOKSECRET333` at DEBUG
    with toy_over_http() as url:
        secret_url = url.replace("http://", f"http://bob:{PASSWORD}@") + f"?token={TOKEN}"
        found = await acollect_tools({"mcpServers": {"remote": {"url": secret_url}}})
        assert [tool.name for tool in found.tools][:1] == ["remote__echo"] and not found.failures
        async with MCPToolSource({"mcpServers": {"again": {"url": secret_url}}}, restart=False) as source:
            assert source.ready == ["again"]
    shown = url.replace("http://", "http://***@") + "?token=***"
    requests = lines(log, "httpx2")
    assert requests and all(line.startswith(f"HTTP Request: POST {shown} ") or
                            line.startswith(f"HTTP Request: DELETE {shown} ") or
                            line.startswith(f"HTTP Request: GET {shown} ") for line in requests), requests
    assert f"Connecting to StreamableHTTP endpoint: {shown}" in lines(log, "mcp.client.streamable_http")
    assert PASSWORD not in log.text and TOKEN not in log.text, log.text
    # installed once, however many connections were made
    for name in LOGGERS:
        assert sum(isinstance(kept, RedactedRecords) for kept in logging.getLogger(name).filters) == 1


async def test_a_logged_errors_traceback_hides_the_urls_credentials_too(log: pytest.LogCaptureFixture) -> None:
    with toy_over_http() as url:
        found = await acollect_tools({"mcpServers": {"remote": {"url": url}}})
    assert found.tools
    failure = ConnectionError(f"Client error '401 Unauthorized' for url 'http://bob:{PASSWORD}@host/mcp?token={TOKEN}'")
    logging.getLogger("mcp.client.streamable_http").error("Error in post_writer", exc_info=failure)
    assert "for url 'http://***@host/mcp?token=***" in log.text, log.text  # (the quote goes with the value)
    assert PASSWORD not in log.text and TOKEN not in log.text
