"""bm25 after edits ranks as a fresh build of the same tools: removed and replaced documents leave tantivy's BM25
statistics before the next search or save, and ties are broken by name. Real tantivy (and the real model for hybrid)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from toolsearch import Tool, ToolIndex

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
