"""The onnxruntime query graphs kept on disk: read back bit for bit, never rebuilt, damage said and rebuilt, and a
cache folder that cannot be written still embeds."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from capabilities import CAP_DAC_OVERRIDE, as_any_user

from toolsearch import _bert_onnx
from toolsearch._bert import BertEncoder
from toolsearch.embeddings import NumpyEmbedder
from toolsearch.model_file import SHIPPED

pytestmark = pytest.mark.slow

TEXTS = ["send an email to my team that the report is ready", "weather in Paris tomorrow",
         "Book a table for two in Rome tonight. Then send the booking to my partner by text"]

# A fresh process embeds TEXTS in int8 through the default path and says whether it built the graph (building
# imports onnx; reading a kept graph does not).
CHILD = textwrap.dedent("""
    import json, logging, sys
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")  # what it says, and how loudly
    from toolsearch.embeddings import NumpyEmbedder
    from toolsearch.model_file import SHIPPED
    encoder = NumpyEmbedder(str(SHIPPED.folder), runtime="int8").encoder
    rows = encoder.onnx_runner("int8").forward(encoder.token_ids(json.loads(sys.argv[1])), 1)
    print(json.dumps({"rows": rows.tolist(), "built": "onnx" in sys.modules}))
""")


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache folder of the test's own, where the graphs are kept (`query-graphs/` in it)."""
    monkeypatch.setenv("TOOLSEARCH_CACHE_DIR", str(tmp_path))
    return tmp_path


def _encoder() -> BertEncoder:
    encoder: BertEncoder = NumpyEmbedder(str(SHIPPED.folder), runtime="int8").encoder
    assert encoder.digest  # what keys the kept graph
    return encoder


def _kept(cache: Path, precision: str = "int8") -> Path:
    (path,) = (cache / "query-graphs").glob(f"{precision}-*.graph")
    return path


def _version(path: Path) -> tuple[int, int]:
    """What a rewrite (a new file renamed over it) changes."""
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


def _assert_same_graph(runner: _bert_onnx.OnnxRunner, encoder: BertEncoder, *, int8: bool) -> None:
    """The runner's graph and weights are, bit for bit, what building them afresh makes."""
    model, weights = _bert_onnx._graph(encoder, int8=int8)
    assert runner._model == model
    assert list(runner._weights) == list(weights)
    for name, array in weights.items():
        kept = runner._weights[name]
        assert kept.dtype == array.dtype and kept.shape == array.shape, name
        np.testing.assert_array_equal(kept, array, err_msg=name)


def _rows(runner: _bert_onnx.OnnxRunner, encoder: BertEncoder) -> np.ndarray:
    return runner.forward(encoder.token_ids(TEXTS), 1)


@pytest.mark.parametrize("int8", [True, False], ids=["int8", "fp32"])
def test_a_kept_graph_gives_the_vectors_of_one_built_afresh(cache: Path, int8: bool) -> None:
    encoder = _encoder()
    built = _bert_onnx.OnnxRunner(encoder, int8=int8)
    path = _kept(cache, "int8" if int8 else "fp32")
    kept = _bert_onnx.OnnxRunner(encoder, int8=int8)
    _assert_same_graph(kept, encoder, int8=int8)
    np.testing.assert_array_equal(_rows(kept, encoder), _rows(built, encoder))
    if int8:  # only what the build made is on disk, not the encoder's own float arrays (the vocabulary's 47 MB)
        assert path.stat().st_size < 12_000_000


def test_a_second_runner_and_a_second_process_read_the_kept_graph_and_build_nothing(
    cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    encoder = _encoder()
    with caplog.at_level(logging.INFO, logger="toolsearch"):
        built = _bert_onnx.OnnxRunner(encoder, int8=True)
    assert "query graph built and kept in" in caplog.text
    path = _kept(cache)
    before = _version(path)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="toolsearch"):
        again = _bert_onnx.OnnxRunner(encoder, int8=True)
    assert caplog.records == []  # neither built nor written again
    assert _version(path) == before
    np.testing.assert_array_equal(_rows(again, encoder), _rows(built, encoder))
    child = _embed_in_a_new_process(cache)
    assert child.returncode == 0, child.stderr[-3000:]
    out = json.loads(child.stdout)
    assert out["built"] is False and "unusable" not in child.stderr
    np.testing.assert_array_equal(np.array(out["rows"], dtype=np.float32), _rows(built, encoder))
    assert _version(path) == before


