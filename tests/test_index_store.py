"""IndexStore (toolsearch.index_store): named indexes under one root, built once and reused by content."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.core import weather

from toolsearch import (
    Catalog,
    IndexNotFoundError,
    IndexStore,
    InvalidIndexNameError,
    Tool,
    ToolIndex,
)
from toolsearch.store import MANIFEST


@pytest.mark.parametrize("name", ["../escape", "a/b", "a\\b", "", ".hidden", "..", "x" * 129, "a..b", "sp ace", 5])
def test_index_names_are_validated(tmp_path: Path, name: object) -> None:
    with pytest.raises(InvalidIndexNameError, match="invalid index name"):
        IndexStore(tmp_path).path(name)  # type: ignore[arg-type]

def test_index_store(tmp_path: Path) -> None:
    store = IndexStore(tmp_path / "root")
    assert store.names() == []
    tools = [weather(), Tool("now")]
    name, _, reused = store.build(tools, backend="regex")
    assert not reused and name.startswith("regex-") and store.names() == [name]
    name2, _, reused2 = store.build(Catalog(list(reversed(tools))), backend="regex")
    assert (name2, reused2) == (name, True)
    # other options shape another index
    name3, _, reused3 = store.build(tools, backend="regex", max_pattern_chars=20)
    assert not reused3 and name3 != name
    # a named index is rebuilt when its content changes
    store.build(tools, backend="regex", name="team")
    _, changed, reused4 = store.build([*tools, Tool("later")], backend="regex", name="team")
    assert not reused4 and len(store.open("team")) == 3
    assert store.manifest("team").tool_count == 3
    saved_name = store.save(changed)
    assert saved_name.startswith("regex-") and saved_name in store.names()
    assert store.save(changed, "copy") == "copy"
    (store.root / "not-an-index").mkdir()
    assert "not-an-index" not in store.names()
    assert store.remove("copy") is None  # it had no usage log
    assert "copy" not in store.names()
    with pytest.raises(IndexNotFoundError, match="no index named 'copy'"):
        store.remove("copy")
    # the library removes an index's usage log with it, as `toolsearch rm` does: it may keep request text, and an
    # index saved later under the name would read it as its own earlier catalogs'
    store.save(changed, "copy")
    log = store.root / "copy.usage.json"
    log.write_text("{}")
    assert store.remove("copy") == log and not log.exists()

def test_a_broken_stored_index_is_rebuilt_by_build(tmp_path: Path) -> None:
    store = IndexStore(tmp_path)
    name, _, _ = store.build([Tool("a")], backend="regex", name="x")
    (store.path(name) / MANIFEST).write_text("{")
    _, _, reused = store.build([Tool("a")], backend="regex", name="x")
    assert not reused and ToolIndex.load(store.path("x")).catalog.names == ["a"]

def test_default_root_honours_toolsearch_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLSEARCH_HOME", str(tmp_path))
    assert IndexStore().root == tmp_path / "indexes"
    monkeypatch.delenv("TOOLSEARCH_HOME")
    assert IndexStore().root == Path("indexes")
