"""The embedding cache checks every shard, ignores the old format it must not rewrite, and keeps interrupted work."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from toolsearch import Tool
from toolsearch.embeddings import (
    CallableEmbedder,
    EmbeddingCache,
    NumpyEmbedder,
    document_cache_id,
    embed_texts,
    text_key,
)
from toolsearch.text import embedding_text

DIM = 16


def _vectors(texts: list[str]) -> np.ndarray:
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in text.split():
            out[row, sum(word.encode()) % DIM] += 1.0
    return out


class Counting:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.seen.extend(texts)
        return _vectors(texts)


def _flip_exponent_bits(path: Path) -> None:
    """Flip high exponent bits of one float32 in the matrix: a vector of ~1e38 that still parses."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x7F
    path.write_bytes(bytes(data))


def test_a_damaged_shard_is_dropped_with_a_warning_and_recomputed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Before shard digests, flipped exponent bits gave a fresh vector build garbage top-5, health "ok".
    texts = ["send an email", "weather in a city", "create an invoice"]
    embed_texts(CallableEmbedder(Counting(), "m", DIM), texts, cache=EmbeddingCache(tmp_path))
    (matrix,) = EmbeddingCache(tmp_path).folder("m").glob("*.vectors2")
    _flip_exponent_bits(matrix)
    counting = Counting()
    with caplog.at_level(logging.WARNING, logger="toolsearch.embeddings"):
        out = embed_texts(CallableEmbedder(counting, "m", DIM), texts, cache=EmbeddingCache(tmp_path))
    np.testing.assert_array_equal(out, embed_texts(CallableEmbedder(_vectors, "m", DIM), texts))
    assert sorted(counting.seen) == sorted(texts)  # embedded again
    assert "damaged" in caplog.text and "does not match its checksum" in caplog.text and "embedded again" in caplog.text
    assert not matrix.exists()  # dropped; the fresh shard replaced it
    again = Counting()
    embed_texts(CallableEmbedder(again, "m", DIM), texts, cache=EmbeddingCache(tmp_path))
    assert again.seen == []


@pytest.mark.parametrize("damage", ["truncate keys", "truncate matrix", "flip a key"])
def test_every_kind_of_shard_damage_is_caught(tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    texts = [f"text number {i}" for i in range(5)]
    embed_texts(CallableEmbedder(Counting(), "m", DIM), texts, cache=EmbeddingCache(tmp_path))
    folder = EmbeddingCache(tmp_path).folder("m")
    (keys,), (matrix,) = list(folder.glob("*.keys2")), list(folder.glob("*.vectors2"))
    if damage == "truncate keys":
        keys.write_bytes(keys.read_bytes()[:-1])
    elif damage == "truncate matrix":
        matrix.write_bytes(matrix.read_bytes()[:-4])
    else:
        data = bytearray(keys.read_bytes())
        data[-5] ^= 1
        keys.write_bytes(bytes(data))
    counting = Counting()
    with caplog.at_level(logging.WARNING, logger="toolsearch.embeddings"):
        embed_texts(CallableEmbedder(counting, "m", DIM), texts, cache=EmbeddingCache(tmp_path))
    assert sorted(counting.seen) == sorted(texts) and "damaged" in caplog.text


def test_old_format_shards_are_neither_read_nor_rewritten(tmp_path: Path) -> None:
    # Other processes may still read this folder with the old code: its files stay as they are.
    folder = EmbeddingCache(tmp_path).folder("m")
    folder.mkdir(parents=True)
    old_keys = text_key("old text")
    (folder / "1-old.keys").write_bytes(old_keys)
    np.save(folder / "1-old.npy", np.full((1, DIM), 9.0, dtype=np.float32))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    counting = Counting()
    out = embed_texts(CallableEmbedder(counting, "m", DIM), ["old text"], cache=EmbeddingCache(tmp_path))
    assert counting.seen == ["old text"] and out[0].max() < 9.0
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.name in before} == before


SLOW_BUILD = textwrap.dedent("""
    import sys
    from toolsearch import Tool, ToolIndex
    tools = [Tool(f"tool_{i}", f"Tool {i} handles request kind {i} for customer account {i * 7}.")
             for i in range(int(sys.argv[1]))]
    ToolIndex.build(tools, backend="vector")
    print("finished", flush=True)
""")


def test_a_killed_cold_vector_build_keeps_its_finished_batches(tmp_path: Path) -> None:
    # Before, the cache was written every 4,096 texts: Ctrl-C 8 s into a cold build kept nothing.
    count = 3000
    cache = tmp_path / "cache"
    env = {**os.environ, "TOOLSEARCH_CACHE_DIR": str(cache)}
    build = subprocess.Popen([sys.executable, "-c", SLOW_BUILD, str(count)], env=env, stdout=subprocess.PIPE)
    key = document_cache_id(NumpyEmbedder())  # the stock model's weights embed the tools (its id and digest)
    folder = EmbeddingCache(cache).folder(key)
    deadline = time.monotonic() + 240
    while not (folder.is_dir() and list(folder.glob("*.keys2"))):
        assert build.poll() is None, "the build ended before it wrote a batch"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    build.send_signal(signal.SIGKILL)
    assert build.wait(timeout=60) == -signal.SIGKILL
    tools = [Tool(f"tool_{i}", f"Tool {i} handles request kind {i} for customer account {i * 7}.")
             for i in range(count)]
    texts = [embedding_text(t) for t in tools]
    kept = sum(v is not None for v in EmbeddingCache(cache).get(key, [text_key(t) for t in texts]))
    assert 0 < kept < count, kept
