"""Catalog (toolsearch.catalog): order, lookup, namespaces, content hash, duplicates, deltas."""

from __future__ import annotations

import re

import pytest
from fakes.core import weather

from toolsearch import (
    Catalog,
    DuplicateToolError,
    Tool,
)


def test_catalog_order_lookup_and_namespaces() -> None:
    tools = [weather(), Tool("send_mail", namespace="mail"), Tool("now"), Tool("get_alerts", namespace="weather")]
    catalog = Catalog(tools)
    assert catalog.names == ["get_weather", "send_mail", "now", "get_alerts"] and len(catalog) == 4
    assert "now" in catalog and "later" not in catalog and catalog["now"] == tools[2]
    assert catalog.get("later") is None and list(catalog) == tools
    assert catalog.namespaces == ["weather", "mail"]
    assert catalog.names_in(["weather"]) == {"get_weather", "get_alerts"}
    assert "4 tools" in repr(catalog)

def test_catalog_hash_is_content_addressed_and_order_free() -> None:
    a, b = weather(), Tool("now")
    assert Catalog([a, b]).hash == Catalog([b, a]).hash
    assert Catalog([a, b]).hash != Catalog([a, Tool("now", "changed")]).hash
    assert Catalog([a]).hash != Catalog([a, b]).hash
    assert re.fullmatch(r"[0-9a-f]{64}", Catalog([]).hash)

def test_catalog_duplicates_are_listed() -> None:
    tools = [Tool("a"), Tool("b"), Tool("a", "again"), Tool("b"), Tool("c")]
    with pytest.raises(DuplicateToolError, match=r"2 tool name\(s\) defined more than once: 'a', 'b'") as err:
        Catalog(tools)
    assert err.value.names == ["a", "b"]
    many = [Tool(f"t{i}") for i in range(12)] * 2
    with pytest.raises(DuplicateToolError, match="and 2 more"):
        Catalog(many)

def test_catalog_diff_and_updated() -> None:
    old = Catalog([Tool("keep"), Tool("change", "v1"), Tool("drop")])
    new = Catalog([Tool("keep"), Tool("change", "v2"), Tool("add")])
    delta = old.diff(new)
    assert (delta.added, delta.removed, delta.changed) == (("add",), ("drop",), ("change",))
    assert delta and not old.diff(old)
    updated = old.updated(upsert=[Tool("change", "v2"), Tool("add")], remove=["drop"])
    assert updated.hash == new.hash and old.names == ["keep", "change", "drop"]
    with pytest.raises(DuplicateToolError):
        old.updated(upsert=[Tool("x"), Tool("x", "again")])
