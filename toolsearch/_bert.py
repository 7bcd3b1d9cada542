"""A BERT sentence encoder in plain numpy: safetensors weights, `tokenizers` tokenizer, mean pooling.

This runs sentence-transformers models of the plain "BERT + mean pooling (+ normalise)" shape,
such as all-MiniLM-L6-v2, without torch: the same arithmetic in float32, so the vectors match
sentence-transformers' to about 1e-6 (tests/test_embedder_parity.py checks it).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._errors import BackendError, missing_dependency

__all__ = ["BertEncoder", "load_encoder"]

# Texts are run in batches of about this many tokens (padded): big enough for efficient matrix
# products, small enough that a batch's activations stay in the CPU cache's neighbourhood.
_BATCH_TOKENS = 4096
_MAX_BATCH = 64


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
        tensors = load_file(str(folder / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in tensors else ""

        def get(name: str) -> np.ndarray:
            return np.ascontiguousarray(tensors[prefix + name], dtype=np.float32)

        self.word = get("embeddings.word_embeddings.weight")
        self.position = get("embeddings.position_embeddings.weight")[: self.max_length]
        self.token_type0 = get("embeddings.token_type_embeddings.weight")[0]
        self.emb_ln_g = get("embeddings.LayerNorm.weight")
        self.emb_ln_b = get("embeddings.LayerNorm.bias")
        scale = np.float32(1.0 / math.sqrt(self.hidden // self.heads))
        self.layers: list[_Layer] = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."

            def t(name: str, p: str = p) -> np.ndarray:
                return get(p + name)  # (out, in), as stored: see _linear

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
                    ),
                    out_w=t("attention.output.dense.weight"),
                    out_b=get(p + "attention.output.dense.bias"),
                    ln1_g=get(p + "attention.output.LayerNorm.weight"),
                    ln1_b=get(p + "attention.output.LayerNorm.bias"),
                    up_w=t("intermediate.dense.weight"),
                    up_b=get(p + "intermediate.dense.bias"),
                    down_w=t("output.dense.weight"),
                    down_b=get(p + "output.dense.bias"),
                    ln2_g=get(p + "output.LayerNorm.weight"),
                    ln2_b=get(p + "output.LayerNorm.bias"),
                )
            )
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        # The shipped tokenizer.json pads and truncates to 128; sentence-transformers truncates to
        # the model's max_seq_length and pads to the longest text of a batch, and so do we.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_length)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        # sentence-transformers strips each text before tokenising.
        return [e.ids for e in self.tokenizer.encode_batch([t.strip() for t in texts], add_special_tokens=True)]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Mean-pooled, L2-normalised float32 rows, one per text, in the order given."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        ids = self.token_ids(texts)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
        with _blas_threads(1) if sum(map(len, ids)) <= _FEW_TOKENS else contextlib.nullcontext():
            start = 0
            while start < len(order):
                longest = len(ids[order[start]])
                size = max(1, min(_MAX_BATCH, _BATCH_TOKENS // longest))
                batch = order[start : start + size]
                out[batch] = self._forward([ids[i] for i in batch])
                start += size
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        out /= norms
        return out

    def _forward(self, ids: list[list[int]]) -> np.ndarray:
        """Mean-pooled (unnormalised) last hidden states of one padded batch."""
        batch, length = len(ids), max(len(x) for x in ids)
        tokens = np.zeros((batch, length), dtype=np.int64)
        mask = np.zeros((batch, length), dtype=np.float32)
        for row, seq in enumerate(ids):
            tokens[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1.0
        x = self.word[tokens]
        x += self.position[:length]
        x += self.token_type0
        x = x.reshape(batch * length, self.hidden)
        _layer_norm(x, self.emb_ln_g, self.emb_ln_b, self.eps)
        # Padded keys get a large negative score (as transformers does); none when nothing is padded.
        bias = None if mask.all() else ((1.0 - mask) * np.float32(-1e30))[:, None, None, :]
        heads, size = self.heads, self.hidden // self.heads
        for layer in self.layers:
            qkv = _linear(x, layer.qkv_w)
            qkv += layer.qkv_b
            # Contiguous per-head blocks: numpy's stacked matmul uses BLAS only on contiguous ones.
            qkv = np.ascontiguousarray(qkv.reshape(batch, length, 3, heads, size).transpose(2, 0, 3, 1, 4))
            scores = qkv[0] @ qkv[1].transpose(0, 1, 3, 2)  # (batch, heads, length, length)
            if bias is not None:
                scores += bias
            _softmax(scores)
            context = (scores @ qkv[2]).transpose(0, 2, 1, 3).reshape(batch * length, self.hidden)
            attended = _linear(context, layer.out_w)
            attended += layer.out_b
            attended += x
            _layer_norm(attended, layer.ln1_g, layer.ln1_b, self.eps)
            inner = _linear(attended, layer.up_w)
            inner += layer.up_b
            _gelu(inner)
            x = _linear(inner, layer.down_w)
            x += layer.down_b
            x += attended
            _layer_norm(x, layer.ln2_g, layer.ln2_b, self.eps)
        states = x.reshape(batch, length, self.hidden)
        summed = np.einsum("bl,blh->bh", mask, states)
        pooled: np.ndarray = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        return pooled


# Below this many rows, OpenBLAS multiplies W @ x.T faster than x @ W.T (1.7x for a 12-token query,
# the same from a few hundred rows on): its packing favours the small operand on the right.
_FEW_ROWS = 64


def _linear(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """x @ weight.T for weight stored (out, in), as a C-contiguous (rows, out) array."""
    if x.shape[0] <= _FEW_ROWS:
        return np.ascontiguousarray((weight @ x.T).T)
    out: np.ndarray = x @ weight.T
    return out


def _layer_norm(x: np.ndarray, gain: np.ndarray, bias: np.ndarray, eps: float) -> None:
    """In place over the last axis."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)[:, None]
    var *= np.float32(1.0 / x.shape[-1])
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


