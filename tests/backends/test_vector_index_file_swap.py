"""A loaded vector or hybrid index whose `vectors.faiss` changes on disk: another build copied over its folder in
place (`cp -rL new/. deployed/`, `rsync --inplace`) while the process serves it, or while it loads."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import faiss
import pytest
from test_embeddings import hashing_vectors

from toolsearch import IndexFormatError, Tool, ToolIndex
from toolsearch.embeddings import CallableEmbedder

pytestmark = pytest.mark.slow

# Run in a process of its own: before the fix a copy of a smaller build killed the process with SIGBUS.
_SERVE_THEN_COPY_OVER = textwrap.dedent(
    """
    import hashlib, subprocess, sys
    from pathlib import Path
    import numpy as np
    from toolsearch import Tool, ToolIndex
    from toolsearch.embeddings import CallableEmbedder
    from toolsearch.text import embedding_text

    def hashing(texts):  # a bag of hashed words (tests/test_embeddings.hashing_vectors), 64-d: no model to load
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0
            out[row, 0] += 0.01
        return out

    backend, newer, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    embedder = CallableEmbedder(hashing, "hash-64", 64)
    words = ["alpha", "bravo", "carrot", "delta", "echo", "falcon", "golf", "harbor", "indigo", "juliet"]
    tools = [Tool(f"tool_{i}", f"{words[i % 10]} {words[i // 10 % 10]} {words[i // 100]} item {i}") for i in range(300)]
    if newer == "same_size":  # the same names, each with another's text: a file of the same size, other vectors
        newer_tools = [Tool(t.name, tools[(i + 1) % len(tools)].description) for i, t in enumerate(tools)]
    else:  # fewer tools: a file much shorter than the one loaded
        newer_tools = tools[:20]
    ToolIndex.build(tools, backend=backend, embedder=embedder, cache=False).save(work / "a")
    ToolIndex.build(newer_tools, backend=backend, embedder=embedder, cache=False).save(work / "b")
    subprocess.run(["cp", "-rL", str(work / "a"), str(work / "deployed")], check=True)
    faiss_files = sorted((work / "deployed").rglob("vectors.faiss"))
    sizes = [f.stat().st_size for f in faiss_files]

    index = ToolIndex.load(work / "deployed", embedder=embedder, cache=False)
    list(index.catalog)  # every tool parsed now: only the vectors can change what a search says after the copy
    queries = [embedding_text(tools[i]) for i in (3, 150, 299)]  # each tool's own text: its own vector
    before = [index.search(q, 3).hits for q in queries]
    assert [hits[0].name for hits in before] == ["tool_3", "tool_150", "tool_299"], before
    subprocess.run(["cp", "-rL", str(work / "b") + "/.", str(work / "deployed")], check=True)  # the operator's update
    changed = [f.stat().st_size for f in faiss_files]
    assert (changed == sizes) == (newer == "same_size"), (sizes, changed)
    after = [index.search(q, 3).hits for q in queries]
    print("same answers:", after == before, flush=True)
    fresh = ToolIndex.load(work / "deployed", embedder=embedder, cache=False)
    print("a fresh load reads the copied build:", len(fresh.catalog) == len(newer_tools)
          and [fresh.search(q, 3).hits for q in queries] != before, flush=True)
    """
)


@pytest.mark.parametrize("newer", ["same_size", "smaller"])
@pytest.mark.parametrize("backend", ["vector", "hybrid"])
def test_a_build_copied_over_a_served_index_changes_none_of_its_answers(
    tmp_path: Path, backend: str, newer: str
) -> None:
    # Before: the loaded index mapped vectors.faiss, so the same-size copy made it answer with the newer build's
    # vectors against its own id map (other tools, other scores), and the smaller one killed it with SIGBUS (rc -7).
    done = subprocess.run([sys.executable, "-c", _SERVE_THEN_COPY_OVER, backend, newer, str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-3000:])
    assert done.stdout.splitlines() == ["same answers: True", "a fresh load reads the copied build: True"]


def _saved(tmp_path: Path) -> tuple[Path, CallableEmbedder]:
    embedder = CallableEmbedder(hashing_vectors, "hash-64", 64)
    tools = [Tool(f"tool_{i}", f"does thing number {i} with widget {i % 7}") for i in range(50)]
    ToolIndex.build(tools, backend="vector", embedder=embedder, cache=False).save(tmp_path / "ix")
    return tmp_path / "ix", embedder


def test_the_loaded_index_holds_its_vectors_not_a_map_of_the_file(tmp_path: Path) -> None:
    folder, embedder = _saved(tmp_path)
    index = ToolIndex.load(folder, embedder=embedder, cache=False)
    faiss_file = str(folder.resolve() / "backend" / "vectors.faiss")
    assert faiss_file not in Path("/proc/self/maps").read_text()
    assert index.search("does thing number 7", 1).names == ["tool_7"]
    index.upsert([Tool("zz_new", "sings a lullaby")])  # an index read into memory still takes updates
    index.remove(["tool_7"])
    assert index.search("sings a lullaby", 1).names == ["zz_new"]
    assert "tool_7" not in index.search("does thing number 7", 50).names


def test_a_faiss_file_changed_while_it_is_read_is_said_not_read_half_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The load's digest check has passed when the backend reads the file; a copy landing during that read would
    # give a mix of two builds. faiss's reader is wrapped (a dependency, not our code) to copy over it meanwhile.
    folder, embedder = _saved(tmp_path)
    faiss_file = folder.resolve() / "backend" / "vectors.faiss"
    real_read = faiss.read_index
    os.utime(faiss_file, (1_700_000_000, 1_700_000_000))  # written long ago: the copy's time differs, however fast

    def read_then_copy_over(*args: Any) -> Any:
        index = real_read(*args)
        faiss_file.write_bytes(faiss_file.read_bytes()[:-8] + b"\x00" * 8)  # in place: the same inode, other bytes
        return index

    monkeypatch.setattr(faiss, "read_index", read_then_copy_over)
    with pytest.raises(IndexFormatError) as caught:
        ToolIndex.load(folder, embedder=embedder, cache=False)
    message = str(caught.value)
    assert "vectors.faiss changed on disk while it was read" in message and "open the index again" in message


@pytest.mark.parametrize("backend", ["vector", "hybrid"])
def test_an_index_under_a_path_that_is_not_utf8_saves_and_loads(tmp_path: Path, backend: str) -> None:
    # Before: faiss takes a path only as UTF-8 text: "Wrong number or type of arguments for overloaded function
    # 'write_index'" (a TypeError from its bindings) at save
    folder = tmp_path / os.fsdecode(b"home-\xff") / "ix"  # e.g. a Latin-1 user name on a UTF-8 system
    embedder = CallableEmbedder(hashing_vectors, "hash-64", 64)
    tools = [Tool(f"tool_{i}", f"does thing number {i} with widget {i % 7}") for i in range(20)]
    ToolIndex.build(tools, backend=backend, embedder=embedder, cache=False).save(folder)
    assert ToolIndex.load(folder, embedder=embedder, cache=False).search("does thing number 7", 1).names == ["tool_7"]
