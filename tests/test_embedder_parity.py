"""The numpy MiniLM embedder against sentence-transformers (torch) on the same packaged model, and int8 queries.

Runs where the `sentence-transformers` extra is installed, as CI does; in CI a missing extra is a
failure, not a skip. Per text the float32 vectors must agree to cosine >= 0.9999 (they agree to
~1e-6), and rankings over a data set must be the same top-10. Queries in int8 (the default where
onnxruntime is installed) are held to ranking, not to vectors: nDCG@10 within 0.003 of float32
queries on every shared data set, and the same top hit for >= 99% of queries.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

from toolsearch import Tool, ToolIndex, load_tools
from toolsearch.embeddings import DEFAULT_MODEL_ID, NumpyEmbedder, SentenceTransformerEmbedder
from toolsearch.text import embedding_text

pytestmark = pytest.mark.slow

try:
    import sentence_transformers  # noqa: F401
except ImportError:  # pragma: no cover - CI installs the extra
    if os.environ.get("CI"):
        raise
    pytest.skip(
        "sentence-transformers is not installed (pip install 'toolsearch[sentence-transformers]')",
        allow_module_level=True,
    )

HAND_WRITTEN = [
    # empty-ish
    "", " ", "\n\t", ".", "?", "a", "[CLS]", "[SEP] [PAD] [MASK]", "😀", "\u200b",
    # CJK and other scripts
    "获取北京明天的天气预报", "发送一封电子邮件给我的同事", "東京の天気を教えてください", "会議室を予約する",
    "서울의 날씨는 어때요?", "이메일을 보내 주세요", "Какая погода в Москве?", "أرسل بريدًا إلكترونيًا إلى زميلي",
    "पेरिस में मौसम कैसा है", "Envía un correo a mi jefe con el informe adjunto", "Wie wird das Wetter morgen in Berlin?",
    "Réserver une salle de réunion pour jeudi", "Kirim email ke atasan saya", "天气 weather 날씨 météo",
    # code identifiers
    "getUserById", "get_user_by_id", "HTTPRequestHandler.do_GET", "math.factorial", "os.path.join(a, b)",
    "np.linalg.norm(x, axis=1, keepdims=True)", "SELECT * FROM users WHERE id = 42;", "{\"type\": \"object\"}",
    "def f(x: int) -> str: return str(x)", "k8s_pod_restart --namespace=prod", "__init__", "camelCaseAndsnake_case_mix",
    "x" * 300, "a_b_c_d_e_f_g_h_i_j_k_l_m_n_o_p_q_r_s_t_u_v_w_x_y_z", "0123456789" * 20,
    # very long: past the 256-token limit, truncated the same way
    "Send an email to the whole team about the quarterly report and attach the spreadsheet. " * 40,
    " ".join(f"word{i}" for i in range(600)),
    "天气预报" * 300,
    "get_weather(city: str, unit: str = 'celsius') -> dict " * 60,
]


def _dataset_texts(datasets: Path, count: int) -> list[str]:
    rng = random.Random(14)
    texts: list[str] = []
    for name in ("bfcl", "metatool", "seal_tools"):
        queries = [json.loads(line)["query"] for line in (datasets / name / "queries.jsonl").open(encoding="utf-8")]
        texts += rng.sample(queries, count // 6)
        tools = load_tools(datasets / name / "tools.jsonl")
        texts += [embedding_text(t) for t in rng.sample(tools, count // 6)]
    return texts


@pytest.fixture(scope="module")
def torch_minilm() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder("default")


def test_vectors_match_sentence_transformers_per_text(
    datasets_dir: Path, minilm: NumpyEmbedder, torch_minilm: SentenceTransformerEmbedder
) -> None:
    texts = HAND_WRITTEN + _dataset_texts(datasets_dir, 300)
    assert len(texts) >= 300
    ours, theirs = minilm.embed(texts), torch_minilm.embed(texts)
    assert ours.shape == theirs.shape == (len(texts), 384)
    cosines = np.einsum("ij,ij->i", ours, theirs)
    worst = int(np.argmin(cosines))
    assert cosines[worst] >= 0.9999, f"cosine {cosines[worst]:.6f} for {texts[worst][:80]!r}"
    # Queries take the same path (no prefix for this model).
    np.testing.assert_allclose(minilm.embed_queries(texts[:20]), torch_minilm.embed_queries(texts[:20]), atol=1e-4)
    assert minilm.model_id == torch_minilm.model_id == DEFAULT_MODEL_ID  # so one cache key stays valid


def test_onnxruntime_query_path_matches_sentence_transformers(
    datasets_dir: Path, torch_minilm: SentenceTransformerEmbedder
) -> None:
    """Queries (a few texts a call) run on onnxruntime: each text alone, and a query with its clauses."""
    from toolsearch.backends.vector import query_clauses

    fast = NumpyEmbedder(runtime="onnxruntime")
    texts = HAND_WRITTEN + _dataset_texts(datasets_dir, 120)
    ours = np.concatenate([fast.embed_queries([t]) for t in texts])
    assert fast.encoder.onnx_runner("onnxruntime") is not None
    cosines = np.einsum("ij,ij->i", ours, torch_minilm.embed(texts))
    worst = int(np.argmin(cosines))
    assert cosines[worst] >= 0.9999, f"cosine {cosines[worst]:.6f} for {texts[worst][:80]!r}"
    long = "Book a flight to Paris for Monday, then reserve a hotel near the Louvre and email the itinerary to my boss"
    parts = [long, *query_clauses(long)]
    assert len(parts) > 2
    np.testing.assert_allclose(fast.embed_queries(parts), torch_minilm.embed(parts), atol=1e-4)


@pytest.mark.parametrize("runtime", ["numpy", "onnxruntime"])
def test_same_top10_through_the_vector_backend(
    datasets_dir: Path, torch_minilm: SentenceTransformerEmbedder, runtime: str
) -> None:
    tools: list[Tool] = load_tools(datasets_dir / "metatool" / "tools.jsonl")
    rng = random.Random(10)
    lines = (datasets_dir / "metatool" / "queries.jsonl").open(encoding="utf-8")
    queries = rng.sample([json.loads(line)["query"] for line in lines], 150)
    # No embedding cache: each index must be embedded by its own embedder.
    ours = ToolIndex.build(tools, backend="vector", embedder=NumpyEmbedder(runtime=runtime), cache=False)
    theirs = ToolIndex.build(tools, backend="vector", embedder=torch_minilm, cache=False)
    for query in queries:
        a, b = ours.search(query, 10), theirs.search(query, 10)
        if a.names != b.names:  # only an exact tie (scores within float noise) may swap neighbours
            scores = {h.name: h.score for h in b.hits}
            for mine, other in zip(a.hits, b.hits, strict=True):
                assert mine.name == other.name or abs(scores.get(mine.name, -1.0) - other.score) < 1e-5, query
        np.testing.assert_allclose([h.score for h in a.hits], [h.score for h in b.hits], atol=1e-5)


@pytest.fixture(scope="module")
def minilm() -> NumpyEmbedder:
    return NumpyEmbedder(runtime="numpy")  # the float32 reference: "auto" runs queries in int8


INT8_NDCG = 0.003  # |nDCG@10(int8 queries) - nDCG@10(float32 queries)| on each data set
INT8_SAME_TOP1 = 0.99  # share of queries whose top hit is the same
INT8_QUERIES = 300  # per data set: the documents are embedded once (shared cache), queries twice


@pytest.mark.timeout(900)  # the first test to embed a whole data set's tools pays for it (seal_tools: 4,076)
@pytest.mark.parametrize("dataset", ["bfcl", "metatool", "seal_tools"])
def test_int8_queries_rank_like_float32(datasets_dir: Path, dataset: str) -> None:
    """The default backend over the same (float32) tool vectors, queries embedded in float32 and in int8."""
    from toolsearch.evaluation import load_queries, ndcg_at
    from toolsearch.index import MAX_QUERY_CHARS

    tools = load_tools(datasets_dir / dataset / "tools.jsonl")
    queries = load_queries(datasets_dir / dataset / "queries.jsonl", limit=INT8_QUERIES, seed=0)
    texts = [q.query.strip()[:MAX_QUERY_CHARS] for q in queries]
    ranked: dict[str, list[list[str]]] = {}
    ndcg: dict[str, float] = {}
    for runtime in ("onnxruntime", "int8"):
        embedder = NumpyEmbedder(runtime=runtime)
        index = ToolIndex.build(tools, backend="hybrid", embedder=embedder)
        ranked[runtime] = [index.search(text, 10).names for text in texts]
        ndcg[runtime] = sum(ndcg_at(r, q.relevant) for r, q in zip(ranked[runtime], queries, strict=True)) / len(texts)
    assert embedder.encoder.onnx_runner("int8").int8  # the int8 graph really ran
    same = sum(a[:1] == b[:1] for a, b in zip(ranked["onnxruntime"], ranked["int8"], strict=True)) / len(texts)
    assert abs(ndcg["int8"] - ndcg["onnxruntime"]) <= INT8_NDCG, ndcg
    assert same >= INT8_SAME_TOP1, f"same top hit for {same:.3f} of {dataset} queries"


def test_documents_stay_float32_and_auto_queries_run_in_int8() -> None:
    """An index and the embedding cache never hold int8 vectors: documents embed alike under every runtime."""
    texts = ["Send an email to a contact", "Weather forecast for a city"]
    reference = NumpyEmbedder(runtime="numpy")
    for runtime in ("auto", "int8", "onnxruntime"):
        embedder = NumpyEmbedder(runtime=runtime)
        for text in texts:  # one at a time: the few-texts path that queries take
            np.testing.assert_allclose(embedder.embed([text]), reference.embed([text]), atol=1e-5)
    auto, int8 = NumpyEmbedder(runtime="auto"), NumpyEmbedder(runtime="int8")
    np.testing.assert_array_equal(auto.embed_queries(texts[:1]), int8.embed_queries(texts[:1]))
    cosine = float(int8.embed_queries(texts[:1])[0] @ reference.embed_queries(texts[:1])[0])
    assert 0.98 < cosine < 0.99999  # close, and not the float32 vector itself


def test_bench_retrieval_runs_both_embedders_side_by_side(tmp_path: Path, demo_tools: list[Tool]) -> None:
    """`bench retrieval --embedders numpy,sentence-transformers`: each embedder its own system and cache."""
    from toolsearch.bench import resolve_datasets
    from toolsearch.bench import retrieval as bench

    folder = tmp_path / "tiny"
    folder.mkdir()
    tools = demo_tools[:40]
    (folder / "tools.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tools), encoding="utf-8")
    queries = [{"id": str(i), "query": t.description, "relevant": [t.name]} for i, t in enumerate(tools[:12])]
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    report = bench.run(
        resolve_datasets([str(folder)]), ["vector"], [], limit=None, embedders=["numpy", "sentence-transformers"]
    )
    systems = report["datasets"]["tiny"]["systems"]
    assert set(systems) == {"vector", "vector@sentence-transformers"}
    parity = report["analysis"]["embedder_parity"]["tiny"]["vector"]
    assert abs(parity["delta"]) <= bench.EMBEDDER_PARITY_NDCG
    assert report["analysis"]["targets"]["numpy_embedder_ndcg_within_0.002_of_sentence_transformers"] is True
    text = bench.render_markdown(report)
    assert "## Embedders: numpy vs sentence-transformers" in text and "| tiny | vector |" in text
