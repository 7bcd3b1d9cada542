"""Where toolsearch keeps what it computes once per machine: embeddings and the query graphs built from a model."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_subfolder", "default_cache_dir"]


def default_cache_dir() -> Path:
    """`$TOOLSEARCH_CACHE_DIR`, else `~/.cache/toolsearch/embeddings`: the embedding cache (and `query-graphs/`)."""
    env = os.environ.get("TOOLSEARCH_CACHE_DIR")
    return Path(env).expanduser() if env else _home() / "embeddings"


def cache_subfolder(name: str) -> Path:
    """`$TOOLSEARCH_CACHE_DIR/<name>`, else `~/.cache/toolsearch/<name>`: a folder of its own beside the embedding
    cache's models (the demo's index)."""
    env = os.environ.get("TOOLSEARCH_CACHE_DIR")
    return (Path(env).expanduser() if env else _home()) / name


def _home() -> Path:
    return Path.home() / ".cache" / "toolsearch"
