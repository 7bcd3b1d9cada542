"""`toolsearch mcp serve --augment FILE` end to end: a real gateway process, a real upstream server, the
real `mcp` clients of both protocol eras. Every upstream tool a client is shown carries the field, the
upstream receives its own arguments only, each call's values are logged, a missing one is a tool error."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_servers import PY, gateway_argv, gateway_env, http_gateway, write_config
from mcp_servers.clients import connect, text

pytestmark = pytest.mark.slow

ARGS_SERVER = Path(__file__).resolve().parents[1] / "mcp_servers" / "args_server.py"
REASON = {"type": "string", "description": "Why you call this tool, in one sentence."}
SCHEMA = {"type": "object", "properties": {"call_reason": REASON}, "required": ["call_reason"]}


def _files(tmp_path: Path, **env: str) -> tuple[Path, Path]:
    entry: dict[str, Any] = {"command": PY, "args": [str(ARGS_SERVER)]}
    if env:
        entry["env"] = env
    config = write_config(tmp_path / "servers.json", {"args": entry})
    augment = tmp_path / "augment.json"
    augment.write_text(json.dumps(SCHEMA), encoding="utf-8")
    return config, augment


def _assert_augmented(schema: dict[str, Any]) -> None:
    assert schema["properties"]["call_reason"] == REASON
    assert schema["required"] == ["call_reason", "city"]


async def test_both_eras_show_the_field_log_it_and_call_the_upstream_without_it(tmp_path: Path) -> None:
    config, augment = _files(tmp_path)
    with http_gateway(config, "--augment", str(augment), "--backend", "bm25") as gateway:
        url = gateway.url or ""
        async with connect(url) as client:  # the handshake era: found tools join the list
            tools = await client.tools()
            assert "call_reason" not in json.dumps(tools["tool_search"].input_schema)
            assert "call_reason" not in json.dumps(tools["call_tool"].input_schema)
            await client.search("weather forecast for a city")
            await client.wait_changed()
            _assert_augmented((await client.tools())["args__forecast"].input_schema)
            ran = await client.call("args__forecast", {"city": "Paris", "call_reason": "The user asked about Paris."})
            assert not ran.is_error and json.loads(text(ran)) == {"city": "Paris"}
            missing = await client.call("args__forecast", {"city": "Paris"})
            assert missing.is_error and "'call_reason' is a required property" in text(missing)

        async with Client(url) as modern:  # the 2026-07-28 era: found definitions in the result
            assert modern.session.protocol_version == "2026-07-28"
            found = await modern.call_tool("tool_search", {"query": "weather forecast for a city"})
            assert found.structured_content is not None
            [entry] = [t for t in found.structured_content["tools"] if t["name"] == "args__forecast"]
            _assert_augmented(entry["inputSchema"])
            ran = await modern.call_tool(
                "call_tool", {"name": "args__forecast", "arguments": {"city": "Oslo", "call_reason": "Oslo, asked."}}
            )
            assert not ran.is_error and json.loads(text(ran)) == {"city": "Oslo"}
            missing = await modern.call_tool("call_tool", {"name": "args__forecast", "arguments": {"city": "Oslo"}})
            assert missing.is_error and "'call_reason' is a required property" in text(missing)
    log = gateway.stderr
    assert 'augmented call args__forecast by' in log
    assert '{"call_reason": "The user asked about Paris."}' in log and '{"call_reason": "Oslo, asked."}' in log


def test_a_field_an_upstream_tool_already_has_is_refused_at_start(tmp_path: Path) -> None:
    config, augment = _files(tmp_path, ARGS_PARAMETER="call_reason")
    done = subprocess.run(
        gateway_argv(config, "--augment", str(augment), "--backend", "bm25"),
        env=gateway_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode != 0
    assert "'call_reason' collide with the parameter(s) of the same name of tool 'args__forecast'" in done.stderr


def test_an_unusable_augment_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    config, augment = _files(tmp_path)
    augment.write_text('{"properties": {}}', encoding="utf-8")
    done = subprocess.run(
        gateway_argv(config, "--augment", str(augment)),
        env=gateway_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and f"{augment}: the augmentation schema needs 'properties'" in done.stderr
