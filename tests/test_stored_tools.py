"""Stored tools read lazily: a loaded index parses only the tools a result, a session or an update needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolsearch import IndexFormatError, SessionManager, Tool, ToolIndex
from toolsearch.store import read_manifest
from toolsearch.stored_tools import OFFSETS_FILE, TABLE_FILE, LazyCatalog

TOOLS = [
    Tool(f"tool_{i}", f"Handles task number {i}: {'send an email' if i == 7 else 'archive a file'} in its way.",
         {"type": "object", "properties": {"x": {"type": "string", "description": f"value é{i}"}}},
         namespace=("mail" if i % 3 == 0 else "files") if i % 2 else None, tags=(f"t{i}",))
    for i in range(200)
]


@pytest.mark.parametrize("backend", ["bm25", "regex", "vector", "hybrid"])
def test_a_loaded_index_equals_the_built_one_and_parses_on_demand(backend: str, tmp_path: Path) -> None:
    built = ToolIndex.build(TOOLS, backend=backend)
    built.save(tmp_path / "idx")
    assert {OFFSETS_FILE, TABLE_FILE} <= set(read_manifest(tmp_path / "idx").files)  # checked like every file
    loaded = ToolIndex.load(tmp_path / "idx")
    catalog = loaded.catalog
    assert isinstance(catalog, LazyCatalog)
    if backend != "regex":  # the backend needs no tool to open (names come from the table): none parsed until asked
        assert catalog.stored.parsed == 0
    assert len(catalog) == 200 and catalog.hash == built.catalog.hash and loaded.key == built.key
    assert catalog.names == built.catalog.names and catalog.namespaces == built.catalog.namespaces
    assert catalog.names_in(["mail"]) == built.catalog.names_in(["mail"])
    assert "tool_7" in catalog and "nope" not in catalog and catalog.get("nope") is None
    result = loaded.search("send an email", 3, namespaces=["files", "mail"] if backend == "regex" else None)
    assert result.names == built.search("send an email", 3,
                                        namespaces=["files", "mail"] if backend == "regex" else None).names
    assert [t.fingerprint for t in result.tools] == [built.catalog[n].fingerprint for n in result.names]
    assert catalog["tool_199"] == built.catalog["tool_199"] and catalog["tool_199"] is catalog["tool_199"]
    assert [t.fingerprint for t in catalog] == [t.fingerprint for t in built.catalog]


def test_sessions_and_updates_over_a_lazy_catalog(tmp_path: Path) -> None:
    ToolIndex.build(TOOLS, backend="bm25").save(tmp_path / "idx")
    loaded = ToolIndex.load(tmp_path / "idx")
    sessions = SessionManager(loaded)
    session = sessions.create("s1", allowed=["tool_7", "tool_8"])
    assert session.search("send an email", 2).names[0] == "tool_7"
    assert loaded.catalog.stored.parsed <= 2  # type: ignore[attr-defined]
    delta = loaded.catalog.diff(ToolIndex.build(TOOLS[:199], backend="regex").catalog)
    assert delta.removed == ("tool_199",) and not delta.added and not delta.changed
    loaded.upsert([Tool("tool_new", "Send a fax to a number.")])
    assert loaded.search("send a fax", 1).names == ["tool_new"] and len(loaded) == 201
    loaded.save(tmp_path / "again")
    assert ToolIndex.load(tmp_path / "again").catalog.names == [*loaded.catalog.names]


def test_a_damaged_table_is_caught_before_use(tmp_path: Path) -> None:
    ToolIndex.build(TOOLS, backend="bm25").save(tmp_path / "idx")
    table = tmp_path / "idx" / TABLE_FILE
    table.write_text(table.read_text().replace('"tool_7"', '"tool_x"'))
    with pytest.raises(IndexFormatError, match=rf"file {TABLE_FILE} does not match the manifest's checksum"):
        ToolIndex.load(tmp_path / "idx")
