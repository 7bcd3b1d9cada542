"""Dense-vector backend: tool embeddings searched with faiss (exact when small, HNSW, then IVF, when large)."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import threading
import weakref
from collections import OrderedDict
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import BackendError, IndexFormatError, ToolSearchError, missing_dependency, named_error
from ..clauses import query_clauses, request_parts
from ..embeddings import (
    DEFAULT_MODEL_ID,
    Embedder,
    EmbeddingCache,
    QueryCache,
    ToolsEmbedder,
    _canonical_model,
    embed_queries,
    embed_texts,
    graphs_follow,
    model_option,
    resolve_embedder,
    shared_cache,
)
from ..entities import send_request
from ..model_file import CARD_FILE, CARRIED_DIR, SHIPPED, check_model_folder
from ..query_adapter import adapt, adapted_models, adapter_for
from ..results import Hit, Ranking
from ..scratch import Scratch, new_scratch
from ..stored_tools import tool_names
from ..text import embedding_text
from ..tools import Tool
from ._base import TIE_DEPTH, through_ties

try:
    import faiss
except ImportError:  # pragma: no cover - exercised only without the extra
    raise missing_dependency("faiss-cpu", "vector") from None

__all__ = [
    "OPTIONS", "VectorBackend", "create", "load", "query_clauses", "DEFAULT_HNSW_THRESHOLD", "DEFAULT_IVF_THRESHOLD"
]

FORMAT_VERSION = 1
INDEX_FILE = "vectors.faiss"
META_FILE = "vector.json"
# Exact search over 20k x 384 floats is still a few milliseconds; past that HNSW pays off.
DEFAULT_HNSW_THRESHOLD = 20_000
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 200
HNSW_EF_SEARCH = 128
# Past this many tools an inverted-file index (IVF) replaces HNSW: an HNSW graph over a million
# 384-d vectors takes tens of minutes to build on 2 cores, IVF (k-means on a sample, then one
# assignment per vector) about two, and a query reads only `nprobe` of its ~2*sqrt(n) lists
# (latency, and recall against exact search: benchmarks/results/scale_million.md).
DEFAULT_IVF_THRESHOLD = 200_000
IVF_NPROBE = 48
_IVF_TRAIN_PER_LIST = 40  # k-means sample: faiss asks for 39 points per centroid at least
# faiss trains with 25 k-means rounds by default; 10 cost 2.5x less time, and the recall this
# gives is measured against exact search in the million-tool benchmark.
_IVF_TRAIN_ITERATIONS = 10
# An allowed subset up to this size is scored exactly from its own vectors (faster and exact
# even on HNSW, where a small filter starves the graph walk).
SUBSET_EXACT_MAX = 4_096
_SUBSET_CACHE = 8
# HNSW cannot delete; removed ids are tombstoned and the graph rebuilt past this share.
_TOMBSTONE_REBUILD = 0.25
# A tool scores its best lifted clause match (`_clause_scores`); toolsearch.clauses says why clauses.
CLAUSE_LIFT = 0.5


class VectorBackend:
    """Tools embedded with `embedder`; inner product of normalised vectors = cosine similarity.

    `query_adapter`: True maps the query vectors by the shipped matrix (toolsearch.query_adapter: fitted for
    all-MiniLM-L6-v2, model='minilm'; a new backend of another model is refused), False (default) searches with the raw
    query vectors, a square matrix uses that one (experiments; it is not recorded by `describe`).
    Off by default: on data sets it was not fitted on it moves nDCG@10 by +0.000 to +0.006 only
    (benchmarks/results/ranking_loso.md), too little to change every index's ranking for.
    """

    name = "vector"

    def __init__(
        self,
        embedder: Embedder,
        *,
        hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD,
        ef_search: int = HNSW_EF_SEARCH,
        ivf_threshold: int = DEFAULT_IVF_THRESHOLD,
        nprobe: int = IVF_NPROBE,
        cache: EmbeddingCache | bool | str | Path = True,
        progress: bool | None = None,
        query_adapter: bool | np.ndarray = False,
    ) -> None:
        if isinstance(hnsw_threshold, bool) or not isinstance(hnsw_threshold, int) or hnsw_threshold < 1:
            raise BackendError(f"hnsw_threshold must be a positive integer, got {hnsw_threshold!r}")
        for option, value in (("ef_search", ef_search), ("ivf_threshold", ivf_threshold), ("nprobe", nprobe)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BackendError(f"{option} must be a positive integer, got {value!r}")
        self.embedder = embedder
        # The shipped query-side map of the default model (toolsearch.query_adapter), a matrix of
        # one's own (experiments: not part of describe()), or none.
        if isinstance(query_adapter, np.ndarray):
            d = query_adapter.shape[0] if query_adapter.ndim == 2 else -1
            if query_adapter.shape != (d, d):
                raise BackendError(f"query_adapter must be a square matrix, got shape {query_adapter.shape}")
            self.adapter: np.ndarray | None = np.ascontiguousarray(query_adapter, dtype=np.float32)
        elif isinstance(query_adapter, bool):
            self.adapter = adapter_for(embedder.model_id) if query_adapter else None
        else:
            raise BackendError(f"query_adapter must be True, False or a square matrix, got {query_adapter!r}")
        self.query_adapter = query_adapter if isinstance(query_adapter, bool) else True
        self.hnsw_threshold = hnsw_threshold
        self.ef_search = ef_search
        self.ivf_threshold = ivf_threshold
        self.nprobe = nprobe
        self.progress = progress
        if cache is True:
            self.cache: EmbeddingCache | None = shared_cache()
        elif cache is False or cache is None:
            self.cache = None
        elif isinstance(cache, EmbeddingCache):
            self.cache = cache
        else:
            self.cache = shared_cache(cache)
        self._index: Any = None  # faiss IndexIDMap2 over IndexFlatIP, IndexHNSWFlat or IndexIVFFlat
        self._ids: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self._dead: set[int] = set()  # tombstoned ids (HNSW and IVF)
        self._next_id = 0
        self._lock = threading.RLock()
        self._queries = QueryCache()
        self._subsets: OrderedDict[frozenset[str], tuple[np.ndarray, np.ndarray]] = OrderedDict()

    # --- introspection ----------------------------------------------------------------------

    @property
    def model_id(self) -> str:
        return self.embedder.model_id

    @property
    def kind(self) -> str:
        """"flat" (exact), "hnsw" or "ivf" (both approximate)."""
        return _kind(self._index)

    def __len__(self) -> int:
        return len(self._ids)

    def forget_queries(self) -> None:
        """Drop the embeddings of past queries (the next search of any query embeds it afresh)."""
        self._queries.clear()

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model_id}
        if self.hnsw_threshold != DEFAULT_HNSW_THRESHOLD:
            out["hnsw_threshold"] = self.hnsw_threshold
        if self.ivf_threshold != DEFAULT_IVF_THRESHOLD:
            out["ivf_threshold"] = self.ivf_threshold
        if self.nprobe != IVF_NPROBE:
            out["nprobe"] = self.nprobe
        if self.query_adapter:
            out["query_adapter"] = True
        return out

    # --- updates ----------------------------------------------------------------------------

    def add(self, tools: Sequence[Tool]) -> None:
        if not tools:
            return
        names, vectors = self.embed_tools(tools)
        self._add_vectors(names, vectors, what=f"embedder {self.model_id!r} returned")

    def embed_tools(self, tools: Sequence[Tool]) -> tuple[list[str], np.ndarray]:
        """The names of `tools` (the last definition of a name wins) and their vectors, as `add` inserts them;
        the index is not changed (hybrid embeds first, changes bm25, then inserts them with `add_vectors`)."""
        latest = {t.name: t for t in tools}
        names = list(latest)
        texts = [embedding_text(latest[n]) for n in names]
        return names, embed_texts(self.embedder, texts, cache=self.cache, progress=self.progress)

    def add_vectors(self, names: Sequence[str], vectors: np.ndarray) -> None:
        """Insert or replace tools by name with vectors computed elsewhere (one unit-norm row per name).

        For callers that embed outside the backend (a batch job, another service) and for
        benchmarks that measure search alone; the rows must come from this backend's model.
        """
        if len(set(names)) != len(names):
            raise BackendError("add_vectors: a name appears more than once; give each vector its own tool name")
        matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(names):
            raise BackendError(
                f"add_vectors: expected one row per name ({len(names)} x dimension), got shape {matrix.shape}"
            )
        if names:
            self._add_vectors(list(names), matrix, what="add_vectors was given")

    def _add_vectors(self, names: list[str], vectors: np.ndarray, *, what: str) -> None:
        with self._lock:
            if self._index is None or (self._index.ntotal == 0 and len(names) > self.ivf_threshold):
                # A large first batch goes straight into IVF: no flat copy of a million vectors first.
                big = len(names) > self.ivf_threshold
                self._index = _ivf(vectors, self.nprobe) if big else _flat(vectors.shape[1])
            elif vectors.shape[1] != self._index.d:
                got, want = vectors.shape[1], self._index.d
                raise BackendError(f"{what} {got}-d vectors; the index holds {want}-d")
            self._remove_locked([n for n in names if n in self._ids])
            ids = np.arange(self._next_id, self._next_id + len(names), dtype=np.int64)
            self._next_id += len(names)
            for name, i in zip(names, ids.tolist(), strict=True):
                self._ids[name] = i
                self._names[i] = name
            self._index.add_with_ids(vectors, ids)
            wanted = self._wanted_kind(len(self._ids))
            if _RANK[_kind(self._index)] < _RANK[wanted]:
                self._rebuild(kind=wanted)
            self._subsets.clear()

    def _wanted_kind(self, count: int) -> str:
        return "ivf" if count > self.ivf_threshold else "hnsw" if count > self.hnsw_threshold else "flat"

    def remove(self, names: Collection[str]) -> None:
        with self._lock:
            self._remove_locked([n for n in names if n in self._ids])
            self._subsets.clear()

    def _remove_locked(self, names: list[str]) -> None:
        if not names:
            return
        ids = np.array([self._ids.pop(n) for n in names], dtype=np.int64)
        for i in ids.tolist():
            del self._names[i]
        if _kind(self._index) != "flat":
            self._dead.update(ids.tolist())
            if len(self._dead) > _TOMBSTONE_REBUILD * max(len(self._ids), 1):
                self._rebuild(kind=self._wanted_kind(len(self._ids)))
        else:
            self._index.remove_ids(ids)

    def _rebuild(self, *, kind: str) -> None:
        """Re-create the faiss index from the live vectors (kind switch or tombstone purge)."""
        ids = np.fromiter(self._names, dtype=np.int64, count=len(self._names))
        vectors = self._index.reconstruct_batch(ids) if len(ids) else np.zeros((0, self._index.d), np.float32)
        if kind == "ivf" and len(ids):
            index = _ivf(vectors, self.nprobe)
        else:
            index = _hnsw(self._index.d) if kind == "hnsw" else _flat(self._index.d)
        if len(ids):
            index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), ids)
        self._index = index
        self._dead.clear()

    # --- search -----------------------------------------------------------------------------

    def warm(self) -> None:
        """Load the embedding model now (it otherwise loads on the first search or add)."""
        with graphs_follow(self.cache):  # the embedding cache turned off keeps the query graph off disk too
            embed_queries(self.embedder, ["warm up"])

    def tool_matrix(self, names: Sequence[str]) -> np.ndarray:
        """The stored unit vectors of the named tools, one row each, in the order given."""
        with self._lock:
            missing = [n for n in names if n not in self._ids]
            if missing:
                raise BackendError(f"tool_matrix: {len(missing)} name(s) not in the index, e.g. {missing[0]!r}")
            if not names:
                return np.zeros((0, self.embedder.dimension), dtype=np.float32)
            ids = np.array([self._ids[n] for n in names], dtype=np.int64)
            return np.ascontiguousarray(self._index.reconstruct_batch(ids), dtype=np.float32)

    def query_vectors(self, query: str) -> np.ndarray:
        """The (cached) normalised embeddings of a query and of its clauses, one row each (adapted)."""
        # A message's body says nothing about which tool sends it (toolsearch.entities): embedded without it.
        with graphs_follow(self.cache):
            rows = self._queries.get(self.embedder, send_request(query) or query, request_parts)
        return rows if self.adapter is None else adapt(rows, self.adapter)

    def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
        best = self.candidates(query, k, allowed)
        return Ranking([Hit(n, s) for n, s in sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:k]])

    def candidates(
        self, query: str, n: int, allowed: frozenset[str] | None = None, include: Collection[str] = ()
    ) -> dict[str, float]:
        """Scores of the top `n` tools within `allowed`, plus of every known name in `include`.

        A single request scores by cosine similarity. A multi-part request scores each tool by
        its best clause, each clause lifted halfway towards the best clause's top similarity, so
        a part phrased unlike any tool still brings its tools up (Seal-Tools nDCG@10 +0.03 over
        a plain maximum, the others unchanged).
        """
        if not self._ids or n < 1:
            return {}
        return self.vector_candidates(self.query_vectors(query), n, allowed, include)

    def search_vectors(self, vectors: np.ndarray, k: int, allowed: frozenset[str] | None = None) -> Ranking:
        """`search` for query rows as `query_vectors` returns them (a request's row, then its clauses' rows)."""
        rows = np.ascontiguousarray(np.atleast_2d(vectors), dtype=np.float32)
        if self._index is not None and rows.shape[1] != self._index.d:
            got, want = rows.shape[1], self._index.d
            raise BackendError(f"search_vectors: got {got}-d query vectors; the index holds {want}-d")
        best = self.vector_candidates(rows, k, allowed) if self._ids and k >= 1 else {}
        return Ranking([Hit(n, s) for n, s in sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:k]])

    def vector_candidates(
        self, vectors: np.ndarray, n: int, allowed: frozenset[str] | None = None, include: Collection[str] = ()
    ) -> dict[str, float]:
        """`candidates` for query rows already embedded."""
        with self._lock:
            extra = [self._ids[m] for m in include if m in self._ids and (allowed is None or m in allowed)]
            if allowed is not None and (len(allowed) <= SUBSET_EXACT_MAX or len(allowed) * 4 <= len(self._ids)):
                ids, sims, tops = self._subset_sims(vectors, allowed)
                if not len(ids):
                    return {}
                best = _clause_scores(sims, tops)
                top = _top_k(best, n)
                scored = dict(zip(ids[top].tolist(), best[top].tolist(), strict=True))
            else:
                found, tops = self._index_hits(vectors, n, allowed)
                if found is None:
                    return {}
                scored = {}
                extra.extend(found)
            extra = [i for i in dict.fromkeys(extra) if i not in scored]
            if extra:
                ids = np.array(extra, dtype=np.int64)
                sims = _similarities(self._index.reconstruct_batch(ids), vectors)
                scored.update(zip(extra, _clause_scores(sims, tops).tolist(), strict=True))
            return {self._names[i]: float(s) for i, s in scored.items()}

    def _index_hits(
        self, vectors: np.ndarray, n: int, allowed: frozenset[str] | None
    ) -> tuple[list[int] | None, np.ndarray]:
        """faiss search of every query row: the union of hit ids, and each row's top similarity."""
        selector: Any = None
        if allowed is not None:
            ids = np.array([self._ids[a] for a in allowed if a in self._ids], dtype=np.int64)
            if not len(ids):
                return None, np.zeros(0)
            selector = faiss.IDSelectorBatch(ids)
        elif self._dead:
            selector = faiss.IDSelectorNot(faiss.IDSelectorBatch(np.fromiter(self._dead, dtype=np.int64)))
        n_eff = min(n, len(self._ids))
        # Read on past the n-th while a row's last hit ties with it (two copies of one tool embed alike; a tie here
        # is a group of tools with one text, a few copies of a tool as a rule): see TIE_DEPTH.
        most = min(len(self._ids), max(n_eff, TIE_DEPTH))

        def tied(searched: tuple[np.ndarray, np.ndarray], _limit: int) -> bool:
            sims, found = searched  # (faiss pads a row past its last hit with id -1)
            return bool(((found[:, -1] >= 0) & (sims[:, -1] == sims[:, n_eff - 1])).any())

        sims, found = through_ties(lambda limit: self._faiss_search(vectors, limit, selector), n_eff, most, tied)
        # Each row's top n_eff, and the hits after them that tie with its n-th (faiss orders ties by position).
        keep = np.zeros(found.shape, dtype=bool)
        keep[:, :n_eff] = True
        keep[:, n_eff:] = sims[:, n_eff:] == sims[:, n_eff - 1 : n_eff]
        hits = [i for i in dict.fromkeys(found[keep].tolist()) if i in self._names]
        return hits, sims[:, 0]

    def _faiss_search(self, vectors: np.ndarray, limit: int, selector: Any) -> tuple[np.ndarray, np.ndarray]:
        """faiss's top `limit` (similarities, ids) of each query row, only among `selector`'s ids when given."""
        index = self._index
        kind = _kind(index)
        if kind == "hnsw":
            params: Any = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
            params.efSearch = max(self.ef_search, 2 * limit)
        elif kind == "ivf":
            params = faiss.SearchParametersIVF()  # type: ignore[attr-defined]
            params.nprobe = self.nprobe
        else:
            params = faiss.SearchParameters() if selector is not None else None
        if selector is not None:
            params.sel = selector
        with _one_omp_thread():
            sims, found = index.search(vectors, limit, params=params)
        return sims, found

    def _subset_sims(self, vectors: np.ndarray, allowed: frozenset[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Exact similarities of every allowed tool to every query row (small subsets)."""
        entry = self._subsets.get(allowed)
        if entry is None:
            ids = np.array(sorted(self._ids[a] for a in allowed if a in self._ids), dtype=np.int64)
            matrix = self._index.reconstruct_batch(ids) if len(ids) else np.zeros((0, vectors.shape[1]), np.float32)
            entry = (ids, np.ascontiguousarray(matrix, dtype=np.float32))
            self._subsets[allowed] = entry  # sessions search the same allowed set over and over
            while len(self._subsets) > _SUBSET_CACHE:
                self._subsets.popitem(last=False)
        else:
            self._subsets.move_to_end(allowed)
        ids, matrix = entry
        sims = _similarities(matrix, vectors)
        tops = sims.max(axis=0) if len(ids) else np.zeros(len(vectors), np.float32)
        return ids, sims, tops

    # --- persistence ------------------------------------------------------------------------

    def save(self, folder: Path) -> None:
        with self._lock:
            index = self._index if self._index is not None else _flat(self.embedder.dimension)
            if self._dead:  # never persist tombstones
                self._rebuild(kind=_kind(index))
                index = self._index
            _write_faiss(index, folder / INDEX_FILE)
            ids = list(self._names)
            meta = {
                "format": FORMAT_VERSION,
                "model": self.model_id,
                "dimension": int(index.d),
                "kind": self.kind,
                "count": len(ids),
                "ids": ids,
                "names": [self._names[i] for i in ids],
            }
        (folder / META_FILE).write_text(json.dumps(meta, ensure_ascii=False))
        own = _own_model(self.embedder)
        if own is not None:
            _check_own_model(self.embedder, warm=False)  # the caller's folder may have changed since it was loaded
            # A private copy (_saved_model) never changes, so the new generation may share its files; a folder
            # the caller named may change after this save, so it is copied.
            private = str(own) in _PRIVATE_COPIES
            shutil.copytree(own, folder / CARRIED_DIR, copy_function=_link_or_copy if private else shutil.copy2)

    @classmethod
    def open(cls, folder: Path, tools: Sequence[Tool], embedder: Embedder, **options: Any) -> VectorBackend:
        """Read a saved index into memory (`_read_faiss`); never re-embeds. Checks model and tool names."""
        try:
            meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise IndexFormatError(f"{folder}: {META_FILE} is missing; rebuild the index") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise IndexFormatError(f"{folder}/{META_FILE} is corrupt ({exc}); rebuild the index") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_VERSION:
            raise IndexFormatError(f"{folder}: unknown vector index format {meta.get('format')!r}; rebuild the index")
        stored = meta.get("model")
        if stored != embedder.model_id:
            raise IndexFormatError(
                f"{folder} was built with embedding model {stored!r} but {embedder.model_id!r} was requested; "
                f"load it with {model_option(str(stored))} or rebuild the index with the new model"
            )
        ids, names = meta.get("ids"), meta.get("names")
        if not isinstance(ids, list) or not isinstance(names, list) or len(ids) != len(names):
            raise IndexFormatError(f"{folder}/{META_FILE} has no valid id map; rebuild the index")
        expected = set(tool_names(tools))
        if set(names) != expected:
            missing = sorted(expected - set(names))[:3]
            extra = sorted(set(names) - expected)[:3]
            raise IndexFormatError(
                f"{folder}: the vector index does not match the tools (missing {missing}, unexpected {extra}); "
                "rebuild the index"
            )
        index = _read_faiss(folder / INDEX_FILE)
        if index.ntotal != len(ids) or index.d != meta.get("dimension"):
            raise IndexFormatError(f"{folder}: {INDEX_FILE} does not match {META_FILE}; rebuild the index")
        backend = cls(embedder, **options)
        backend._index = index
        backend._ids = dict(zip(names, ids, strict=True))
        backend._names = dict(zip(ids, names, strict=True))
        backend._next_id = max(ids, default=-1) + 1
        return backend


def _read_faiss(path: Path) -> Any:
    """The faiss index saved at `path`, read whole into memory.

    Not memory-mapped (it was, with IO_FLAG_MMAP_IFC): a folder is updated by copying a newer build over it in place
    (`cp -rL new/. deployed/`, `rsync --inplace`), which rewrites this same file under a process serving it. A map
    then read the newer build's vectors against the loaded id map (other tools, other scores, said by nothing), or,
    the file cut shorter, killed the process with SIGBUS. Read into memory, a loaded index never reads the file again.

    Why not a private copy, mapped: mmap's gains are pages shared by every process serving the index, read only
    where a search touches them (an IVF search reads `nprobe` of its lists), and dropped by the kernel under
    pressure. A copy of one's own keeps little of that: on a tmpfs $TMPDIR it is memory that can only be swapped, on
    disk a second write of the whole file at every load (1.6 GB at a million tools, benchmarks/results/
    scale_million.md) that a killed process leaves behind, and a reflink shares the disk's blocks but not their
    cached pages (the page cache is per file), so processes still share nothing. Reading costs each process memory
    of the file's size (what a mapped index cost too once it took an update: faiss copied it whole) and one pass
    over bytes the load's digest check has just read, which come from the page cache, not the disk.

    The load checked the file's digest just before this; a copy landing during the read would leave a mix of two
    builds, so the file is stat-ed around the read and a change is refused (not one between the check and the read).
    """
    before = _file_identity(path)
    try:
        with path.open("rb") as handle:  # through Python's file: a folder whose path is not UTF-8 (see _write_faiss)
            index = faiss.read_index(faiss.PyCallbackIOReader(handle.read))  # type: ignore[attr-defined]
    except RuntimeError as exc:
        problem: str | None = f"cannot be read ({exc}); rebuild the index"
        index = None
    else:
        problem = None
    if _file_identity(path) != before:  # (a file missing throughout is the reader's error, below)
        raise IndexFormatError(
            f"{path} changed on disk while it was read (another build copied over the index folder?); open the "
            "index again once the copy is done"
        )
    if problem is not None:
        raise IndexFormatError(f"{path} {problem}")
    return index


def _write_faiss(index: Any, path: Path) -> None:
    """`faiss.write_index` through Python's file: faiss takes a path only as UTF-8 text, so an index folder whose
    path is not (bytes a POSIX file name may hold) was a TypeError from its bindings."""
    with path.open("wb") as handle:
        faiss.write_index(index, faiss.PyCallbackIOWriter(handle.write))  # type: ignore[attr-defined]


def _file_identity(path: Path) -> tuple[int, ...] | None:
    """The file's `file_version`: what changes when it is replaced or rewritten (None: no file)."""
    from .._bert import file_version  # (as embeddings does: a vector backend over an embedder of its own needs no BERT)

    try:
        return file_version(path)
    except OSError:
        return None


def _similarities(matrix: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Each row of `matrix` against each query row, without BLAS. A search's products are small (a request's
    rows against 100 candidates, or an allowed subset of at most SUBSET_EXACT_MAX tools), and numpy's OpenBLAS
    hands one of 384 x 1,000 or more to its thread team, whose threads then spin for milliseconds: that took the
    second core from the next query's embedding and from other requests. Measured at 4,000 tools, hybrid, one
    process, blocks of 10 queries alternating, two runs: short requests p50 7.0-7.7 -> 6.7 ms wall, CPU mean
    14.5-15.3 -> 12.7-12.8 ms; 300-600-character ones 13.9-14.1 -> 13.5-13.9 ms wall. einsum's loop costs 4 us
    more than BLAS at 100 rows, 0.15 ms at 4,096."""
    return np.asarray(np.einsum("ij,kj->ik", matrix, vectors))


def _clause_scores(sims: np.ndarray, tops: np.ndarray) -> np.ndarray:
    """Per tool (row of `sims`, one column per query row): the best lifted clause similarity."""
    if sims.shape[1] == 1:
        return np.asarray(sims[:, 0])
    lift = CLAUSE_LIFT * (tops.max() - tops)
    return np.asarray((sims + lift).max(axis=1))


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """The positions of the top `k` scores, best first, and of those tying with the k-th (up to TIE_DEPTH or k in
    all): the caller breaks ties by name before its cut, whatever their positions."""
    if k >= len(scores):
        return np.argsort(-scores, kind="stable")
    kth = scores[np.argpartition(-scores, k - 1)[k - 1]]
    above = np.flatnonzero(scores > kth)
    tied = np.flatnonzero(scores == kth)[: max(k, TIE_DEPTH) - len(above)]
    part = np.concatenate([above, tied])
    return part[np.argsort(-scores[part], kind="stable")]


@contextlib.contextmanager
def _one_omp_thread() -> Iterator[None]:
    """Search a few query rows on the calling thread: faiss's OpenMP team costs more than it
    saves for them, and far more when processes compete for cores (13 ms against 0.04 ms for
    one query over 1,700 tools on a busy 2-core machine). The setting is per calling thread."""
    before = faiss.omp_get_max_threads()
    if before > 1:
        faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        if before > 1:
            faiss.omp_set_num_threads(before)


def _flat(d: int) -> Any:
    return faiss.IndexIDMap2(faiss.IndexFlatIP(d))


def _hnsw(d: int) -> Any:
    inner = faiss.IndexHNSWFlat(d, HNSW_M, faiss.METRIC_INNER_PRODUCT)
    inner.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    inner.hnsw.efSearch = HNSW_EF_SEARCH
    return faiss.IndexIDMap2(inner)


def _ivf(sample: np.ndarray, nprobe: int) -> Any:
    """An IVF index of about 2 * sqrt(n) lists, k-means trained on a seeded sample of `sample`."""
    n, d = sample.shape
    nlist = max(1, min(n // _IVF_TRAIN_PER_LIST, 1 << round(np.log2(2 * np.sqrt(n)))))
    inner = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
    inner.nprobe = nprobe
    inner.cp.seed = 1234  # the same vectors give the same lists
    inner.cp.niter = _IVF_TRAIN_ITERATIONS
    take = min(n, nlist * _IVF_TRAIN_PER_LIST)
    rows = np.sort(np.random.default_rng(0).choice(n, size=take, replace=False)) if take < n else slice(None)
    inner.train(np.ascontiguousarray(sample[rows], dtype=np.float32))
    inner.make_direct_map()  # reconstruct() by id: subsets, includes and rebuilds read stored vectors
    return faiss.IndexIDMap2(inner)


_RANK = {"flat": 0, "hnsw": 1, "ivf": 2}


def _kind(index: Any) -> str:
    if index is None:
        return "flat"
    inner = faiss.downcast_index(index.index)
    return "hnsw" if isinstance(inner, faiss.IndexHNSW) else "ivf" if isinstance(inner, faiss.IndexIVF) else "flat"


def _is_hnsw(index: Any) -> bool:
    return _kind(index) == "hnsw"


# The one list of vector options, read off the constructor so a new keyword is accepted everywhere
# (here and by hybrid, which passes these through) without a second list to keep in step.
OPTIONS: tuple[str, ...] = (
    "model",
    "embedder",
    *(p.name for p in inspect.signature(VectorBackend.__init__).parameters.values() if p.kind is p.KEYWORD_ONLY),
)


def _split_options(options: dict[str, Any]) -> tuple[str | None, Embedder | None, dict[str, Any]]:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise BackendError(f"unknown vector backend option(s) {', '.join(unknown)}; use {', '.join(OPTIONS)}")
    model = options.pop("model", None)
    embedder = options.pop("embedder", None)
    return model, embedder, options


def create(**options: Any) -> VectorBackend:
    """An empty vector backend; the model loads only when something is embedded, except a request encoder of the
    caller's (a folder `toolsearch model export` wrote), which is checked and loaded now: an index carries it."""
    model, embedder, rest = _split_options(dict(options))
    chosen = resolve_embedder(model, embedder)
    if rest.get("query_adapter") is True and adapter_for(chosen.model_id) is None:
        raise BackendError(
            f"query_adapter=True: the shipped query adapter is a matrix for {', '.join(adapted_models())} only, "
            f"not {chosen.model_id}; build with model='minilm' to use it, or leave query_adapter off"
        )
    _check_own_model(chosen, warm=True)
    return VectorBackend(chosen, **rest)


def _check_own_model(embedder: Embedder, *, warm: bool) -> None:
    """Refuse a request encoder of the caller's that cannot run (a digest that does not match, a tokenizer that
    cannot be read), naming the caller's folder, before an index is built with it or carries it."""
    own = _own_model(embedder)
    if own is None or str(own) in _PRIVATE_COPIES:  # an index's own copy was checked and loaded when it opened
        return
    check_model_folder(own)
    if not warm:
        return
    try:
        embedder.warm()  # type: ignore[attr-defined]  # a ToolsEmbedder: _own_model says so
    except ToolSearchError:
        raise
    except Exception as exc:  # the tokenizers and safetensors packages raise their own (or bare) exceptions
        said = named_error(exc, " ".join(str(exc).split()))  # on one line, whatever line breaks it holds
        raise BackendError(
            f"the model folder {own} cannot be used: it does not load ({said}); export the model to this folder again "
            "(toolsearch model export INDEX --out DIR) or give another model folder"
        ) from None


def load(folder: Path, tools: Sequence[Tool], **options: Any) -> VectorBackend:
    """Open a saved vector index with the model it records; `model=` or `embedder=`, when given, must match it."""
    model, embedder, rest = _split_options(dict(options))
    if embedder is not None:
        if model is not None and _canonical_model(model) != embedder.model_id:
            raise IndexFormatError(
                f"{folder} was built with embedding model {model!r} but the embedder given is "
                f"{embedder.model_id!r}; pass an embedder for {model!r} or rebuild the index"
            )
        chosen = resolve_embedder(None, embedder)
    elif (Path(folder) / CARRIED_DIR / CARD_FILE).is_file():
        chosen = _saved_model(Path(folder), model)
    else:
        chosen = resolve_embedder(model or _stored_model(Path(folder)) or DEFAULT_MODEL_ID, None)
    return VectorBackend.open(Path(folder), tools, chosen, **rest)


def _own_model(embedder: Embedder) -> Path | None:
    """The folder of a request encoder that does not ship with toolsearch, where `embedder` runs one."""
    if isinstance(embedder, ToolsEmbedder) and embedder.folder != SHIPPED.folder:
        return embedder.folder
    return None


def _saved_model(folder: Path, model: str | None) -> Embedder:
    """The request encoder saved inside the index, run from a private copy and loaded now.

    The generation it is read from goes when the index saves itself under its own name (the store
    then holds the generation it wrote), and the embedder can outlive the index (handed to another
    one); a later save copies the encoder from where it runs, so that must outlive the generation.
    The copy is hard-linked where the file system allows (the files of a generation never change),
    else copied, and goes with the embedder. A later save links its files in turn (23 MB not copied
    per save of a tuned index).
    """
    scratch = new_scratch("model-")
    try:
        shutil.copytree(folder / CARRIED_DIR, scratch.path, copy_function=_link_or_copy, dirs_exist_ok=True)
        embedder = ToolsEmbedder(query_model=scratch.path)
        if model is not None and _canonical_model(model) != embedder.model_id:
            raise IndexFormatError(
                f"{folder} carries its own model {embedder.model_id!r}, but {model!r} was requested; open it "
                "without model= or rebuild the index with that model"
            )
        embedder.warm()
    except BaseException:
        scratch.remove()
        raise
    _PRIVATE_COPIES.add(str(embedder.folder))  # the folder resolved, as _own_model gives it at a save
    weakref.finalize(embedder, _drop_private, str(embedder.folder), scratch)  # also at exit
    return embedder


# The folders _saved_model filled and an embedder runs from: their files are a generation's, which never change.
_PRIVATE_COPIES: set[str] = set()


def _drop_private(folder: str, scratch: Scratch) -> None:
    _PRIVATE_COPIES.discard(folder)
    scratch.remove()


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or one without hard links
        shutil.copy2(source, target)


def _stored_model(folder: Path) -> str | None:
    """The model a saved index records (None when unreadable: `VectorBackend.open` then says what is wrong)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        model = json.loads((folder / META_FILE).read_text(encoding="utf-8")).get("model")
        return model if isinstance(model, str) else None
    return None
