"""The gateway with the official TypeScript MCP clients (v1 and v2 SDK), over stdio and streamable HTTP.

v1 and v2 speak the handshake era; v2 pinned to 2026-07-28 (`v2modern`) speaks only the modern one.

The client side is tests/interop/client.mjs, run by Node against packages that
.ci/setup.d/mcp-interop-clients.sh installs into .cache/node; it reports what it saw as JSON.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_servers import PY, ROOT, GatewayProcess, gateway_argv, gateway_env, http_gateway, time_server, write_config
from mcp_servers.clients import faulty

pytestmark = pytest.mark.slow

SCRIPT = ROOT / "tests" / "interop" / "client.mjs"
MODULES = ROOT / ".cache" / "node" / "node_modules"
SETUP = ".ci/setup.d/mcp-interop-clients.sh"
META = ["tool_search", "call_tool"]


def node() -> str:
    """Node, with the TypeScript SDKs installed; their absence is a broken setup, not a reason to skip."""
    found = shutil.which("node")
    if found is None or not (MODULES / "@modelcontextprotocol" / "client").is_dir():
        pytest.fail(f"the TypeScript MCP clients are not installed: run `bash {SETUP}` (needs Node >= 20 and npm)")
    return found


def run_client(sdk: str, target: list[str]) -> dict[str, Any]:
    done = subprocess.run(
        [node(), str(SCRIPT), "--modules", str(MODULES), "--sdk", sdk, *target],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert done.returncode == 0, f"the {sdk} client failed:\n{done.stderr[-4000:]}"
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def check(report: dict[str, Any], sdk: str) -> None:
    if sdk == "v2":  # asked for the handshake era: the gateway still serves it
        assert report["protocolVersion"] is not None and report["protocolVersion"] < "2026"
    assert report["capabilities"]["tools"]["listChanged"] is True
    assert "tool_search" in report["instructions"]
    assert report["toolsAtStart"] == META

    assert report["search"]["isError"] is False and "time__convert_time" in report["search"]["text"]
    # the SDK heard tools/list_changed and fetched the new list by itself
    assert report["refreshedList"] == [*META, "time__convert_time"]
    assert report["notifications"] == 1
    assert report["toolsAfterSearch"] == [*META, "time__convert_time"]

    assert report["call"]["isError"] is False
    assert report["call"]["structured"]["target"]["timezone"] == "Asia/Tokyo"  # checked against its output schema

    assert report["badArguments"]["isError"] is True and "`max_results`" in report["badArguments"]["text"]

    assert report["secondClientTools"] == META and report["secondClientNotifications"] == 0
    assert report["firstClientTools"] == [*META, "time__convert_time"]


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("interop-ts") / "servers.json", {"time": time_server()})


@pytest.fixture(scope="module")
def gateway(config: Path) -> Iterator[GatewayProcess]:
    with http_gateway(config) as process:
        yield process


@pytest.mark.parametrize("sdk", ["v1", "v2"])
def test_typescript_client_over_http(gateway: GatewayProcess, sdk: str) -> None:
    check(run_client(sdk, ["--url", gateway.url or ""]), sdk)


@pytest.mark.parametrize("sdk", ["v1", "v2"])
def test_typescript_client_over_stdio(config: Path, sdk: str) -> None:
    # Each client launches its own gateway, as a desktop app does; the second client is a second process.
    argv = gateway_argv(config, "--quiet")
    command = {"command": argv[0], "args": argv[1:], "env": gateway_env()}
    assert argv[0] == PY
    check(run_client(sdk, ["--stdio", json.dumps(command)]), sdk)


def check_modern(report: dict[str, Any]) -> None:
    assert report["protocolVersion"] == "2026-07-28"
    assert report["capabilities"]["tools"]["listChanged"] is True  # delivered on subscriptions/listen
    assert "call_tool" in report["instructions"]
    assert report["toolsAtStart"] == [*META, "kept__echo"]

    found = report["search"]
    assert found["isError"] is False and found["structured"]["tools"][0]["name"] == "time__convert_time"
    assert found["structured"]["tools"][0]["inputSchema"]["properties"]["target_timezone"]
    assert "time__convert_time (server time)" in found["text"]
    assert report["call"]["isError"] is False and "Asia/Tokyo" in report["call"]["text"]
    assert report["badArguments"]["isError"] is True and "Schema: " in report["badArguments"]["text"]
    assert report["listAfterSearch"] == report["listAtStart"]  # the same bytes after a search and a call

    assert report["secondClientTools"] == [*META, "kept__echo"]
    assert report["mutate"]["isError"] is False, report["mutate"]
    assert report["heardChange"] is True and report["pinnedAfterChange"] == "Echo, changed."


@pytest.fixture(scope="module")
def modern_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    servers = {"time": time_server(), "kept": faulty(changedTools="keep")}
    return write_config(tmp_path_factory.mktemp("interop-ts-modern") / "servers.json", servers)


def test_typescript_modern_only_client_over_http(modern_config: Path) -> None:
    with http_gateway(modern_config, "--pin", "kept__echo") as gateway:
        report = run_client("v2modern", ["--url", gateway.url or ""])
    check_modern(report)
    # the second client is the same (anonymous) caller over HTTP: the handle is its own to reuse
    assert report["secondClientWithFirstContext"]["isError"] is False


def test_typescript_modern_only_client_over_stdio(modern_config: Path) -> None:
    argv = gateway_argv(modern_config, "--quiet", "--pin", "kept__echo")
    report = run_client(
        "v2modern", ["--stdio", json.dumps({"command": argv[0], "args": argv[1:], "env": gateway_env()})]
    )
    check_modern(report)
    # the second client launched its own gateway process: the first one's handle is unknown there
    reused = report["secondClientWithFirstContext"]
    assert reused["isError"] is True and "Unknown context" in reused["text"]
