"""Session stores: the state record, the store interface, and the memory and Redis stores."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .._errors import SessionStoreError
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
    "store_from_url",
    "usage_store_from_url",
]


def __getattr__(name: str) -> Any:
    if name == "RedisSessionStore":  # redis-py loads only when a Redis store is asked for
        from .redis import RedisSessionStore

        return RedisSessionStore
    raise AttributeError(f"module 'toolsearch.stores' has no attribute {name!r}")


def store_from_url(url: str, *, ttl_seconds: float | None = None, **options: Any) -> SessionStore:
    """A store from a URL: `memory://` (this process only) or `redis://[user:password@]host:port/db`.

    `ttl_seconds` expires idle sessions in either store; other options go to the store's
    constructor (e.g. `prefix=`, `timeout=` for Redis, `max_sessions=` for memory).
    """
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        return InMemorySessionStore(ttl_seconds=ttl_seconds, **options)
    if scheme in REDIS_SCHEMES:
        from .redis import RedisSessionStore

        return RedisSessionStore(url, ttl_seconds=ttl_seconds, **options)
    from .redis import redacted_url

    raise SessionStoreError(
        f"unknown session store URL {redacted_url(url)!r}; use memory:// or redis://host:port/db"
    )


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
        from .redis import redacted_url

        raise SessionStoreError(f"unknown usage store URL {redacted_url(url)!r}; use memory:// or redis://host:port/db")
    return FileUsageStore(path) if path is not None else InMemoryUsageStore()