_GELU_ROWS = 128


def _gelu(x: np.ndarray) -> None:
    """x * (1 + erf(x / sqrt 2)) / 2, in place, a block of rows at a time (its ~20 passes then
    stay in the CPU cache instead of streaming the whole activation matrix each time). numpy's
    element-wise loops use one core and release the GIL: blocks are shared out to a thread per
    core, as torch's element-wise kernels are; matrix products are already threaded by BLAS."""
    blocks = [x[start : start + _GELU_ROWS] for start in range(0, x.shape[0], _GELU_ROWS)]
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
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        if cores < 2:
            return None
        with _LOCK:
            if _POOL is None:
                _POOL = ThreadPoolExecutor(max_workers=min(cores, 8), thread_name_prefix="toolsearch-gelu")
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


# Queries (a few short texts) run on one BLAS thread: OpenBLAS's thread team costs more than it
# saves on such small products, and far more when processes compete for the cores (a 12-token
# query: 1.6 ms per product on one thread, 29 ms on two, on a busy 2-core machine).
_FEW_TOKENS = 512
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
_ENCODERS: dict[tuple[str, int], BertEncoder] = {}
_LOCK = threading.Lock()


def load_encoder(folder: Path, max_length: int) -> BertEncoder:
    """One encoder per model folder and process (loading reads ~90 MB of weights)."""
    key = (str(folder), max_length)
    encoder = _ENCODERS.get(key)
    if encoder is None:
        with _LOCK:
            encoder = _ENCODERS.get(key)
            if encoder is None:
                try:
                    encoder = BertEncoder(folder, max_length)
                except (OSError, KeyError, ValueError) as exc:
                    raise BackendError(
                        f"cannot load the embedding model in {folder} ({type(exc).__name__}: {exc}); "
                        "reinstall it with: toolsearch model install --force"
                    ) from None
                _ENCODERS[key] = encoder
    return encoder

