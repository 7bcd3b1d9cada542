"""The vector backend with the real MiniLM model and real faiss: search, filters, HNSW, persistence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_embeddings import Counting, hashing_vectors

from toolsearch import BackendError, IndexFormatError, Tool, ToolIndex
from toolsearch.backends import vector as vector_module
from toolsearch.backends.vector import VectorBackend
from toolsearch.clauses import query_clauses
from toolsearch.embeddings import CallableEmbedder, NumpyEmbedder
from toolsearch.model_file import SHIPPED
from toolsearch.text import embedding_text

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def minilm() -> NumpyEmbedder:
    return NumpyEmbedder()


@pytest.fixture(scope="module")
def demo_index(demo_tools: list[Tool]) -> ToolIndex:
    return ToolIndex.build(demo_tools, backend="vector")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("reserve a conference space for my meeting", "calendar_book_room"),
        ("will it rain in Lisbon tomorrow", "weather_get_forecast"),
        ("give the customer their money back", "payments_refund_payment"),
        ("ask for vacation days", "hr_request_time_off"),
    ],
)
def test_paraphrases_find_the_tool(demo_index: ToolIndex, query: str, expected: str) -> None:
    assert expected in demo_index.search(query, 3).names


def test_scores_are_cosine_similarities_best_first(demo_index: ToolIndex) -> None:
    hits = demo_index.search("send an email", 10).hits
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(-1.0 <= s <= 1.0 + 1e-5 for s in scores)
    assert hits[0].name.startswith("email_")


def test_multi_part_request_finds_every_part(demo_index: ToolIndex) -> None:
    query = "Post a note in the team Slack channel. Also, open a GitHub issue about the login bug."
    assert query_clauses(query) == ["Post a note in the team Slack channel", "open a GitHub issue about the login bug"]
    top = demo_index.search(query, 5)
    assert top.names[0] == "slack_post_message"
    assert any(t.namespace == "github" for t in top.tools)  # one vector for both parts would miss it
    assert query_clauses("find the weather in Paris") == []
    assert vector_module.query_clauses is query_clauses  # still importable from its former home


def test_filters_restrict_results(demo_index: ToolIndex, demo_tools: list[Tool]) -> None:
    allowed = {t.name for t in demo_tools if not t.name.startswith("email_")}
    names = demo_index.search("send an email", 5, allowed=allowed).names
    assert names and not any(n.startswith("email_") for n in names)
    assert set(demo_index.search("forecast", 10, namespaces=["weather"]).names) <= {
        t.name for t in demo_tools if t.namespace == "weather"
    }
    assert demo_index.search("send an email", 5, allowed={"sms_send_text"}).names == ["sms_send_text"]


def test_faiss_selector_path_matches_exact_subset_path(
    demo_index: ToolIndex, demo_tools: list[Tool], monkeypatch: pytest.MonkeyPatch
) -> None:
    allowed = frozenset(t.name for t in demo_tools[::2] + demo_tools[1::4])  # > a quarter of the catalog
    exact = demo_index.backend.search("create a calendar invite", 8, allowed)
    monkeypatch.setattr(vector_module, "SUBSET_EXACT_MAX", 0)
    via_faiss = demo_index.backend.search("create a calendar invite", 8, allowed)
    assert [h.name for h in via_faiss.hits] == [h.name for h in exact.hits]
    np.testing.assert_allclose([h.score for h in via_faiss.hits], [h.score for h in exact.hits], atol=1e-5)


def test_hnsw_above_threshold_agrees_with_exact_search(demo_tools: list[Tool]) -> None:
    flat = ToolIndex.build(demo_tools, backend="vector")
    hnsw = ToolIndex.build(demo_tools, backend="vector", hnsw_threshold=50)
    assert flat.backend.kind == "flat" and hnsw.backend.kind == "hnsw"
    assert hnsw.backend.describe() == {"model": flat.backend.describe()["model"], "hnsw_threshold": 50}
    for query in ("refund a charge", "list open pull requests", "book a flight to Rome"):
        assert hnsw.search(query, 3).names == flat.search(query, 3).names
    allowed = {t.name for t in demo_tools if t.namespace in ("github", "slack")}
    assert set(hnsw.search("send a message", 5, allowed=allowed).names) <= allowed
    # HNSW cannot delete: removed tools are tombstoned, replaced ones re-added under a new id.
    hnsw.remove(["github_list_pull_requests"])
    assert "github_list_pull_requests" not in hnsw.search("list open pull requests", 10).names
    renamed = Tool("weather_get_forecast", "List open pull requests of a repository, newest first.")
    hnsw.upsert([renamed])
    assert hnsw.search("list open pull requests", 3).names[0] == "weather_get_forecast"
    assert len(hnsw.backend) == len(demo_tools) - 1


def test_hnsw_purges_tombstones_and_falls_back_to_flat(demo_tools: list[Tool]) -> None:
    index = ToolIndex.build(demo_tools[:80], backend="vector", hnsw_threshold=60)
    assert index.backend.kind == "hnsw"
    index.remove([t.name for t in demo_tools[:40]])  # past the tombstone share: rebuilt, now small
    assert index.backend.kind == "flat" and len(index.backend) == 40
    assert set(index.search("calendar event", 10).names).isdisjoint(t.name for t in demo_tools[:40])


def test_incremental_updates(demo_tools: list[Tool]) -> None:
    index = ToolIndex.build(demo_tools[:20], backend="vector")
    index.upsert([Tool("zz_translate", "Translate text between human languages, e.g. English to German.")])
    assert index.search("translate this sentence into German", 1).names == ["zz_translate"]
    index.remove(["zz_translate"])
    assert "zz_translate" not in index.search("translate this sentence into German", 20).names
    assert len(index.backend) == 20


def test_save_load_round_trip_never_re_embeds(
    tmp_path: Path, demo_tools: list[Tool], minilm: NumpyEmbedder
) -> None:
    counting = Counting(minilm.embed)
    embedder = CallableEmbedder(counting, minilm.model_id, 384)  # same id: the cache serves it
    built = ToolIndex.build(demo_tools, backend="vector", embedder=embedder)
    built.save(tmp_path / "ix")
    counting.seen.clear()
    loaded = ToolIndex.load(tmp_path / "ix", embedder=embedder)
    assert counting.seen == []  # loading embeds nothing
    for query in ("refund a charge", "who is on call this week"):
        assert loaded.search(query, 5).names == built.search(query, 5).names
    # A loaded index takes updates (read into memory, not mapped: test_vector_index_file_swap.py).
    loaded.upsert([Tool("zz_sing", "Sing a lullaby to a sleepy child.")])
    loaded.remove(["calendar_book_room"])
    assert loaded.search("sing a song for the baby", 1).names == ["zz_sing"]
    assert loaded.backend.describe() == {"model": minilm.model_id}


def test_warm_cache_build_does_not_call_the_model(demo_tools: list[Tool], minilm: NumpyEmbedder) -> None:
    ToolIndex.build(demo_tools, backend="vector")  # warms the session cache
    counting = Counting(minilm.embed)
    ToolIndex.build(demo_tools, backend="vector", embedder=CallableEmbedder(counting, minilm.model_id, 384))
    assert counting.seen == []


def test_loading_with_another_model_names_both(tmp_path: Path, demo_tools: list[Tool]) -> None:
    ToolIndex.build(demo_tools[:10], backend="vector").save(tmp_path / "ix")
    with pytest.raises(IndexFormatError, match=rf"{SHIPPED.model_id}@.*all-MiniLM-L6-v2"):
        ToolIndex.load(tmp_path / "ix", model="minilm")  # a model there is, but not this index's
    with pytest.raises(BackendError, match="unknown model 'other/model'"):
        ToolIndex.load(tmp_path / "ix", model="other/model")  # one there is not: said first, without the network
    hashing = CallableEmbedder(hashing_vectors, "hash-64", 64)
    with pytest.raises(IndexFormatError, match=rf"{SHIPPED.model_id}@.*hash-64"):
        ToolIndex.load(tmp_path / "ix", embedder=hashing)


def test_stale_or_corrupt_files_are_index_format_errors(tmp_path: Path, demo_tools: list[Tool]) -> None:
    backend = vector_module.create()
    backend.add(demo_tools[:5])
    folder = tmp_path / "v"
    folder.mkdir()
    backend.save(folder)
    with pytest.raises(IndexFormatError, match="does not match the tools"):
        vector_module.load(folder, demo_tools[:4])
    (folder / "vectors.faiss").write_bytes(b"garbage")
    with pytest.raises(IndexFormatError, match="cannot be read"):
        vector_module.load(folder, demo_tools[:5])
    (folder / "vector.json").write_text("{")
    with pytest.raises(IndexFormatError, match="corrupt"):
        vector_module.load(folder, demo_tools[:5])


def test_custom_embedder_any_dimension(demo_tools: list[Tool]) -> None:
    hashing = CallableEmbedder(hashing_vectors, "hash-64", 64)
    backend = VectorBackend(hashing, cache=False)
    backend.add(demo_tools)
    top = backend.search(embedding_text(demo_tools[7]), 1).hits[0]
    assert top.name == demo_tools[7].name and top.score == pytest.approx(1.0, abs=1e-5)
    assert backend.describe() == {"model": "hash-64"}


def test_empty_backend_and_unknown_options(tmp_path: Path) -> None:
    backend = vector_module.create(embedder=CallableEmbedder(hashing_vectors, "hash-64", 64))
    assert backend.search("anything", 5).hits == []
    backend.save(tmp_path)
    assert vector_module.load(tmp_path, [], embedder=backend.embedder).search("x", 3).hits == []
    with pytest.raises(Exception, match="unknown vector backend option"):
        vector_module.create(bogus=1)


def test_hnsw_index_round_trip_and_updates_after_load(tmp_path: Path, demo_tools: list[Tool]) -> None:
    built = ToolIndex.build(demo_tools, backend="vector", hnsw_threshold=50)
    built.remove(["files_upload"])  # a tombstone is never saved
    built.save(tmp_path / "ix")
    loaded = ToolIndex.load(tmp_path / "ix")
    assert loaded.backend.kind == "hnsw" and loaded.backend.describe()["hnsw_threshold"] == 50
    for query in ("refund a charge", "upload a file to shared storage"):
        assert loaded.search(query, 5).names == built.search(query, 5).names
    loaded.upsert([Tool("zz_sing", "Sing a lullaby to a sleepy child.")])
    loaded.remove(["files_download"])
    assert loaded.search("sing a song for the baby", 1).names == ["zz_sing"]
    assert "files_download" not in loaded.search("download a file", 10).names


def test_the_shipped_query_adapter_moves_queries_only(demo_tools: list[Tool]) -> None:
    """With the adapter on, the default model's queries are mapped by the shipped matrix; documents, other models
    and the default (off) are untouched."""
    from toolsearch.query_adapter import adapt, adapter_for

    matrix = adapter_for(NumpyEmbedder().model_id)
    assert matrix is not None and matrix.shape == (384, 384) and matrix.dtype == np.float32
    assert 0 < float(np.linalg.norm(matrix - np.eye(384))) < 10  # learned, and held near the identity
    assert adapter_for("hash-64") is None
    on = ToolIndex.build(demo_tools, backend="vector", model="minilm", query_adapter=True)
    off = ToolIndex.build(demo_tools, backend="vector", model="minilm")
    assert on.backend.adapter is not None and off.backend.adapter is None  # type: ignore[attr-defined]
    assert on.backend.describe()["query_adapter"] is True and "query_adapter" not in off.backend.describe()
    assert on.key != off.key  # an index searched another way is another index
    query = "will it rain in Lisbon tomorrow"
    raw = off.backend.query_vectors(query)  # type: ignore[attr-defined]
    np.testing.assert_allclose(on.backend.query_vectors(query), adapt(raw, matrix), atol=1e-6)  # type: ignore[attr-defined]
    np.testing.assert_allclose(np.linalg.norm(on.backend.query_vectors(query), axis=1), 1.0, atol=1e-5)  # type: ignore[attr-defined]
    assert "weather_get_forecast" in on.search(query, 3).names
    # The hybrid backend takes the option at the top level (one list of vector options).
    assert ToolIndex.build(demo_tools, "hybrid", model="minilm", query_adapter=True).backend.dense.adapter is not None  # type: ignore[attr-defined]
    with pytest.raises(Exception, match="query_adapter must be a square matrix"):
        ToolIndex.build(demo_tools, backend="vector", query_adapter=np.ones((3, 4)))
    with pytest.raises(Exception, match="query_adapter must be True, False or a square matrix"):
        ToolIndex.build(demo_tools, backend="vector", query_adapter="yes")


@pytest.mark.parametrize("backend", ["vector", "hybrid"])
def test_forget_queries_makes_the_next_search_embed_its_query_again(backend: str) -> None:
    counting = Counting(hashing_vectors)
    index = ToolIndex.build([Tool("send_email", "Send an email"), Tool("get_weather", "Weather for a city")],
                            backend=backend, embedder=CallableEmbedder(counting, "hash-64", 64), cache=False)
    index.search("email a friend", 1)
    index.search("email a friend", 1)
    assert counting.seen.count("email a friend") == 1  # the second search reused the first one's embedding
    index.backend.forget_queries()
    index.search("email a friend", 1)
    assert counting.seen.count("email a friend") == 2
