"""bm25 after edits ranks as a fresh build of the same tools where it promises to: removed and replaced documents
leave tantivy's BM25 statistics before the next save, and before the next search of a small index (REINDEX_SMALL
tools) or once they reach REINDEX_SHARE of a larger one; ties are broken by name. Real tantivy (and the real model
for hybrid)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from toolsearch import Tool, ToolIndex
from toolsearch.backends.bm25 import REINDEX_SHARE, REINDEX_SMALL

A = Tool("lookup_forecast", "Forecast")
B = Tool("city_weather", "Weather report for the city center today")
EXTRAS = [Tool(f"extra_{i}", f"Weather station number {i} raw data") for i in range(30)]
QUERY = "forecast weather report"


def _ranked(index: ToolIndex, query: str = QUERY, k: int = 2) -> list[tuple[str, float]]:
    return [(hit.name, hit.score) for hit in index.search(query, k=k).hits]


@pytest.mark.parametrize("backend", ["bm25", pytest.param("hybrid", marks=pytest.mark.slow)])
def test_an_index_after_remove_and_after_reload_ranks_as_a_fresh_build(backend: str, tmp_path: Path) -> None:
    live = ToolIndex.build([A, B, *EXTRAS], backend)
    live.remove([t.name for t in EXTRAS])
    fresh = ToolIndex.build([A, B], backend)
    live.save(tmp_path / "i")
    reloaded = ToolIndex.load(tmp_path / "i")
    assert live.key == fresh.key
    expected = _ranked(fresh)
    assert [name for name, _ in expected] == ["city_weather", "lookup_forecast"]
    for index in (live, reloaded):
        ranked = _ranked(index)
        assert [name for name, _ in ranked] == [name for name, _ in expected]
        assert [score for _, score in ranked] == pytest.approx([score for _, score in expected], rel=1e-6)


def test_a_saved_index_after_remove_is_saved_as_a_fresh_build(tmp_path: Path) -> None:
    live = ToolIndex.build([A, B, *EXTRAS], "bm25")
    live.remove([t.name for t in EXTRAS])
    live.save(tmp_path / "i")  # no search in between: the save itself leaves the deleted documents out
    assert _ranked(ToolIndex.load(tmp_path / "i")) == _ranked(ToolIndex.build([A, B], "bm25"))


def test_upsert_keeps_scores_and_ties_are_broken_by_name() -> None:
    tools = [Tool(n, "Weather forecast for a city") for n in ["delta_tool", "alpha_tool", "bravo_tool"]]
    index = ToolIndex.build(tools, "bm25")
    before = _ranked(index, "weather forecast", k=3)
    assert [n for n, _ in before] == ["alpha_tool", "bravo_tool", "delta_tool"]  # by name, not by position
    changed = dataclasses.replace(tools[1], metadata={"v": 2})
    index.upsert([changed])
    fresh = ToolIndex.build([tools[0], changed, tools[2]], "bm25")
    assert _ranked(index, "weather forecast", k=3) == before == _ranked(fresh, "weather forecast", k=3)


def test_edits_after_a_reindex_and_on_a_loaded_index_stay_exact(tmp_path: Path) -> None:
    index = ToolIndex.build([A, B, *EXTRAS], "bm25")
    index.remove(["extra_0"])
    index.search("weather", k=3)  # re-indexes
    index.remove([t.name for t in EXTRAS[1:]])
    index.upsert([Tool("extra_new", "Weather station raw data")])
    index.save(tmp_path / "i")
    loaded = ToolIndex.load(tmp_path / "i")
    loaded.remove(["extra_new"])
    fresh = ToolIndex.build([A, B], "bm25")
    assert _ranked(loaded) == _ranked(fresh)
    assert _ranked(index, k=3) == _ranked(ToolIndex.build([A, B, Tool("extra_new", "Weather station raw data")],
                                                          "bm25"), k=3)


def _catalog(n: int) -> list[Tool]:
    words = ["weather", "forecast", "report", "city", "station", "email", "send", "file", "upload", "calendar", "event"]
    return [
        Tool(f"tool_{i}", " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(3 + i % 5))) for i in range(n)
    ]


def test_a_small_edit_to_a_large_index_is_searched_stale_and_saved_exact(tmp_path: Path) -> None:
    tools = _catalog(REINDEX_SMALL + 500)
    index = ToolIndex.build(tools, "bm25")
    backend = index.backend
    assert backend.stale_documents == 0
    changed = Tool(tools[5].name, "Forecast weather report for the city")
    index.upsert([changed])
    index.remove([tools[7].name, "no_such_tool"])  # a name it never held counts nothing
    assert backend.stale_documents == 2
    ranked = _ranked(index, k=10)  # below the share: served with the stale statistics, no re-index under the lock
    assert backend.stale_documents == 2 and changed.name in [name for name, _ in ranked]
    rest = [changed if t.name == changed.name else t for t in tools if t.name != tools[7].name]
    index.save(tmp_path / "i")  # a save re-indexes: what it stores ranks exactly as a fresh build
    assert backend.stale_documents == 0
    expected = _ranked(ToolIndex.build(rest, "bm25"), k=10)
    assert _ranked(ToolIndex.load(tmp_path / "i"), k=10) == expected == _ranked(index, k=10)


def test_a_large_index_re_indexes_on_search_once_the_share_is_reached() -> None:
    tools = _catalog(REINDEX_SMALL + 500)
    index = ToolIndex.build(tools, "bm25")
    backend = index.backend
    most = next(g for g in range(len(tools), 0, -1) if g < REINDEX_SHARE * (len(tools) - g))
    gone = {t.name for t in tools[:most]}  # the most removals still below the share of the live tools left
    index.remove(gone)
    index.search(QUERY, k=3)
    assert backend.stale_documents == len(gone)  # not yet REINDEX_SHARE of what is left
    index.upsert([tools[-1], tools[-2]])  # two documents replaced
    assert backend.stale_documents == len(gone) + 2 >= REINDEX_SHARE * len(backend)
    ranked = _ranked(index, k=10)
    assert backend.stale_documents == 0
    assert ranked == _ranked(ToolIndex.build([t for t in tools if t.name not in gone], "bm25"), k=10)


def test_a_small_index_re_indexes_on_the_next_search() -> None:
    index = ToolIndex.build([A, B, *EXTRAS], "bm25")
    index.remove(["extra_3"])
    assert index.backend.stale_documents == 1
    index.search("weather", k=1)
    assert index.backend.stale_documents == 0


def test_a_name_twice_in_one_batch_counts_one_replaced_document() -> None:
    from toolsearch.backends import bm25

    backend = bm25.create()
    backend.add([A, Tool(A.name, "Forecast again"), B])
    assert backend.stale_documents == 1 and len(backend) == 2
    backend.search("forecast", 2)  # small: re-indexed
    assert backend.stale_documents == 0
