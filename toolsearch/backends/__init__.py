"""Backend registry: backends are found by name and their modules imported only when used."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import BackendError, MissingDependencyError
from ..tools import Tool
from ._base import Backend

__all__ = ["Backend", "BackendSpec", "register_backend", "get_backend_spec", "backend_names", "default_backend"]


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """How to create, load and check the availability of one backend."""

    name: str
    create: Callable[..., Backend]  # create(**options) -> an empty backend
    load: Callable[..., Backend]  # load(folder, tools, **options) -> a backend with saved state
    available: Callable[[], bool] = lambda: True
    extra: str = ""  # the pip extra that makes it available
    summary: str = ""


_REGISTRY: dict[str, BackendSpec] = {}


def _lazy(module: str, name: str, requires: tuple[str, ...], extra: str, summary: str) -> BackendSpec:
    def create(**options: Any) -> Backend:
        return importlib.import_module(module).create(**options)  # type: ignore[no-any-return]

    def load(folder: Path, tools: Sequence[Tool], **options: Any) -> Backend:
        return importlib.import_module(module).load(folder, tools, **options)  # type: ignore[no-any-return]

    def available() -> bool:
        return all(importlib.util.find_spec(pkg) is not None for pkg in requires)

    return BackendSpec(name, create, load, available, extra, summary)


def register_backend(spec: BackendSpec, *, replace: bool = False) -> None:
    """Make a backend available by name (to `ToolIndex.build`, the CLI and sessions)."""
    if spec.name in _REGISTRY and not replace:
        raise BackendError(f"a backend named {spec.name!r} is already registered; pass replace=True")
    _REGISTRY[spec.name] = spec


# What the default (numpy) embedder needs; sentence-transformers is only for other models.
_VECTOR_PACKAGES = ("faiss", "safetensors", "tokenizers")

for _spec in (
    _lazy("toolsearch.backends.regex", "regex", ("regex",), "", "model-written regular expressions"),
    _lazy("toolsearch.backends.bm25", "bm25", ("tantivy",), "", "tantivy BM25 with Lucene query syntax"),
    _lazy(
        "toolsearch.backends.vector",
        "vector",
        _VECTOR_PACKAGES,
        "vector",
        "dense embeddings searched with faiss",
    ),
    _lazy(
        "toolsearch.backends.hybrid",
        "hybrid",
        ("tantivy", *_VECTOR_PACKAGES),
        "vector",
        "bm25 and vector fused",
    ),
):
    register_backend(_spec)


def backend_names() -> list[str]:
    return list(_REGISTRY)


def default_backend() -> str:
    """The best installed backend: hybrid when the vector extra is present, bm25 otherwise."""
    return "hybrid" if _REGISTRY["hybrid"].available() else "bm25"


def get_backend_spec(name: str) -> BackendSpec:
    """Look a backend up by name; "auto" picks the default."""
    if name == "auto":
        name = default_backend()
    spec = _REGISTRY.get(name)
    if spec is None:
        known = ", ".join(sorted(_REGISTRY))
        raise BackendError(f"unknown backend {name!r}; choose one of: auto, {known}")
    if not spec.available():
        hint = f"pip install 'toolsearch[{spec.extra}]'" if spec.extra else "pip install toolsearch"
        raise MissingDependencyError(f"backend {name!r} needs packages that are not installed; run: {hint}")
    return spec