def _flip_a_byte(path: Path, cache: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate(path: Path, cache: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _another_graph(path: Path, cache: Path) -> None:
    """A whole, valid file, but the float32 graph's: made from other inputs than the int8 graph's name says."""
    _bert_onnx.OnnxRunner(_encoder(), int8=False)
    shutil.copyfile(_kept(cache, "fp32"), path)


def _not_a_graph(path: Path, cache: Path) -> None:
    path.write_bytes(b"PK\x03\x04 something else entirely")


DAMAGE = {
    "a flipped byte": (_flip_a_byte, "does not match its checksum"),
    "truncated": (_truncate, "does not match its checksum"),
    "another graph's file": (_another_graph, "made from another model, code or numpy"),
    "not a graph file": (_not_a_graph, "not a toolsearch query graph file"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_kept_graph_is_said_built_again_and_rewritten(
    cache: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    encoder = _encoder()
    built = _bert_onnx.OnnxRunner(encoder, int8=True)
    path = _kept(cache)
    spoil, problem = DAMAGE[damage]
    spoil(path, cache)
    damaged = _version(path)
    with caplog.at_level(logging.WARNING, logger="toolsearch"):
        rebuilt = _bert_onnx.OnnxRunner(encoder, int8=True)
    assert "unusable" in caplog.text and problem in caplog.text and "built again" in caplog.text, caplog.text
    _assert_same_graph(rebuilt, encoder, int8=True)
    np.testing.assert_array_equal(_rows(rebuilt, encoder), _rows(built, encoder))
    assert _version(path) != damaged  # written anew, and whole: the next runner reads it without a word
    rewritten = _version(path)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="toolsearch"):
        _bert_onnx.OnnxRunner(encoder, int8=True)
    assert caplog.records == [] and _version(path) == rewritten


@pytest.mark.parametrize("holding", ["nothing", "the kept graph"])
def test_a_cache_folder_that_cannot_be_written_still_embeds(cache: Path, tmp_path_factory: pytest.TempPathFactory,
                                                            holding: str) -> None:
    encoder = _encoder()
    expected = _rows(_bert_onnx.OnnxRunner(encoder, int8=True), encoder)  # kept in `cache`
    folder = tmp_path_factory.mktemp("read-only")
    if holding == "the kept graph":
        shutil.copytree(cache / "query-graphs", folder / "query-graphs")
    folders = [folder, *(path for path in folder.rglob("*") if path.is_dir())]
    for each in folders:
        each.chmod(0o555)
    try:
        probe = _embed_in_a_new_process(folder, probe=True)
        assert probe.returncode == 0 and probe.stdout.strip() == "read-only", probe.stdout + probe.stderr[-2000:]
        child = _embed_in_a_new_process(folder)
    finally:
        for each in folders:
            each.chmod(0o755)
    assert child.returncode == 0, child.stderr[-3000:]
    out = json.loads(child.stdout)
    np.testing.assert_array_equal(np.array(out["rows"], dtype=np.float32), expected)
    if holding == "nothing":  # built in memory, as without a cache, and said
        assert out["built"] is True
        # said, as an INFO line: a cache made read-only on purpose (built ahead, served by another user) is no fault
        assert "INFO the query graph is not kept in" in child.stderr and "may not write" in child.stderr
        assert "WARNING" not in child.stderr, child.stderr
    else:  # read, not built
        assert out["built"] is False and "not kept" not in child.stderr and "unusable" not in child.stderr
    # nothing written, not even a temporary file
    kept = [] if holding == "nothing" else ["query-graphs", f"query-graphs/{_kept(cache).name}"]
    assert sorted(str(path.relative_to(folder)) for path in folder.rglob("*")) == kept


PROBE = textwrap.dedent("""
    import sys
    from pathlib import Path
    try:
        (Path(sys.argv[1]) / "probe").write_text("x")
    except PermissionError:
        print("read-only")
    else:
        print("writable")
""")


def _embed_in_a_new_process(folder: Path, *, probe: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TOOLSEARCH_CACHE_DIR": str(folder)}
    command = [sys.executable, "-c", *([PROBE, str(folder)] if probe else [CHILD, json.dumps(TEXTS)])]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, env=env,
                          preexec_fn=as_any_user(CAP_DAC_OVERRIDE))  # root writes to a 0555 folder without it


def test_only_the_most_recently_written_graphs_stay(cache: Path) -> None:
    """Each model, toolsearch or numpy version writes a graph of its own: the oldest go; the other precision's stay."""
    folder = cache / "query-graphs"
    folder.mkdir()
    older = [folder / f"int8-{'0' * 63}{i}.graph" for i in range(5)]
    for age, path in enumerate(reversed(older), start=1):
        path.write_bytes(b"an older version's graph")
        os.utime(path, (1_700_000_000 - age * 3600, 1_700_000_000 - age * 3600))
    other = folder / f"fp32-{'0' * 64}.graph"
    other.write_bytes(b"an older version's graph")
    os.utime(other, (1_600_000_000, 1_600_000_000))
    _bert_onnx.OnnxRunner(_encoder(), int8=True)
    assert sorted(folder.iterdir()) == sorted([_kept_newest(folder), *older[-3:], other])


def _kept_newest(folder: Path) -> Path:
    (path,) = (p for p in folder.glob("int8-*.graph") if p.read_bytes() != b"an older version's graph")
    return path


def test_a_temporary_file_a_killed_writer_left_is_removed_once_it_is_old(cache: Path) -> None:
    # Before: a process killed while writing left its 11 MB temporary file for good, one per killed first query.
    folder = cache / "query-graphs"
    folder.mkdir()
    abandoned = folder / f".int8-{'0' * 64}.graph.4242-{'a' * 32}.tmp"
    recent = folder / f".int8-{'1' * 64}.graph.4243-{'b' * 32}.tmp"  # another process may be writing it now
    for path in (abandoned, recent):
        path.write_bytes(b"half a graph")
    os.utime(abandoned, (1_700_000_000, 1_700_000_000))
    _bert_onnx.OnnxRunner(_encoder(), int8=True)
    assert not abandoned.exists() and recent.exists()


def test_a_file_where_the_cache_folder_would_be_is_no_damaged_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    # Before: "the query graph kept in ... is unusable (it cannot be read ([Errno 20] Not a directory ...))", as if a
    # graph file were damaged, before the write's own warning.
    blocker = tmp_path / "cache"
    blocker.write_text("a file, not a folder")
    monkeypatch.setenv("TOOLSEARCH_CACHE_DIR", str(blocker))
    with caplog.at_level(logging.INFO, logger="toolsearch"):
        _bert_onnx.OnnxRunner(_encoder(), int8=True)
    assert "unusable" not in caplog.text and "the query graph is not kept in" in caplog.text, caplog.text


def test_a_kept_graph_file_keeps_its_layout(cache: Path) -> None:
    """Magic, BLAKE2b-256 of the rest, the rest (an npz): the layout every version since the first kept graph writes,
    so a file one of them wrote is read by another that makes the same graph."""
    _bert_onnx.OnnxRunner(_encoder(), int8=True)
    raw = _kept(cache).read_bytes()
    magic = b"toolsearch-query-graph-1\n"
    body = raw[len(magic) + 32 :]
    assert raw == magic + hashlib.blake2b(body, digest_size=32).digest() + body
    assert body.startswith(b"PK\x03\x04")  # np.savez's zip
    assert not [path for path in (cache / "query-graphs").iterdir() if path.name.startswith(".")]  # no temporary file


# A fresh process embeds TEXTS as documents through `embed_texts` with the float32 graph (runtime "onnxruntime":
# a few documents run there), with the embedding cache in a folder of its own ("on") or turned off ("off").
DOCUMENTS = textwrap.dedent("""
    import json, sys
    from toolsearch.embeddings import EmbeddingCache, NumpyEmbedder, embed_texts
    from toolsearch.model_file import SHIPPED
    embedder = NumpyEmbedder(str(SHIPPED.folder), runtime="onnxruntime")
    cache = EmbeddingCache(sys.argv[2]) if sys.argv[1] == "on" else None
    rows = embed_texts(embedder, json.loads(sys.argv[3]), cache=cache)
    print(json.dumps({"rows": rows.tolist(), "built": "onnx" in sys.modules}))
""")


def test_with_the_embedding_cache_off_the_graph_stays_in_memory(cache: Path, tmp_path_factory: pytest.TempPathFactory
                                                                ) -> None:
    # Before: `embed_texts(..., cache=None)` left no vectors on disk but wrote query-graphs/fp32-*.graph all the same.
    vectors = tmp_path_factory.mktemp("vectors")

    def embed(switch: str) -> dict[str, Any]:
        done = subprocess.run([sys.executable, "-c", DOCUMENTS, switch, str(vectors), json.dumps(TEXTS)],
                              capture_output=True, text=True, timeout=240,
                              env={**os.environ, "TOOLSEARCH_CACHE_DIR": str(cache)})
        assert done.returncode == 0, done.stderr[-3000:]
        out: dict[str, Any] = json.loads(done.stdout)
        return out

    off = embed("off")
    assert off["built"] is True and sorted(cache.iterdir()) == [] and sorted(vectors.iterdir()) == []
    on = embed("on")  # the same vectors, and the graph kept, as the cache says
    np.testing.assert_array_equal(np.array(off["rows"]), np.array(on["rows"]))
    kept = _kept(cache, "fp32")
    before = _version(kept)
    off = embed("off")  # not read either: built afresh, the kept file left as it was
    assert off["built"] is True and _version(kept) == before and sorted(cache.rglob("*")) == [kept.parent, kept]
    np.testing.assert_array_equal(np.array(off["rows"]), np.array(on["rows"]))
