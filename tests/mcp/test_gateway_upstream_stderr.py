"""What a stdio upstream writes on its stderr reaches the gateway's log as docs/mcp.md says of the lines a server
prints: scrubbed of what it was configured with, without terminal escapes, cut, and after the server's name, so that
no line passes for the gateway's own. The upstream is the toy server (tests/mcp_servers/toy_server.py), whose
`TOY_STDERR` it writes on its stderr at start; the gateway is a real process."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_servers import GatewayProcess, toy, write_config

from toolsearch.mcp.source import STDERR_CHARS, MCPToolSource

pytestmark = pytest.mark.slow

SECRET = "sk-live-ENVSECRET111"
PRINTED = (
    f"debug: authenticating with token {SECRET}\x1b[2J\x1b]0;owned\x07\n"
    "toolsearch: MCP server 'bank': speaks 2025-11-25 (verified)"
)


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger="toolsearch.mcp"):
        yield caplog


def test_the_gateway_logs_an_upstreams_stderr_scrubbed_plain_and_named(tmp_path: Path) -> None:
    # Before: the server's stderr was the gateway's own, so its log read
    # 'debug: authenticating with token sk-live-ENVSECRET111\x1b[2J\x1b]0;owned\x07' (the configured secret, and
    # escapes that clear the terminal and retitle it), then "toolsearch: MCP server 'bank': speaks 2025-11-25
    # (verified)", a line of the gateway's, forged.
    config = write_config(tmp_path / "servers.json", {"acct": toy(API_TOKEN=SECRET, TOY_STDERR=PRINTED)})
    gateway = GatewayProcess(config, "--backend", "bm25")
    try:
        gateway.wait_ready()
        assert gateway.logged("toolsearch: MCP server 'acct' (stderr): toolsearch: MCP server 'bank'")
    finally:
        gateway.stop()
    lines = gateway.stderr.splitlines()
    assert "toolsearch: MCP server 'acct' (stderr): debug: authenticating with token ***" in lines, lines
    assert "toolsearch: MCP server 'acct' (stderr): toolsearch: MCP server 'bank': speaks 2025-11-25 (verified)" \
        in lines, lines
    assert not [line for line in lines if line.startswith("toolsearch: MCP server 'bank'")], lines
    assert SECRET not in gateway.stderr and "ENVSECRET" not in gateway.stderr
    assert "\x1b" not in gateway.stderr and "\x07" not in gateway.stderr


async def test_a_library_user_gets_the_lines_in_the_log_each_cut(log: pytest.LogCaptureFixture) -> None:
    # Before: written to this process's stderr as the server wrote them, whatever the logging set-up said
    printed = f"{PRINTED}\n{'y' * 50_000}\nthe line after a long one\n\n"
    async with MCPToolSource({"mcpServers": {"acct": toy(API_TOKEN=SECRET, TOY_STDERR=printed)}}) as source:
        assert source.ready == ["acct"]
    said = [r.getMessage() for r in log.records if r.name == "toolsearch.mcp" and "(stderr)" in r.getMessage()]
    assert said == [
        "MCP server 'acct' (stderr): debug: authenticating with token ***",
        "MCP server 'acct' (stderr): toolsearch: MCP server 'bank': speaks 2025-11-25 (verified)",
        f"MCP server 'acct' (stderr): {'y' * STDERR_CHARS}...",
        "MCP server 'acct' (stderr): the line after a long one",
    ], said
    assert all(r.levelno == logging.INFO for r in log.records if "(stderr)" in r.getMessage())
    assert SECRET not in log.text


async def test_a_stream_given_as_errlog_gets_each_line_cleaned(tmp_path: Path) -> None:
    # its owner labels the lines (`toolsearch build` writes `mcp server: ` before each)
    with (tmp_path / "stderr.txt").open("w+", encoding="utf-8") as errlog:
        async with MCPToolSource({"mcpServers": {"acct": toy(API_TOKEN=SECRET, TOY_STDERR=PRINTED)}},
                                 errlog=errlog) as source:
            assert source.ready == ["acct"]
        errlog.seek(0)
        written = errlog.read()
    assert written == (
        "debug: authenticating with token ***\n"
        "toolsearch: MCP server 'bank': speaks 2025-11-25 (verified)\n"
    ), repr(written)
