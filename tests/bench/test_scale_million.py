"""The million-tool benchmark's parts at small sizes: the catalog generator, derived vectors, and the
vector backend's IVF index fed with vectors given directly (real faiss, no embedding model)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.lib import Dataset, write_report
from benchmarks.lib.million import run as run_million
from benchmarks.lib.synth import derived_vectors, plan_catalog, random_base_vectors
from benchmarks.scale import _spawn
from toolsearch import ToolIndex
from toolsearch._errors import BackendError
from toolsearch.backends import vector as vector_module
from toolsearch.catalog import Catalog
from toolsearch.tools import Tool

DEMO_QUERIES = Path(__file__).resolve().parents[1] / "data" / "demo_queries.jsonl"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_tools: list[Tool]) -> list[Dataset]:
    """The bundled catalog as a data set (197 real tools: 5,000 needs 4,803 variants) with its labelled requests."""
    folder = tmp_path_factory.mktemp("sets") / "demo"
    folder.mkdir()
    (folder / "tools.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in demo_tools), encoding="utf-8")
    (folder / "queries.jsonl").write_bytes(DEMO_QUERIES.read_bytes())
    return [Dataset(folder)]


@pytest.fixture(scope="module")
def plan5k(demo: list[Dataset]):  # type: ignore[no-untyped-def]
    return plan_catalog(demo, 5_000, seed=3)


def test_generator_gives_5000_distinct_valid_tools(plan5k) -> None:  # type: ignore[no-untyped-def]
    tools = list(plan5k.tools())
    assert len(tools) == 5_000 and len({t.name for t in tools}) == 5_000
    assert plan5k.info() == {
        "size": 5_000, "real_tools": 197, "variants": 4_803, "max_variants_per_real_tool": 25,
        "pool": {"demo": 197},
    }
    catalog = Catalog(tools)  # rejects duplicate names
    assert len(catalog) == 5_000
    bases = {t.name: t for t in plan5k.bases}
    for tool in tools:
        # The lean tools carry the fingerprint full validation computes (the catalog hash depends on it).
        checked = Tool(name=tool.name, description=tool.description, input_schema=tool.input_schema,
                       namespace=tool.namespace)
        assert checked.fingerprint == tool.fingerprint, tool.name
        base = bases[tool.name.rsplit("_v", 1)[0]] if tool.name not in bases else bases[tool.name]
        assert tool.description.startswith(base.description)
        assert tool.input_schema == base.input_schema and tool.namespace == "demo"
    variants = [t for t in tools if t.name not in bases]
    assert all(len(t.description) > len(bases[t.name.rsplit("_v", 1)[0]].description) for t in variants)


def test_generator_is_seeded(demo: list[Dataset], plan5k) -> None:  # type: ignore[no-untyped-def]
    again = plan_catalog(demo, 5_000, seed=3)
    other = plan_catalog(demo, 5_000, seed=4)
    assert again.names() == plan5k.names()
    assert Catalog(again.tools()).hash == Catalog(plan5k.tools()).hash
    assert other.names() != plan5k.names() and set(other.names()) == set(plan5k.names())
    small = plan_catalog(demo, 50, seed=3)  # below the real tools: a sample of them, no variants
    assert small.info()["variants"] == 0 and len(set(small.names())) == 50


def test_derived_vectors_are_unit_chunk_stable_and_near_their_real_tool(plan5k) -> None:  # type: ignore[no-untyped-def]
    bases = random_base_vectors(len(plan5k.bases), seed=1)
    whole = derived_vectors(plan5k, bases)
    assert whole.shape == (5_000, 384) and whole.dtype == np.float32
    assert np.allclose(np.linalg.norm(whole, axis=1), 1.0, atol=1e-5)
    pieces = np.concatenate([derived_vectors(plan5k, bases, 0, 1_234), derived_vectors(plan5k, bases, 1_234, 5_000)])
    assert np.array_equal(pieces, whole)
    real = plan5k.round_of == 0
    assert np.allclose(whole[real], bases[plan5k.base_of[real]], atol=1e-6)
    cos = np.einsum("ij,ij->i", whole[~real], bases[plan5k.base_of[~real]])
    assert cos.min() > 0.85  # a variant stays closest to the tool it varies
    assert np.argmax(whole[~real][:50] @ bases.T, axis=1).tolist() == plan5k.base_of[~real][:50].tolist()


def _vectors(plan, seed: int = 1) -> tuple[list[str], np.ndarray]:  # type: ignore[no-untyped-def]
    return plan.names(), derived_vectors(plan, random_base_vectors(len(plan.bases), seed=seed))


def test_vectors_given_directly_build_an_ivf_index_above_its_threshold(plan5k) -> None:  # type: ignore[no-untyped-def]
    names, vectors = _vectors(plan5k)
    ivf = vector_module.create(ivf_threshold=2_000)
    ivf.add_vectors(names, vectors)
    exact = vector_module.create()
    exact.add_vectors(names, vectors)
    assert ivf.kind == "ivf" and exact.kind == "flat" and len(ivf) == 5_000
    assert ivf.describe()["ivf_threshold"] == 2_000 and "ivf_threshold" not in exact.describe()
    rng = np.random.default_rng(0)
    queries = vectors[rng.choice(5_000, 60, replace=False)] + 0.02 * rng.standard_normal((60, 384), dtype=np.float32)
    recall = []
    for q in queries:
        got = [h.name for h in ivf.search_vectors(q, 10).hits]
        want = [h.name for h in exact.search_vectors(q, 10).hits]
        assert len(got) == 10
        recall.append(len(set(got) & set(want)) / 10)
    assert np.mean(recall) >= 0.9
    first = [h.name for h in ivf.search_vectors(vectors[7], 3).hits]
    assert first[0] == names[7]
    allowed = frozenset(names[:300])
    assert {h.name for h in ivf.search_vectors(vectors[7], 10, allowed=allowed).hits} <= allowed


def test_ivf_index_updates_and_round_trips(tmp_path: Path, plan5k) -> None:  # type: ignore[no-untyped-def]
    names, vectors = _vectors(plan5k)
    backend = vector_module.create(ivf_threshold=2_000)
    backend.add_vectors(names, vectors)
    backend.remove([names[7]])
    assert names[7] not in [h.name for h in backend.search_vectors(vectors[7], 10).hits]
    backend.add_vectors([names[7]], vectors[8:9])  # replaced by name, with another tool's vector
    assert {h.name for h in backend.search_vectors(vectors[8], 2).hits} == {names[7], names[8]}
    index = ToolIndex(Catalog(plan5k.tools()), backend)
    index.save(tmp_path / "ivf")
    manifest = json.loads((tmp_path / "ivf" / "manifest.json").read_text())
    assert manifest["options"]["ivf_threshold"] == 2_000
    loaded = ToolIndex.load(tmp_path / "ivf").backend
    assert isinstance(loaded, vector_module.VectorBackend)
    assert loaded.kind == "ivf" and len(loaded) == 5_000
    for row in (3, 99, 4_000):
        assert loaded.search_vectors(vectors[row], 5) == backend.search_vectors(vectors[row], 5)
    loaded.add_vectors(["extra_tool"], vectors[:1])  # a loaded index takes updates
    assert len(loaded) == 5_001


def test_growing_past_the_threshold_switches_to_ivf(plan5k) -> None:  # type: ignore[no-untyped-def]
    names, vectors = _vectors(plan5k)
    backend = vector_module.create(hnsw_threshold=1_000, ivf_threshold=3_000)
    backend.add_vectors(names[:500], vectors[:500])
    assert backend.kind == "flat"
    backend.add_vectors(names[500:2_000], vectors[500:2_000])
    assert backend.kind == "hnsw"
    backend.add_vectors(names[2_000:], vectors[2_000:])
    assert backend.kind == "ivf" and len(backend) == 5_000
    assert backend.search_vectors(vectors[4_321], 1).hits[0].name == names[4_321]


def test_add_vectors_and_search_vectors_reject_bad_input(plan5k) -> None:  # type: ignore[no-untyped-def]
    names, vectors = _vectors(plan5k)
    backend = vector_module.create()
    with pytest.raises(BackendError, match="more than once"):
        backend.add_vectors(["a", "a"], vectors[:2])
    with pytest.raises(BackendError, match="one row per name"):
        backend.add_vectors(["a", "b", "c"], vectors[:2])
    backend.add_vectors(names[:10], vectors[:10])
    with pytest.raises(BackendError, match="384-d"):
        backend.add_vectors(["z"], np.ones((1, 8), np.float32))
    with pytest.raises(BackendError, match="8-d query"):
        backend.search_vectors(np.ones(8, np.float32), 3)
    with pytest.raises(BackendError, match="ivf_threshold must be a positive integer"):
        vector_module.create(ivf_threshold=0)


def test_million_benchmark_runs_end_to_end_at_a_small_size(tmp_path: Path, demo: list[Dataset]) -> None:
    from benchmarks.lib.million import render_markdown

    report = run_million(
        demo, sizes=[3_000], n_queries=20, recall_queries=10, vectors="random", work_dir=tmp_path,
        spawn=_spawn, vector_options={"ivf_threshold": 1_000},
    )
    row = report["results"]["3000"]
    assert row["bm25"]["tools"] == 3_000 and row["bm25"]["queries"]["timed"] == 20
    assert row["bm25"]["index_bytes"] > row["bm25"]["tools_file_bytes"] > 0
    assert row["bm25_load"]["queries"]["timed"] == 20
    # the bound on a query's work is compared with the exact search; 3,000 tools are far within it
    bound = row["bm25_load"]["bound"]
    assert bound["over"] == 0 and bound["timed"] == 20 and bound["exact_queries"]["timed"] == 20
    # quality against the data set's labels, a variant counting as its real tool: the same within the bound
    labelled = bound["ndcg"]["all"]
    assert labelled["queries"] == 20 and 0 < labelled["bounded"] == labelled["exact"] <= 1
    assert bound["ndcg"]["over"]["queries"] == 0
    assert row["vector"]["index_kind"] == "ivf" and 0.5 <= row["vector"]["recall_at_10"] <= 1.0
    assert [s["nprobe"] for s in row["vector"]["recall_sweep"]][:2] == [8, 16]
    assert set(report["analysis"]["targets"]) == {
        "bm25_p50_ms", "bm25_p95_ms", "bm25_p50_loaded_ms", "bm25_p95_loaded_ms", "bm25_load_s",
        "bm25_load_100000_s", "vector_p50_ms", "peak_rss_gib",
        "session_create_ms",
    }
    targets = report["analysis"]["targets"]
    assert all(t["value"] is not None for key, t in targets.items() if key != "bm25_load_100000_s")
    assert targets["bm25_load_100000_s"]["met"] is None  # no 100,000-tool row in this run: n/a, never a guess
    queries = row["bm25"]["queries"]
    assert queries["p50_ms"] <= queries["p95_ms"] <= queries["p99_ms"]
    assert 0 < row["bm25_load"]["load_s"] == targets["bm25_load_s"]["value"]
    text = render_markdown(report, "toolsearch bench scale --million --sizes 3000")
    assert "| 3,000 | ivf, nlist" in text and "recall@10" in text
    assert "query p50 / p95 / p99 ms" in text and "bm25 query p95 ≤ 15 ms, in a fresh process that loaded it" in text
    quality = f"{labelled['bounded']:.3f} / {labelled['exact']:.3f} (20)"
    assert f"| 3,000 | 0 of 20 | 0 / 0 | {quality} |" in text and "`max_postings=None` (exact)" in text
    write_report(tmp_path / "out", "million", report, text, quiet=True)  # as `bench scale --million` writes it
    written = (tmp_path / "out" / "million.md").read_text()
    assert "- Load average at start (1/5/15 min): [" in written
    assert "- Load average at the end (1/5/15 min): [" in written
    assert "| bm25 index of 100,000 tools: load in a new process ≤ 0.5 s (needs 100000 in --sizes) | - | n/a |" in text


def test_variants_count_as_the_real_tool_they_vary() -> None:
    from benchmarks.lib.million import _families

    real = frozenset({"bfcl_get_weather", "seal_tool_v2"})
    hits = ["bfcl_get_weather_v12", "bfcl_send_v3", "bfcl_get_weather", "seal_tool_v2", "seal_tool_v2_v7"]
    assert _families(hits, real) == ["bfcl_get_weather", "bfcl_send", "seal_tool_v2"]


def test_million_targets_read_the_100000_row_for_the_small_load_target() -> None:
    from benchmarks.lib.million import analyse

    queries = {"p50_ms": 4.0, "p95_ms": 16.0, "p99_ms": 30.0}
    report = {
        "settings": {"sizes": [100_000, 1_000_000]},
        "results": {
            "100000": {"bm25": {"queries": queries}, "bm25_load": {"load_s": 0.61}},
            "1000000": {"bm25": {"queries": queries, "session_create": {"p50_ms": 0.002}},
                        "bm25_load": {"load_s": 1.2}},
        },
    }
    targets = analyse(report)["targets"]
    assert targets["bm25_load_100000_s"] == {"value": 0.61, "limit": 0.5, "met": False}
    assert targets["bm25_load_s"] == {"value": 1.2, "limit": 3.0, "met": True}
    assert targets["bm25_p50_ms"]["met"] is True and targets["bm25_p95_ms"]["met"] is False
