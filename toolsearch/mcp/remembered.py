"""The catalog a stdio gateway's upstream servers listed at its last start, kept to answer from at the next start.

A stdio gateway is started by its client, often for one call (the MCP Inspector's CLI starts one per
call), and its upstream servers take a second or more each to start. So the catalog they listed is
kept as a stored index (toolsearch.index_store: content-addressed, every file checked on load), one
per gateway set-up, and the next start answers `initialize`, `tools/list` and searches from it while
the servers start; each server's own listing then replaces what was remembered of it (see
`MCPToolSource`'s `remembered`), and a call waits for that.

A set-up is named by a digest of what decides the catalog and its index: the config file's path,
each server's name and its settings as written (`ServerConfig.describe`: no expanded variable,
env or header value, so no credential, reaches the digest), the backend and its options. A config
that changes what a server is given (an env value, a header) keeps the name: what it lists then
replaces the remembered tools, as any change would. The folder is `$TOOLSEARCH_CACHE_DIR/gateway`,
else `~/.cache/toolsearch/gateway`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._cache_dir import cache_subfolder
from .._errors import IndexNotFoundError, ToolSearchError
from ..catalog import Catalog
from ..index import ToolIndex
from ..index_store import IndexStore
from .config import MCPConfig

__all__ = ["RememberedCatalog"]

logger = logging.getLogger("toolsearch.mcp")


class RememberedCatalog:
    """The stored index of one gateway set-up's last catalog: `load` it at start, `save` what the servers listed."""

    def __init__(
        self,
        config: MCPConfig,
        backend: str,
        options: Mapping[str, Any] | None = None,
        *,
        separator: str,
        folder: str | Path | None = None,
    ) -> None:
        self.backend = backend
        self.options = dict(options or {})
        self.store = IndexStore(folder if folder is not None else cache_subfolder("gateway"))  # (module docstring)
        where = str(config.source.resolve()) if config.source is not None else None
        setup = {
            "config": where,
            "servers": [[server.name, server.describe()] for server in config.servers],
            "backend": backend,
            "options": self.options,
            "separator": separator,
        }
        text = json.dumps(setup, sort_keys=True, separators=(",", ":"), default=str)
        self.name = "gateway-" + hashlib.blake2b(text.encode(), digest_size=12).hexdigest()

    def __repr__(self) -> str:
        return f"RememberedCatalog({str(self.store.path(self.name))!r})"

    def load(self) -> ToolIndex | None:
        """The index saved by the last start of this set-up, checked; None when there is none or it fails its checks
        (said in the log: the gateway then starts as if it had none, and saves a new one)."""
        try:
            index = self.store.open(self.name, **self.options)
        except IndexNotFoundError:
            return None
        except (ToolSearchError, OSError) as exc:
            logger.warning("the catalog remembered from the last start cannot be used (%s); starting without it", exc)
            return None
        if index.backend_name != self.backend:
            logger.warning(
                "the catalog remembered from the last start is a %s index, not %s; starting without it",
                index.backend_name,
                self.backend,
            )
            return None
        return index

    def build(self, catalog: Catalog) -> ToolIndex | None:
        """Index `catalog` and save it for the next start; None when it cannot be saved (said in the log: the
        caller builds its index in memory, and the next start waits for the servers again)."""
        try:
            return self.store.build(catalog, self.backend, self.name, **self.options)[1]
        except ToolSearchError as exc:  # another gateway of this set-up saved a different catalog meanwhile, ...
            logger.warning("could not keep the tool catalog for the next start: %s", exc)
        except OSError as exc:  # ... or the cache folder is not writable
            logger.warning("could not keep the tool catalog for the next start in %s: %s", self.store.root, exc)
        return None

    def save(self, catalog: Catalog) -> None:
        """Keep `catalog` for the next start (unless it is what is kept already)."""
        try:
            kept = self.store.manifest(self.name).catalog_hash
        except (ToolSearchError, OSError):
            kept = None
        if kept != catalog.hash:
            self.build(catalog)
