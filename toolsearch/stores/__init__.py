"""Session stores: the state record, the store interface, the memory and Redis stores, and stores by URL scheme;
beside them the usage stores by URL scheme, and the Redis usage store the gateway's workers share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import SessionStoreError, UsageError
from .._redact import redacted_url
from ..plugins import PluginRegistry, callable_of
from ._state import SCHEMA_VERSION, SessionState, SessionStore, StateUpdate, decode_state, encode_state
from .memory import InMemorySessionStore
from .redis import REDIS_SCHEMES

if TYPE_CHECKING:
    from ..usage import UsageStore
    from .redis import RedisSessionStore
    from .usage_redis import RedisUsageStore

__all__ = [
    "SCHEMA_VERSION",
    "scheme_name",
    "SessionState",
    "SessionStore",
    "StateUpdate",
    "InMemorySessionStore",
    "RedisSessionStore",
    "decode_state",
    "encode_state",
    "SESSION_STORES",
    "SessionStoreSpec",
    "store_spec",
    "store_from_url",
    "url_scheme",
    "USAGE_STORES",
    "usage_store_from_url",
    "RedisUsageStore",
]


def __getattr__(name: str) -> Any:
    if name == "RedisSessionStore":  # redis-py loads only when a Redis store is asked for
        from .redis import RedisSessionStore

        return RedisSessionStore
    if name == "RedisUsageStore":  # likewise
        from .usage_redis import RedisUsageStore

        return RedisUsageStore
    raise AttributeError(f"module 'toolsearch.stores' has no attribute {name!r}")


@dataclass(frozen=True, slots=True)
class SessionStoreSpec:
    """A session store scheme: how to open a store from a URL, and what a gateway must know about it.

    - `open(url, *, ttl_seconds=None, **options)` returns the `SessionStore`; the spec is callable
      the same way, so it stands wherever a bare factory does.
    - `shared`: processes that open one URL see one set of sessions (Redis), so `mcp serve --workers N`
      may use it; False for a store kept in the process that opened it (memory).
    - `pool_option`: the option that sizes the store's connection pool (`max_connections` for Redis),
      which the gateway sets above the number of threads that call the store at once; None when it has none.

    A plug-in's entry point may name a bare factory instead: it is then taken as not shared.
    """

    open: Callable[..., SessionStore]
    shared: bool
    pool_option: str | None = None

    def __call__(self, url: str, *, ttl_seconds: float | None = None, **options: Any) -> SessionStore:
        return self.open(url, ttl_seconds=ttl_seconds, **options)


def _memory(url: str, *, ttl_seconds: float | None = None, **options: Any) -> SessionStore:
    return InMemorySessionStore(ttl_seconds=ttl_seconds, **options)


def _redis(url: str, *, ttl_seconds: float | None = None, **options: Any) -> SessionStore:
    from .redis import RedisSessionStore

    return RedisSessionStore(url, ttl_seconds=ttl_seconds, **options)


MEMORY = SessionStoreSpec(_memory, shared=False)
REDIS = SessionStoreSpec(_redis, shared=True, pool_option="max_connections")

# By URL scheme; the same list as pyproject.toml's [project.entry-points."toolsearch.session_stores"].
SESSION_STORES: PluginRegistry[Callable[..., SessionStore]] = PluginRegistry(
    "session store",
    "toolsearch.session_stores",
    [("memory", "toolsearch.stores:MEMORY"), *((scheme, "toolsearch.stores:REDIS") for scheme in REDIS_SCHEMES)],
    callable_of("(url, *, ttl_seconds=None, **options) that returns a SessionStore, or a SessionStoreSpec"),
    error=SessionStoreError,
)


def url_scheme(url: str) -> str:
    """The scheme a store URL names: `redis` of `redis://host/0`, and `memory` of a bare `memory`."""
    return (url.split("://", 1)[0] if "://" in url else url).lower()


def scheme_name(registry: PluginRegistry[Any], scheme: str) -> str | None:
    """The name `registry` knows `scheme` by (nothing is loaded): a URL's scheme is read in lower case (RFC 3986: case
    does not matter), so a plug-in's name is matched the same way (`AcmeDB` for `acmedb://` and `AcmeDB://`); an
    exact name first."""
    if not scheme:
        return None
    if scheme in registry:
        return scheme
    return next((name for name in registry.names() if name.lower() == scheme), None)


def _by_scheme(registry: PluginRegistry[Any], scheme: str) -> Any:
    name = scheme_name(registry, scheme)
    return None if name is None else registry.find(name)


def store_spec(url: str) -> SessionStoreSpec:
    """The spec of the session store a URL names (a plug-in's bare factory as a store that is not shared).

    An unknown scheme raises SessionStoreError listing the known ones and saying how a plug-in adds one.
    """
    scheme = url_scheme(url) if isinstance(url, str) else ""
    found = _by_scheme(SESSION_STORES, scheme)
    if found is None:
        shown = redacted_url(url) if isinstance(url, str) else url
        raise SessionStoreError(
            f"unknown session store URL {shown!r}; use memory:// or redis://host:port/db (the known schemes: "
            f"{', '.join(SESSION_STORES.names())}). {SESSION_STORES.install_hint()}"
        )
    return found if isinstance(found, SessionStoreSpec) else SessionStoreSpec(found, shared=False)


def store_from_url(url: str, *, ttl_seconds: float | None = None, **options: Any) -> SessionStore:
    """A store from a URL: `memory://` (this process only), `redis://[user:password@]host:port/db`, or
    a scheme a plug-in declares under the `toolsearch.session_stores` entry-point group.

    `ttl_seconds` expires idle sessions in either store; other options go to the store's
    constructor (e.g. `prefix=`, `timeout=` for Redis, `max_sessions=` for memory).
    """
    spec = store_spec(url)
    store = spec(url, ttl_seconds=ttl_seconds, **options)
    if not isinstance(store, SessionStore):
        raise SESSION_STORES.wrong_product(
            url_scheme(url), store, "a SessionStore (get, create, update, delete, ids, ...)"
        )
    return store


def _local_usage(url: str, *, path: str | None = None, **options: Any) -> UsageStore:
    """The usage store of a process: the file at `path` (processes sharing it merge), else memory."""
    from ..usage import FileUsageStore, InMemoryUsageStore

    return FileUsageStore(path) if path is not None else InMemoryUsageStore()


def _redis_usage(url: str, *, path: str | None = None, **options: Any) -> UsageStore:
    from .usage_redis import RedisUsageStore

    return RedisUsageStore(url, **options)  # every worker shares the log and its pending searches: no file


# By URL scheme, beside the session stores; the same list as [project.entry-points."toolsearch.usage_stores"].
USAGE_STORES: PluginRegistry[Callable[..., UsageStore]] = PluginRegistry(
    "usage store",
    "toolsearch.usage_stores",
    [("memory", "toolsearch.stores:_local_usage"), *((s, "toolsearch.stores:_redis_usage") for s in REDIS_SCHEMES)],
    callable_of("(url, *, path=None, **options) that returns a UsageStore"),
    error=UsageError,
)


def usage_store_from_url(url: str, *, path: str | None = None, **options: Any) -> UsageStore:
    """The usage store beside a session store URL, by its scheme: Redis for a Redis URL (every worker
    shares the log and its pending searches); memory's a FileUsageStore at `path` (processes sharing it
    merge), else memory; or a scheme a plug-in declares under the `toolsearch.usage_stores` group.

    A scheme that only names a session store (a plug-in without a usage store) keeps its usage log
    the way memory's does. `options` go to the store (e.g. `prefix=`, `timeout=` for Redis).
    """
    from ..usage import UsageStore

    scheme = url_scheme(url) if isinstance(url, str) else ""
    factory = _by_scheme(USAGE_STORES, scheme)
    if factory is None and scheme_name(SESSION_STORES, scheme) is not None:
        factory = _local_usage
    if factory is None:
        shown = redacted_url(url) if isinstance(url, str) else url
        raise UsageError(
            f"unknown usage store URL {shown!r}; use memory:// or redis://host:port/db (the known schemes: "
            f"{', '.join(USAGE_STORES.names())}). {USAGE_STORES.install_hint()}"
        )
    store = factory(url, path=path, **options)
    if not isinstance(store, UsageStore):
        raise USAGE_STORES.wrong_product(scheme, store, "a UsageStore (load, save, delete)")
    return store
