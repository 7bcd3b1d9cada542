"""The hybrid backend: bm25 and vector fused, with real tantivy, real faiss and the real model."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from toolsearch import BackendError, IndexFormatError, IndexStore, Tool, ToolIndex
from toolsearch.backends import default_backend
from toolsearch.backends import hybrid as hybrid_module
from toolsearch.backends.hybrid import fuse
from toolsearch.embeddings import CallableEmbedder
from toolsearch.model_file import SHIPPED

pytestmark = pytest.mark.slow

# A small catalog where the two rankers see different things: "frobnicate" is a word only bm25
# can match (the concept embedder below ignores it), and "tidy up my inbox" shares no word with
# mail_archive_old, which only the embedder connects.
CATALOG = [
    Tool("widget_frobnicate", "Frobnicate a widget.", namespace="widgets"),
    Tool("mail_archive_old", "Move stale messages out of view.", namespace="mail"),
    *(Tool(f"filler_{i}", f"Unrelated helper number {i} for tidy chores.", namespace="misc") for i in range(30)),
]
CONCEPTS = {"stale messages": 0, "tidy up my inbox": 0, "frobnicate": 1}


def concept_vectors(texts: list[str]) -> np.ndarray:
    """Tools about old mail and queries about inbox cleanup share a direction; the rest are noise."""
    rng = np.random.default_rng(0)
    out = rng.normal(0, 0.05, size=(len(texts), 16)).astype(np.float32)
    for row, text in enumerate(texts):
        lowered = text.lower()
        if "stale messages" in lowered or "tidy up my inbox" in lowered:
            out[row, 0] += 1.0
        elif "frobnicate" in lowered:
            out[row, 1] += 1.0
        else:
            out[row, 0] += 0.4  # fillers look vaguely like the query to the embedder
            out[row, 2 + row % 14] += 1.0
    return out


@pytest.fixture()
def concept_index() -> ToolIndex:
    embedder = CallableEmbedder(concept_vectors, "concepts-16", 16)
    return ToolIndex.build(CATALOG, backend="hybrid", embedder=embedder, cache=False)


def test_fusion_ranks_a_bm25_only_and_a_vector_only_tool(concept_index: ToolIndex) -> None:
    query = "frobnicate this and tidy up my inbox"
    hybrid = concept_index.backend
    assert isinstance(hybrid, hybrid_module.HybridBackend)
    lexical = [h.name for h in hybrid.lexical.search(query, 10).hits]
    dense = [h.name for h in hybrid.dense.search(query, 10).hits]
    assert lexical[0] == "widget_frobnicate" and "mail_archive_old" not in lexical
    assert dense[0] == "mail_archive_old" and "widget_frobnicate" not in dense
    assert set(concept_index.search(query, 2).names) == {"widget_frobnicate", "mail_archive_old"}


def test_fuse_scales_bm25_to_the_dense_top() -> None:
    fused = fuse({"a": 0.8, "b": 0.4, "c": 0.5}, {"b": 20.0, "c": 5.0}, 0.5)
    assert fused == pytest.approx({"a": 0.4, "b": 0.2 + 0.4, "c": 0.25 + 0.1})
    assert fuse({"a": 0.3}, {}, 0.65) == pytest.approx({"a": 0.3 * 0.65})
    assert fuse({}, {"a": 3.0}, 0.65) == {}


def test_filters_pass_through_to_both(concept_index: ToolIndex) -> None:
    allowed = {f"filler_{i}" for i in range(5)} | {"mail_archive_old"}
    names = concept_index.search("frobnicate this and tidy up my inbox", 10, allowed=allowed).names
    assert set(names) <= allowed and names[0] == "mail_archive_old"
    assert concept_index.search("frobnicate", 5, namespaces=["widgets"]).names == ["widget_frobnicate"]


def test_lucene_constraints_hold(concept_index: ToolIndex) -> None:
    names = concept_index.search("+filler tidy up my inbox", 10).names
    assert names and all(n.startswith("filler_") for n in names)
    names = concept_index.search("tidy up my inbox -stale", 10).names
    assert "mail_archive_old" not in names


def test_real_model_hybrid_on_the_demo_catalog(demo_tools: list[Tool]) -> None:
    index = ToolIndex.build(demo_tools, backend="hybrid")
    assert default_backend() == "hybrid"
    assert index.search("calendar_book_room", 1).names == ["calendar_book_room"]  # exact name
    assert "calendar_book_room" in index.search("reserve a conference space for my meeting", 3).names
    assert "payments_refund_payment" in index.search("give the customer their money back", 3).names
    described = index.backend.describe()
    assert described["model"].startswith(SHIPPED.model_id + "@") and "bm25" in described
    assert described["dense_weight"] == 0.7  # the tools model's own, from its card
    stock = ToolIndex.build(demo_tools, backend="hybrid", model="minilm").backend.describe()
    assert stock["model"] == "sentence-transformers/all-MiniLM-L6-v2" and "dense_weight" not in stock


def test_save_load_round_trip_and_model_check(tmp_path: Path, demo_tools: list[Tool]) -> None:
    store = IndexStore(tmp_path)
    name, built, reused = store.build(demo_tools, backend="hybrid")
    assert not reused
    folder = store.path(name) / "backend"
    assert (folder / "bm25").is_dir() and (folder / "vector" / "vectors.faiss").is_file()
    again_name, loaded, reused = store.build(demo_tools, backend="hybrid")
    assert reused and again_name == name
    for query in ("book a flight to Rome", "post in the team channel. Also, refund the last charge"):
        assert loaded.search(query, 5).names == built.search(query, 5).names
    loaded.upsert([Tool("zz_sing", "Sing a lullaby to a sleepy child.")])
    assert loaded.search("sing a song for the baby", 1).names == ["zz_sing"]
    with pytest.raises(IndexFormatError, match=rf"{SHIPPED.model_id}@.*concepts-16"):
        store.open(name, embedder=CallableEmbedder(concept_vectors, "concepts-16", 16))


def test_unknown_options_and_bad_weights() -> None:
    with pytest.raises(Exception, match="unknown hybrid backend option"):
        hybrid_module.create(bogus=1)
    with pytest.raises(Exception, match="dense_weight"):
        hybrid_module.create(dense_weight=1.5)
    backend = hybrid_module.create(dense_weight=0.5, pool=20, hnsw_threshold=100)
    assert backend.describe()["dense_weight"] == 0.5
    assert backend.describe()["vector"] == {"hnsw_threshold": 100}
    rebuilt = hybrid_module.create(**backend.describe())
    assert rebuilt.describe() == backend.describe()


@pytest.mark.parametrize("option", ["hnsw_threshold", "ef_search", "ivf_threshold", "nprobe"])
def test_every_vector_option_is_taken_at_the_top_level_as_in_vector(option: str) -> None:
    """One list of vector options: hybrid takes each at the top level, the same as inside vector={...}."""
    import inspect

    from toolsearch.backends import vector as vector_module

    parameters = inspect.signature(vector_module.VectorBackend.__init__).parameters.items()
    keywords = [p for p, v in parameters if v.kind is v.KEYWORD_ONLY]
    assert set(keywords) <= set(vector_module.OPTIONS)
    value = {"ef_search": 64}.get(option, 8)
    embedder = CallableEmbedder(concept_vectors, "concepts-16", 16)
    top = ToolIndex.build(CATALOG, "hybrid", embedder=embedder, **{option: value})
    nested = ToolIndex.build(CATALOG, "hybrid", embedder=embedder, vector={option: value})
    assert getattr(top.backend.dense, option) == getattr(nested.backend.dense, option) == value  # type: ignore[attr-defined]
    assert top.key == nested.key
    assert top.search("tidy up my inbox", 3).names == nested.search("tidy up my inbox", 3).names


def test_clause_lexical_lets_one_need_of_a_multi_part_request_reach_the_top() -> None:
    """bm25 per clause: in the whole query's list the first need's rare words outscore the second's common ones."""
    catalog = [
        *(Tool(f"sprocket_tool_{i}", f"Frobnicate a widget gizmo sprocket, variant {i}.") for i in range(5)),
        Tool("brass_polisher", "Polish brass fittings."),
        *(Tool(f"filler_{i}", f"Unrelated helper {i} for {'brass' if i % 2 else 'polish'} chores.") for i in range(20)),
    ]
    # Every text gets the same vector: the dense half ties, so the order is bm25's alone.
    flat = CallableEmbedder(lambda texts: np.ones((len(texts), 8), np.float32), "flat-8", 8)
    query = "Frobnicate the widget gizmo sprocket with care. Then polish the brass."
    whole = ToolIndex.build(catalog, backend="hybrid", embedder=flat, cache=False)
    assert whole.search(query, 5).names == [f"sprocket_tool_{i}" for i in range(5)]
    per_clause = ToolIndex.build(catalog, backend="hybrid", embedder=flat, cache=False, clause_lexical=1.0)
    assert per_clause.search(query, 5).names[0] == "brass_polisher"
    assert per_clause.backend.describe()["clause_lexical"] == 1.0
    assert "clause_lexical" not in whole.backend.describe()  # the default is not recorded
    # A single request is searched as before, whatever the setting.
    assert per_clause.search("polish the brass", 3).names == whole.search("polish the brass", 3).names
    with pytest.raises(Exception, match="clause_lexical must be a number between 0 and 1"):
        hybrid_module.create(clause_lexical=2)


def test_a_change_that_bm25_cannot_write_changes_neither_half() -> None:
    # Before: the vectors went in first, so a tool bm25 refused was still found by the dense half.
    tools = [Tool("send_email", "Send an email message to a recipient."), Tool("get_weather", "Weather for a city.")]
    index = ToolIndex.build(tools, backend="hybrid")
    folder = index.backend.lexical._folder  # type: ignore[attr-defined]
    assert folder.name.startswith("bm25-")  # the index's own private folder: nothing else is removed
    shutil.rmtree(folder)  # as a cleaner of the temporary folder that ignores the lock would
    with pytest.raises(BackendError, match="was removed while in use"):
        index.upsert([Tool("book_flight", "Book a flight to another city.")])
    dense = index.backend.dense  # type: ignore[attr-defined]
    assert sorted(h.name for h in dense.search("book a flight", 5).hits) == ["get_weather", "send_email"]
    assert "book_flight" not in index.search("book a flight", 5).names
