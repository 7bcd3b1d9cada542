"""What gateway workers share besides sessions: one stored index per catalog, and a catalog epoch."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import SessionStoreError, StoredIndexError
from ..catalog import Catalog
from ..index import ToolIndex
from ..index_store import IndexStore
from ..stores.redis import REDIS_SCHEMES

__all__ = ["SharedIndex", "CatalogEpoch", "CatalogBoard", "RedisCatalogBoard", "board_from_url"]

logger = logging.getLogger("toolsearch.mcp")

LOCK_FILE = ".build.lock"


class SharedIndex:
    """Indexes in one folder shared by every worker, content-addressed by catalog and backend.

    The first worker to need an index builds and saves it (atomically, under an exclusive file
    lock); the others wait on the lock and load what it saved, checked file by file. A worker
    that dies holding the lock releases it with its process.
    """

    def __init__(self, folder: str | Path, backend: str, options: Mapping[str, Any] | None = None) -> None:
        self.store = IndexStore(folder)
        self.backend = backend
        self.options = dict(options or {})

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        root = self.store.root
        try:
            root.mkdir(parents=True, exist_ok=True)
            handle = (root / LOCK_FILE).open("a")
        except OSError as exc:
            raise StoredIndexError(
                f"cannot use {root} as the shared index folder: {exc}; check the path and its "
                "permissions (every worker needs to read and write it)"
            ) from None
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released on close, or when the process dies
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def open(self, catalog: Catalog) -> tuple[ToolIndex, bool]:
        """The index of `catalog`: loaded when a worker built it already (True), else built and saved."""
        with self._locked():
            name, index, reused = self.store.build(catalog, self.backend, **self.options)
        logger.info("index %s %s in %s", name, "loaded" if reused else "built and saved", self.store.root)
        return index, reused


@dataclass(frozen=True, slots=True)
class CatalogEpoch:
    """The latest catalog change any worker saw: a fresh token per change, and the catalog's hash."""

    token: str
    catalog_hash: str


class CatalogBoard:
    """Where workers announce catalog changes; this one is a single process's (nothing to share)."""

    def publish(self, catalog_hash: str) -> CatalogEpoch:
        return CatalogEpoch(secrets.token_hex(8), catalog_hash)

    def read(self) -> CatalogEpoch | None:
        return None

    def close(self) -> None:
        return None


class RedisCatalogBoard(CatalogBoard):
    """The catalog epoch in the session store's Redis, under `{prefix}catalog`: one small key read per poll."""

    def __init__(self, url: str, *, prefix: str = "toolsearch:", timeout: float = 1.0) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        from ..stores.redis import check_redis_url, has_credentials, redacted_url

        check_redis_url(url, "catalog board", SessionStoreError)
        self.url = redacted_url(url)
        self._credentials = has_credentials(url)
        self.key = f"{prefix}catalog"
        self._errors: tuple[type[BaseException], ...] = (redis.exceptions.RedisError,)
        self._client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0)
        )

    def _fail(self, what: str, exc: BaseException) -> SessionStoreError:
        from ..stores.redis import redis_failure

        why, _ = redis_failure(exc, self._credentials)  # a refusal (credentials, full, read-only) said as such
        return SessionStoreError(f"session store {self.url} failed to {what}: {why}")

    def publish(self, catalog_hash: str) -> CatalogEpoch:
        epoch = CatalogEpoch(secrets.token_hex(8), catalog_hash)
        try:
            self._client.set(self.key, json.dumps({"token": epoch.token, "catalog_hash": catalog_hash}))
        except self._errors as exc:
            raise self._fail("record a catalog change", exc) from None
        return epoch

    def read(self) -> CatalogEpoch | None:
        try:
            raw = self._client.get(self.key)
        except self._errors as exc:
            raise self._fail("read the catalog epoch", exc) from None
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            return CatalogEpoch(str(data["token"]), str(data["catalog_hash"]))
        except (ValueError, KeyError, TypeError):
            logger.warning("%s in %s is not a catalog epoch; ignoring it", self.key, self.url)
            return None

    def close(self) -> None:
        self._client.close()


def board_from_url(url: str, *, prefix: str = "toolsearch:", timeout: float = 1.0) -> CatalogBoard:
    """The board beside a session store URL: Redis for redis URLs, a process-local one otherwise."""
    from urllib.parse import urlsplit

    if urlsplit(url).scheme in REDIS_SCHEMES:
        return RedisCatalogBoard(url, prefix=prefix, timeout=timeout)
    return CatalogBoard()
