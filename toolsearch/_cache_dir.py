"""Where toolsearch keeps what it computes once per machine: embeddings and the query graphs built from a model."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_cache_dir"]


def default_cache_dir() -> Path:
    """`$TOOLSEARCH_CACHE_DIR`, else `~/.cache/toolsearch/embeddings`."""
    env = os.environ.get("TOOLSEARCH_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "toolsearch" / "embeddings"
