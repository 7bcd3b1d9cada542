"""The stored index format (toolsearch.store): the manifest, every file checked on load, atomic saves."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from fakes.core import ListBackend, weather

from toolsearch import (
    Catalog,
    IndexFormatError,
    IndexNotFoundError,
    StoredIndexError,
    Tool,
    ToolIndex,
)
from toolsearch.store import FORMAT_VERSION, MANIFEST, index_key, manifest_digest, read_manifest


@pytest.fixture()
def saved(tmp_path: Path) -> Path:
    index = ToolIndex.build([weather(), Tool("now", namespace="time")], backend="regex")
    return index.save(tmp_path / "idx")

def test_manifest_records_what_built_the_index(saved: Path) -> None:
    manifest = read_manifest(saved)
    assert manifest.version == FORMAT_VERSION and manifest.backend == "regex"
    assert manifest.tool_count == 2 and manifest.namespaces == ["weather", "time"]
    assert manifest.options == {"max_pattern_chars": 200, "timeout_seconds": 1.0}
    assert manifest.model is None and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", manifest.created_at)
    assert "tools.jsonl" in manifest.files and "backend/regex.json" in manifest.files
    assert ToolIndex.load(saved).key == manifest.key

def _edit_manifest(folder: Path, **changes: Any) -> None:
    path = folder / MANIFEST
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    if "catalog_hash" in data and "backend" in data and "options" in data:  # signed anew, as a forger would
        data["key"] = index_key(data["catalog_hash"], data["backend"], data["options"])
    data["digest"] = manifest_digest(data)
    path.write_text(json.dumps(data))

@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"version": FORMAT_VERSION + 1}, "built by a newer toolsearch"),
        ({"version": 0}, "old index format 0"),
        ({"version": "1"}, "no format version"),
        ({"format": "something-else"}, "not a toolsearch manifest"),
        ({"catalog_hash": None}, "lacks the field 'catalog_hash'"),
        ({"catalog_hash": "0" * 64}, "do not match the manifest's hash"),
        ({"backend": "bm25"}, "bm25 index unusable"),
    ],
)
def test_manifest_problems_are_named(saved: Path, changes: dict[str, Any], message: str) -> None:
    _edit_manifest(saved, **changes)
    with pytest.raises(IndexFormatError, match=re.escape(message)):
        ToolIndex.load(saved)

def test_corrupt_missing_and_altered_files(saved: Path) -> None:
    (saved / MANIFEST).write_text("{not json")
    with pytest.raises(IndexFormatError, match="is corrupt"):
        ToolIndex.load(saved)
    (saved / MANIFEST).unlink()
    with pytest.raises(IndexFormatError, match=r"no manifest\.json"):
        ToolIndex.load(saved)
    with pytest.raises(IndexNotFoundError, match="no index at"):
        ToolIndex.load(saved.parent / "nothing-here")

def test_missing_truncated_or_corrupt_data_files(saved: Path, tmp_path: Path) -> None:
    tools_file = saved / "tools.jsonl"
    original = tools_file.read_text()
    tools_file.write_text(original[:-5])
    with pytest.raises(IndexFormatError, match=r"tools\.jsonl is truncated or altered"):
        ToolIndex.load(saved)
    tools_file.write_text(original.replace('"name": "now"', '"name": "   "'))  # same size, invalid
    with pytest.raises(IndexFormatError, match="checksum"):
        ToolIndex.load(saved)
    tools_file.write_text(original.replace('"now"', '"wow"'))  # same size, valid, other content
    with pytest.raises(IndexFormatError, match="checksum"):
        ToolIndex.load(saved)
    tools_file.unlink()
    with pytest.raises(IndexFormatError, match=r"tools\.jsonl is missing"):
        ToolIndex.load(saved)

def test_interrupted_save_leaves_the_old_index_intact(tmp_path: Path) -> None:
    tools = [weather(), Tool("now")]
    target = tmp_path / "idx"
    ToolIndex.build(tools, backend="regex").save(target)
    before = read_manifest(target)
    broken = ToolIndex(Catalog([*tools, Tool("later")]), ListBackend(fail_save=True))
    with pytest.raises(KeyboardInterrupt):
        broken.save(target)
    assert read_manifest(target) == before
    assert ToolIndex.load(target).catalog.names == ["get_weather", "now"]
    assert _layout(tmp_path) == ["idx", ".idx.gen"]  # no scratch folder, no lock file left behind

def test_saving_over_an_index_replaces_it(tmp_path: Path) -> None:
    target = tmp_path / "idx"
    ToolIndex.build([Tool("a")], backend="regex").save(target)
    ToolIndex.build([Tool("b")], backend="bm25").save(target)
    loaded = ToolIndex.load(target)
    assert loaded.backend_name == "bm25" and loaded.catalog.names == ["b"]
    assert _layout(tmp_path) == ["idx", ".idx.gen"]  # the old generation is gone

def _layout(folder: Path) -> list[str]:
    """A folder's entries, generation ids left out: the pointer, one generation, the writers' lock."""
    return sorted((n.split("-")[0] for n in os.listdir(folder)), key=lambda n: (n.startswith("."), n))

def test_saving_over_a_folder_that_is_not_an_index_is_refused(tmp_path: Path) -> None:
    precious = tmp_path / "important"
    precious.mkdir()
    (precious / "file.txt").write_text("precious")
    index = ToolIndex.build([Tool("a_tool", "does a thing")], backend="bm25")
    with pytest.raises(StoredIndexError, match="not a toolsearch index"):
        index.save(precious)
    assert (precious / "file.txt").read_text() == "precious"
    index.save(tmp_path / "empty-is-fine")
    index.save(tmp_path / "empty-is-fine")  # and an index may be replaced by a newer one
