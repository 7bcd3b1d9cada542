"""ToolIndex (toolsearch.index): checked queries and k, filters, a third-party backend, updates and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.core import ListBackend, weather

from toolsearch import (
    Catalog,
    DuplicateToolError,
    IndexStore,
    InvalidIndexNameError,
    InvalidQueryError,
    Ranking,
    Tool,
    ToolIndex,
)
from toolsearch.index import MAX_K, MAX_QUERY_CHARS, validate_k, validate_query


def test_validate_query_and_k() -> None:
    assert validate_query("  send mail \n") == "send mail"
    assert validate_query("x" * MAX_QUERY_CHARS) == "x" * MAX_QUERY_CHARS
    for bad, message in [
        ("", "empty"),
        ("  ", "empty"),
        ("x" * (MAX_QUERY_CHARS + 1), "limit is"),
        (None, "must be a string, got NoneType"),
        (b"x", "must be a string, got bytes"),
    ]:
        with pytest.raises(InvalidQueryError, match=message):
            validate_query(bad)
    assert validate_k(1) == 1 and validate_k(MAX_K) == MAX_K
    for bad_k in (0, -3, MAX_K + 1, 1.0, "3", True, None):
        with pytest.raises(InvalidQueryError, match="k \\(max results\\)"):
            validate_k(bad_k)

def test_index_with_a_third_party_backend() -> None:
    tools = [weather(), Tool("get_alerts", namespace="weather"), Tool("send_mail", namespace="mail")]
    index = ToolIndex(Catalog(tools), ListBackend())
    index.backend.add(tools)
    assert index.search("get", 5).names == ["get_weather", "get_alerts"]
    assert index.search("get", 1).names == ["get_weather"]
    assert index.search("_", 5, namespaces="mail").names == ["send_mail"]  # a single string is one namespace
    assert index.search("_", 5, namespaces=["weather"], allowed=["get_alerts", "send_mail"]).names == ["get_alerts"]
    result = index.search("_", 5, namespaces=["mail"], allowed=["get_alerts"])
    assert result.names == [] and result.notes == ("no tools are visible under the given filter",)
    with pytest.raises(InvalidQueryError, match="known namespaces: mail, weather"):
        index.search("x", 5, namespaces=["nope"])
    bare = ToolIndex(Catalog([Tool("a")]), ListBackend())
    with pytest.raises(InvalidQueryError, match="this catalog has no namespaces"):
        bare.search("a", 5, namespaces=["x"])

def test_index_updates_and_key() -> None:
    index = ToolIndex.build([weather(), Tool("now")], backend="regex")
    key = index.key
    index.upsert([Tool("later")])
    assert len(index) == 3 and index.key != key
    index.remove(["later", "not-there"])
    assert index.key == key and len(index) == 2
    index.sync([weather(), Tool("now", "changed")])
    assert index.catalog["now"].description == "changed"
    assert "regex" in repr(index) and index.backend_name == "regex"
    with pytest.raises(DuplicateToolError):
        index.upsert([Tool("x"), Tool("x")])
    assert "x" not in index.catalog

def test_cheap_checks_come_before_the_backend() -> None:
    # A backend that fails if asked anything: argument checks must answer without it (for the
    # vector and hybrid backends, without loading the model).
    from toolsearch import SessionManager, ToolSearchMetaTool

    class Untouchable(ListBackend):
        def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
            raise AssertionError("the backend was asked before the arguments were checked")

    backend = Untouchable()
    backend.add([weather()])
    index = ToolIndex(Catalog([weather()]), backend)
    for query, k in [("x" * (MAX_QUERY_CHARS + 1), 5), ("  ", 5), ("ok", 0), ("ok", MAX_K + 1), ("ok", "5")]:
        with pytest.raises(InvalidQueryError):
            index.search(query, k)  # type: ignore[arg-type]
    session = SessionManager(index).create("s1")
    meta = ToolSearchMetaTool()
    for arguments in [{"query": "x" * (MAX_QUERY_CHARS + 1)}, {"query": ""}, {"query": "ok", "max_results": 0},
                      {"query": "ok", "max_results": "many"}, {"max_results": 3}, "not json", [1, 2]]:
        outcome = meta.run(session, arguments)  # type: ignore[arg-type]
        assert not outcome.ok and "tool_search" in outcome.text
    with pytest.raises(InvalidIndexNameError):
        IndexStore(Path("unused")).build([Tool("bad name is fine")], "list-never-created", name="../x")
