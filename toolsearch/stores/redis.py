"""A session store in Redis, shared by worker processes: versioned JSON state, compare-and-set updates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit

from .._errors import SessionStoreError, UnknownSessionError, missing_dependency
from ._state import SessionState, StateUpdate, decode_state, encode_state
from .memory import MAX_UPDATE_ATTEMPTS

__all__ = ["RedisSessionStore", "redacted_url"]

T = TypeVar("T")

# Compare-and-set in one server-side step: the new state is written only when the key still
# holds the version this update read, so a concurrent writer is detected (the caller retries)
# and nothing is ever half written. Unreadable text counts as a conflict: the retry's read
# reports it clearly.
_CAS = """
local current = redis.call('GET', KEYS[1])
if not current then return -1 end
local ok, state = pcall(cjson.decode, current)
if not ok or type(state) ~= 'table' or state['version'] ~= tonumber(ARGV[1]) then return 0 end
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
"""


def redacted_url(url: str) -> str:
    """The URL without user name or password, for messages and logs."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


class RedisSessionStore:
    """Sessions in Redis, one key per session (`{prefix}session:{id}`) holding the state's JSON.

    - `update` reads the state, applies `fn` and writes it back with a server-side
      compare-and-set; when another worker wrote in between it retries on the newer state.
    - `ttl_seconds` expires idle sessions with Redis TTLs: every read or write renews it.
    - `prefix` separates deployments (or tenants) sharing one Redis.
    - `timeout` bounds each Redis command (and `connect_timeout` each connection attempt,
      default the same); `max_connections` bounds the connection pool, and a caller waits at
      most `timeout` for a free connection. Errors are not retried, so a call fails within
      about the timeout with a SessionStoreError naming the URL (never its credentials).
    Size bounds are Redis's job (`maxmemory` with a TTL-aware eviction policy).
    """

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        prefix: str = "toolsearch:",
        ttl_seconds: float | None = None,
        timeout: float = 1.0,
        connect_timeout: float | None = None,
        max_connections: int = 16,
    ) -> None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise missing_dependency("redis", "redis") from None
        if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
            raise SessionStoreError(
                f"session store URL {redacted_url(url)!r} is not a Redis URL; use redis://host:port/db"
            )
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive (or None for no expiry)")
        if timeout <= 0 or (connect_timeout is not None and connect_timeout <= 0):
            raise ValueError("timeout and connect_timeout must be positive seconds")
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.url = redacted_url(url)
        self.prefix = prefix
        self.ttl_seconds = ttl_seconds
        self.timeout = timeout
        self._ttl_ms = None if ttl_seconds is None else max(1, round(ttl_seconds * 1000))
        self._errors: tuple[type[BaseException], ...] = (redis.exceptions.RedisError,)
        self._pool = redis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=connect_timeout or timeout,
            retry=Retry(NoBackoff(), 0),
        )
        self._client = redis.Redis(connection_pool=self._pool)
        self._cas = self._client.register_script(_CAS)

    # --- the store interface -------------------------------------------------------------------

    def key(self, session_id: str) -> str:
        """The Redis key of a session."""
        return f"{self.prefix}session:{session_id}"

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except self._errors as exc:
            raise SessionStoreError(
                f"session store {self.url} failed to {what}: {type(exc).__name__}: {exc} "
                f"(timeout {self.timeout:g} s); check that Redis is running and reachable from this worker"
            ) from None

    def get(self, session_id: str) -> SessionState | None:
        key = self.key(session_id)
        if self._ttl_ms is None:
            raw = self._call("read a session", self._client.get, key)
        else:  # a read is activity: renew the idle TTL in the same command
            raw = self._call("read a session", self._client.getex, key, px=self._ttl_ms)
        if raw is None:
            return None
        if isinstance(raw, str):  # a client made with decode_responses
            raw = raw.encode()
        where = f"key {key!r} in {self.url}"
        state = decode_state(raw, where)
        if state.id != session_id:
            raise SessionStoreError(
                f"{where} holds session {state.id!r}, not {session_id!r}; delete that key (the session starts over)"
            )
        return state

    def create(self, state: SessionState) -> bool:
        created = self._call(
            "create a session", self._client.set, self.key(state.id), encode_state(state), nx=True, px=self._ttl_ms
        )
        return bool(created)

    def update(self, session_id: str, fn: StateUpdate, *, base: SessionState | None = None) -> SessionState:
        for _ in range(MAX_UPDATE_ATTEMPTS):
            if base is not None:  # the caller's earlier read stands in for this attempt's read
                state, base = base.copy(), None
            else:
                state = self.get(session_id) or _raise(_unknown(session_id))
            read_version = state.version
            before = state.copy()
            fn(state)
            if state == before:
                return state
            state.version = read_version + 1
            args = [read_version, encode_state(state), "" if self._ttl_ms is None else self._ttl_ms]
            outcome = self._call("update a session", self._cas, keys=[self.key(session_id)], args=args)
            if outcome == 1:
                return state
            if outcome == -1:
                raise _unknown(session_id)
        raise SessionStoreError(
            f"session {session_id!r}: gave up after {MAX_UPDATE_ATTEMPTS} conflicting concurrent updates"
        )

    def delete(self, session_id: str) -> bool:
        return bool(self._call("delete a session", self._client.delete, self.key(session_id)))

    def ids(self) -> list[str]:
        pattern = _glob_escape(self.prefix + "session:") + "*"
        start = len(self.prefix + "session:")
        keys = self._call("list sessions", lambda: list(self._client.scan_iter(match=pattern, count=1000)))
        return [k.decode("utf-8", "replace")[start:] for k in keys]

    def ping(self) -> None:
        """Check that Redis answers (SessionStoreError otherwise); a worker can call it at start."""
        self._call("answer a ping", self._client.ping)

    def close(self) -> None:
        """Close the pool's connections (the store reconnects if used again)."""
        self._pool.disconnect()

    def __repr__(self) -> str:
        return f"RedisSessionStore({self.url!r}, prefix={self.prefix!r}, ttl_seconds={self.ttl_seconds})"


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _raise(error: Exception) -> NoReturn:
    raise error


def _unknown(session_id: str) -> UnknownSessionError:
    return UnknownSessionError(f"session {session_id!r} has expired or was closed; create it again")
