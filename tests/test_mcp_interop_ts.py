"""The gateway with the official TypeScript MCP clients (v1 and v2 SDK), over stdio and streamable HTTP.

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
    if sdk == "v2":  # auto negotiation probed the 2026 era and fell back to the handshake
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
