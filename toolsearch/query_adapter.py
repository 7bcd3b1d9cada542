"""A learned linear map of all-MiniLM-L6-v2's query vectors towards the tools that answer them (query side only).

MiniLM embeds a request and a tool description as two sentences; a request that states a goal
("my package never arrived") lands away from the tool text that serves it ("track a shipment by
its tracking number"). A square matrix A, fitted on (request, tool) pairs, moves the query vector
before the cosine: score = normalise(q A) . d. Documents are untouched (indexes and the embedding
cache stay as they are), A starts at the identity and is held near it (an L2 pull towards I), so
what the model already gets right is kept.

The matrix ships in the package (`data/query_adapter_minilm.npy`, float16), made by
`scripts/train_query_adapter.py` from the shared data sets; its leave-one-set-out figures are in
benchmarks/results/ranking_loso.md. It applies to all-MiniLM-L6-v2 (`model="minilm"`) only, which was the default
model when it was fitted; the tools model (the default now) embeds requests with an encoder of its own, and a new
backend that asks for the matrix with it is refused rather than left unmapped.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from importlib import resources

import numpy as np

__all__ = ["ADAPTER_FILE", "adapt", "adapted_models", "adapter_for"]

ADAPTER_FILE = "query_adapter_minilm.npy"
_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def _shipped() -> np.ndarray:
    with resources.files("toolsearch").joinpath("data", ADAPTER_FILE).open("rb") as fh:
        matrix = np.load(fh, allow_pickle=False)
    return np.ascontiguousarray(matrix, dtype=np.float32)


def adapted_models() -> tuple[str, ...]:
    """The ids of the models a matrix ships for (all-MiniLM-L6-v2, `model="minilm"`; not the default tools model)."""
    from .embeddings import DEFAULT_MODEL_ID

    return (DEFAULT_MODEL_ID,)


def adapter_for(model_id: str) -> np.ndarray | None:
    """The shipped matrix for `model_id`'s query vectors, or None when there is none for that model."""
    if model_id not in adapted_models():
        return None
    with _LOCK:
        return _shipped()


def adapt(rows: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Query rows mapped by `matrix` and normalised again (a read-only float32 array)."""
    mapped = np.asarray(rows, dtype=np.float32) @ matrix
    norms = np.linalg.norm(mapped, axis=1, keepdims=True)
    out = np.ascontiguousarray(mapped / np.maximum(norms, 1e-12), dtype=np.float32)
    out.setflags(write=False)
    return out
