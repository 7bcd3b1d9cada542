"""Session stores: the state record, the store interface, and the memory and Redis stores."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .._errors import SessionStoreError
from ._state import SCHEMA_VERSION, SessionState, SessionStore, StateUpdate, decode_state, encode_state
from .memory import InMemorySessionStore

if TYPE_CHECKING:
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
    if scheme in ("redis", "rediss", "unix"):
        from .redis import RedisSessionStore

        return RedisSessionStore(url, ttl_seconds=ttl_seconds, **options)
    from .redis import redacted_url

    raise SessionStoreError(
        f"unknown session store URL {redacted_url(url)!r}; use memory:// or redis://host:port/db"
    )
