"""The relative score floor on what a gateway search exposes (`--min-relative-score`), through a real gateway process.

A search for "echo the given text back" on the toy server finds `echo` (bm25 score 13.5) and two tools that
share one word with it, `sleep` and `grow` (1.4 and 1.1, about a tenth of the best): weak matches a client
should not be handed. By default a hit below a fifth of the best hit's score is left out, with a note, in both
eras: the handshake era adds only `echo` to the session's list, the 2026-07-28 era returns only its definition.
`--min-relative-score 0` exposes every hit, as before the floor.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from mcp_servers import http_gateway, toy, write_config
from mcp_servers.clients import connect, text

pytestmark = pytest.mark.slow

QUERY = "echo the given text back"
WEAK = ["toy__sleep", "toy__grow"]


async def _exposed(url: str) -> tuple[list[str], str, list[str]]:
    """(what the handshake era adds to the list, its search text, what the 2026 era returns) for QUERY."""
    async with connect(url) as old:
        found = await old.search(QUERY, max_results=5)
        listed = [n for n in await old.names() if n.startswith("toy__")]
    async with Client(url) as modern:
        result = await modern.call_tool("tool_search", {"query": QUERY, "max_results": 5})
        returned = [t["name"] for t in (result.structured_content or {})["tools"]]
    return listed, text(found), returned


async def test_weak_matches_are_left_out_of_what_a_search_exposes(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    with http_gateway(config, "--backend", "bm25") as gateway:
        listed, said, returned = await _exposed(gateway.url or "")
    assert listed == ["toy__echo"] and returned == ["toy__echo"]
    assert "2 weaker match(es) left out" in said and "--min-relative-score" not in said  # the model is told, plainly


async def test_a_floor_of_zero_exposes_every_hit(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    with http_gateway(config, "--backend", "bm25", "--min-relative-score", "0") as gateway:
        listed, said, returned = await _exposed(gateway.url or "")
    assert sorted(listed) == sorted(["toy__echo", *WEAK]) and sorted(returned) == sorted(listed)
    assert "left out" not in said
