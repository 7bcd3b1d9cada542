"""Session stores: the state record, the store interface, the memory and Redis stores, and stores by URL scheme."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .._errors import SessionStoreError
from .._redact import redacted_url
from ..plugins import PluginRegistry, callable_of
from ._state import SCHEMA_VERSION, SessionState, SessionStore, StateUpdate, decode_state, encode_state
from .memory import InMemorySessionStore
from .redis import REDIS_SCHEMES

if TYPE_CHECKING:
    from ..usage import UsageStore
    from .redis import RedisSessionStore

__all__ = [
    "SCHEMA_VERSION",
    "SessionState",
    "SessionStore",
    "StateUpdate",
    "InMemorySessionStore",
    "RedisSessionStore",
    "decode_state",
    "encode_state",
    "SESSION_STORES",
    "store_from_url",
    "usage_store_from_url",
]


def __getattr__(name: str) -> Any:
    if name == "RedisSessionStore":  # redis-py loads only when a Redis store is asked for
        from .redis import RedisSessionStore

        return RedisSessionStore
    raise AttributeError(f"module 'toolsearch.stores' has no attribute {name!r}")


def _memory(url: str, *, ttl_seconds: float | None = None, **options: Any) -> SessionStore:
    return InMemorySessionStore(ttl_seconds=ttl_seconds, **options)


def _redis(url: str, *, ttl_seconds: float | None = None, **options: Any) -> SessionStore:
    from .redis import RedisSessionStore

    return RedisSessionStore(url, ttl_seconds=ttl_seconds, **options)


# By URL scheme; the same list as pyproject.toml's [project.entry-points."toolsearch.session_stores"].
SESSION_STORES: PluginRegistry[Callable[..., SessionStore]] = PluginRegistry(
    "session store",
    "toolsearch.session_stores",
    [("memory", "toolsearch.stores:_memory"), *((scheme, "toolsearch.stores:_redis") for scheme in REDIS_SCHEMES)],
    callable_of("(url, *, ttl_seconds=None, **options) that returns a SessionStore"),
    error=SessionStoreError,
)


def store_from_url(url: str, *, ttl_seconds: float | None = None, **options: Any) -> SessionStore:
    """A store from a URL: `memory://` (this process only), `redis://[user:password@]host:port/db`, or
    a scheme a plug-in declares under the `toolsearch.session_stores` entry-point group.

    `ttl_seconds` expires idle sessions in either store; other options go to the store's
    constructor (e.g. `prefix=`, `timeout=` for Redis, `max_sessions=` for memory).
    """
    scheme = urlsplit(url).scheme if isinstance(url, str) else ""
    factory = SESSION_STORES.find(scheme) if scheme else None
    if factory is None:
        shown = redacted_url(url) if isinstance(url, str) else url
        others = [f"{name}://" for name in SESSION_STORES.names() if name != "memory" and name not in REDIS_SCHEMES]
        also = f" (or {', '.join(others)})" if others else ""
        raise SessionStoreError(
            f"unknown session store URL {shown!r}; use memory:// or redis://host:port/db{also}. "
            f"{SESSION_STORES.install_hint()}"
        )
    store = factory(url, ttl_seconds=ttl_seconds, **options)
    if not isinstance(store, SessionStore):
        raise SESSION_STORES.wrong_product(scheme, store, "a SessionStore (get, create, update, delete, ids, ...)")
    return store


def usage_store_from_url(url: str, *, path: str | None = None, **options: Any) -> UsageStore:
    """The usage store beside a session store URL: Redis for a Redis URL (every worker shares the log
    and its pending searches), else a FileUsageStore at `path` (processes sharing it merge), else memory.

    `options` go to RedisUsageStore (e.g. `prefix=`, `timeout=`).
    """
    from ..usage import FileUsageStore, InMemoryUsageStore

    scheme = urlsplit(url).scheme
    if scheme in REDIS_SCHEMES:
        from .usage_redis import RedisUsageStore

        return RedisUsageStore(url, **options)
    if scheme != "memory" and url != "memory":
        raise SessionStoreError(f"unknown usage store URL {redacted_url(url)!r}; use memory:// or redis://host:port/db")
    return FileUsageStore(path) if path is not None else InMemoryUsageStore()
