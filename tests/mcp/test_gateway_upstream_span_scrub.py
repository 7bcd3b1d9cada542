"""With a tracer provider set (docs/tracing.md "The gateway"), the `mcp` SDK's CLIENT span of each request the
gateway forwards (`MCP send tools/call login`, `MCP send tools/list`) takes an upstream's error message as its status:
that message reaches the span scrubbed of what the server was configured with, as it reaches the model and the log.

The SDK's spans use the global provider, which a process sets once, so the gateway runs as a process whose
`sitecustomize.py` sets one that writes each span as a JSON line (as in tests/test_tracing.py); the upstreams are
tests/fakes/hostile_upstream.py, over stdio and over real HTTP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.hostile_upstream import hostile, hostile_over_http
from mcp_servers import http_gateway, wait_until, write_config
from mcp_servers.clients import connect, text
from span_export import exported, tracing_children

pytestmark = pytest.mark.slow

ENV_SECRET = "ENVSECRET111"
HEADER_SECRET = "HDRSECRET222"
LIST_SECRET = "LISTSECRET333"

async def test_an_upstream_error_reaches_the_sdk_client_span_scrubbed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: span 'MCP send tools/call login' had the status "401 Unauthorized: the credential 'ENVSECRET111' was
    # rejected" (and "'Bearer HDRSECRET222'" over HTTP), 'MCP send tools/list' "... 'LISTSECRET333' ...", while the
    # model and the log saw '***'.
    with hostile_over_http() as (_, url):  # started before the hook is on PYTHONPATH: only the gateway traces
        _, spans = tracing_children(tmp_path, monkeypatch)
        monkeypatch.setenv("REMOTE_TOKEN", HEADER_SECRET)
        servers = {
            "acct": hostile(API_TOKEN=ENV_SECRET),
            "remote": {"url": url, "headers": {"Authorization": "Bearer ${REMOTE_TOKEN}"}},
            "broken": hostile(API_TOKEN=LIST_SECRET, HOSTILE_LIST="fail"),  # its tools/list at start fails
        }
        config = write_config(tmp_path / "servers.json", servers)
        with http_gateway(config, "--backend", "bm25", "--pin", "acct__login", "--pin", "remote__login") as gateway:
            async with connect(gateway.url or "") as client:
                acct = await client.call("acct__login")
                remote = await client.call("remote__login")
            gateway.stop()
    # the model's view, as before
    assert acct.is_error and text(acct).endswith("401 Unauthorized: the credential '***' was rejected"), text(acct)
    assert remote.is_error and text(remote).endswith("the credential '***' was rejected"), text(remote)

    def sends(name: str) -> list[dict[str, Any]]:
        return [s for s in exported(spans) if s["name"] == name]

    assert wait_until(lambda: len(sends("MCP send tools/call login")) == 2, timeout=10)
    # the SDK's spans are kept, with the error status, and say what went wrong with the credential hidden
    statuses = sorted(s["status"]["description"] for s in sends("MCP send tools/call login"))
    assert statuses == [
        "401 Unauthorized: the credential '***' was rejected",
        "401 Unauthorized: the credential '***' was rejected",
    ], statuses
    assert all(s["status"]["status_code"] == "ERROR" for s in sends("MCP send tools/call login"))
    failed = [s for s in sends("MCP send tools/list") if s["status"]["status_code"] == "ERROR"]
    assert [s["status"]["description"] for s in failed] == ["401 Unauthorized: the credential '***' was rejected"]
    everything = "\n".join(path.read_text() for path in spans.glob("spans-*.jsonl"))
    for secret in (ENV_SECRET, HEADER_SECRET, LIST_SECRET):
        assert secret not in everything, secret
    assert "credential '***' was rejected" in gateway.stderr and LIST_SECRET not in gateway.stderr
