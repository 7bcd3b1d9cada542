"""A 2026-07-28 search returns the found tools' full definitions: annotations and output schema too.

Before, a 2026 client learnt a found tool's name, server, title, description and input schema only: it never saw an
upstream's `destructiveHint` (to ask the user before a destructive call) nor its output schema (to check a result's
`structuredContent`), which a handshake-era client sees in its tool list. Now both eras show one definition, cleaned
the same way (a zero-width character in the annotations' title is gone in both). A real gateway process over
streamable HTTP in front of tests/mcp_servers/faulty_server.py, driven by the real `mcp` client in both eras.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_servers import http_gateway, write_config
from mcp_servers.clients import connect, faulty, text

pytestmark = pytest.mark.slow

WIPE = {
    "name": "wipe_disk",
    "title": "Wipe disk",
    "description": "Erase every file on the disk volume permanently.",
    "inputSchema": {"type": "object", "properties": {"volume": {"type": "string"}}, "required": ["volume"]},
    "annotations": {"title": "Wipe\u200b the disk", "destructiveHint": True, "readOnlyHint": False},
}
WEATHER = {
    "name": "weather_report",
    "description": "Weather report for a city, with structured output.",
    "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}},
    "outputSchema": {"type": "object", "properties": {"temp": {"type": "number"}}, "required": ["temp"]},
}
QUERY = "erase disk volume weather report city"
SHOWN = ("title", "description", "inputSchema", "outputSchema", "annotations")


async def test_a_2026_search_returns_the_annotations_and_output_schema_a_handshake_list_shows(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"up": faulty(FAULTY_EXTRA_TOOLS=json.dumps([WIPE, WEATHER]))})
    with http_gateway(config, "--backend", "bm25", "--min-relative-score", "0") as gateway:
        async with connect(gateway.url or "") as old:
            await old.search(QUERY, max_results=2)
            listed = {
                t.name: t.model_dump(by_alias=True, exclude_none=True, mode="json")
                for t in (await old.session.list_tools()).tools
            }
        async with Client(gateway.url or "", mode="2026-07-28") as modern:
            found = await modern.call_tool("tool_search", {"query": QUERY, "max_results": 2})
    entries: dict[str, dict[str, Any]] = {e["name"]: e for e in (found.structured_content or {})["tools"]}
    assert set(entries) == {"up__wipe_disk", "up__weather_report"}

    wipe, weather = entries["up__wipe_disk"], entries["up__weather_report"]
    assert wipe["annotations"] == {"title": "Wipe the disk", "destructiveHint": True, "readOnlyHint": False}
    assert weather["outputSchema"] == WEATHER["outputSchema"]
    for name, entry in entries.items():  # one definition in both eras, cleaned alike
        assert {k: v for k, v in entry.items() if k in SHOWN} == {k: v for k, v in listed[name].items() if k in SHOWN}
        assert entry["server"] == "up"
    said = text(found).splitlines()  # the model reads the hints too, on the line after the tool's schema
    at = next(i for i, line in enumerate(said) if line.startswith("- up__wipe_disk "))
    assert said[at + 1].startswith("  input schema: ") and said[at + 2].startswith("  annotations: ")
    assert json.loads(said[at + 2].removeprefix("  annotations: ")) == wipe["annotations"]
