"""A session store in Redis, shared by worker processes: versioned JSON state, compare-and-set updates."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import threading
from collections.abc import Callable, Collection
from typing import Any, NoReturn, TypeVar
from urllib.parse import parse_qs, urlsplit

from .._errors import (
    InvalidArgumentError,
    SessionStoreError,
    ToolSearchError,
    UnknownSessionError,
    missing_dependency,
    named_error,
)
from .._redact import redacted_url
from ._state import (
    SessionState,
    StateUpdate,
    encode_state,
    new_incarnation,
    replaced_session,
    shown_session_id,
    unreadable_state,
)
from .memory import MAX_UPDATE_ATTEMPTS

REDIS_SCHEMES = ("redis", "rediss", "unix")
"""URL schemes of a Redis server: the session store, the usage store and the catalog board all take them."""

# redacted_url: its home is toolsearch._redact
__all__ = ["RedisSessionStore", "check_redis_url", "url_parameters", "redis_failure", "redacted_url"]

T = TypeVar("T")

# An allowed subset larger than this is stored once under its content hash and referenced by
# the sessions that use it: every read and write of such a session then moves a few hundred
# bytes instead of the whole subset (each a 1,000-name subset is ~20 KB of JSON), and the
# sessions of one tenant share one copy. Subsets never change, so workers cache them by hash.
INLINE_ALLOWED = 64
_CACHED_SUBSETS = 256

# Compare-and-set in one server-side step: the new state is written only when the key still
# holds the incarnation (ARGV[4]) and the version (ARGV[1]) this update read, so a concurrent
# writer is detected and nothing is ever half written. The incarnation comes first: every
# incarnation of an id counts from version 0, so a turn still running on a closed session would
# otherwise match the session created again under its id and write the old snapshot over it.
# Another incarnation answers -2 (the update fails; retrying on the new session would replay a
# change meant for the old one). A version conflict answers with the newer state itself (its idle
# TTL renewed, as a read renews it), so the retry starts from it without a second round trip;
# unreadable text is answered the same way, and decoding it reports it clearly. A state without
# an incarnation (written by an earlier release) is incarnation ''. -1: no such session; 1: written.
_CAS = """
local current = redis.call('GET', KEYS[1])
if not current then return -1 end
local ok, state = pcall(cjson.decode, current)
local readable = ok and type(state) == 'table'
if readable then
  local incarnation = state['incarnation']
  if incarnation == nil or incarnation == cjson.null then incarnation = '' end
  if type(incarnation) ~= 'string' then
    readable = false
  elseif incarnation ~= ARGV[4] then
    return -2
  end
end
if not readable or state['version'] ~= tonumber(ARGV[1]) then
  if ARGV[3] ~= '' then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
  return current
end
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
"""


# The query parameters of a Redis URL that every Redis client of toolsearch takes (the session store, the usage store,
# the catalog board): redis-py's own, whatever the scheme. redis-py hands any other to the connection, which refuses it
# at the first command (a bare TypeError): those are refused up front. The ones it reads as numbers, flags or lists
# are its URL_QUERY_ARGUMENT_PARSERS (a newer redis-py's new ones come with it); the ones below it hands on as text.
_TEXT_PARAMETERS = ("username", "password", "client_name", "lib_name", "lib_version", "encoding", "encoding_errors",
                    "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_ca_data", "ssl_certfile", "ssl_keyfile",
                    "ssl_password", "ssl_ciphers")
_TLS_PREFIX = "ssl_"  # a rediss:// URL's only
_TCP_PARAMETERS = ("socket_keepalive",)  # not for a unix:// socket file
_POOL_WAIT = "timeout"  # redis-py parses it for its blocking pool, which only the session store has (see below)
# Parameters redis-py takes that break one of toolsearch's clients, and why (said when one is refused)
_BREAKING = {
    "decode_responses": "toolsearch's Redis clients read Redis's replies as bytes (a session store's list of "
                        "sessions, a usage store's logs), and redis-py takes any value of decode_responses as on "
                        "(false and 0 too): drop it",
}
# what a refused parameter was probably meant as
_PARAMETER_HINTS = {
    "prefix": "a deployment that shares a Redis with another uses its own database number: redis://host:6379/1",
    "timeout": "timeout is how long redis-py's blocking pool waits for a free connection, which only the session "
               "store has (RedisSessionStore takes it); the usage store and the catalog board take no such wait, and "
               "a command's timeout is socket_timeout",
}


def url_parameters(scheme: str, also: Collection[str] = ()) -> tuple[str, ...]:
    """The query parameters a Redis URL of `scheme` may carry: the installed redis-py's (see `_TEXT_PARAMETERS`), and
    `also` (a client's own)."""
    from redis.connection import URL_QUERY_ARGUMENT_PARSERS

    known = _redis_py_parameters()
    typed = [name for name in URL_QUERY_ARGUMENT_PARSERS if name != _POOL_WAIT]
    names = [*typed, *(name for name in _TEXT_PARAMETERS if name in known)]
    return (*(name for name in names if (scheme == "rediss" or not name.startswith(_TLS_PREFIX))
              and not (scheme == "unix" and name in _TCP_PARAMETERS)), *also)


@functools.cache
def _redis_py_parameters() -> frozenset[str]:
    """What the installed redis-py's connections take (an older one lacks some of `_TEXT_PARAMETERS`)."""
    import inspect

    from redis import connection

    names: set[str] = set()
    for kind in ("AbstractConnection", "Connection", "SSLConnection"):
        found = getattr(connection, kind, None)
        if found is not None:
            names.update(inspect.signature(found.__init__).parameters)
    return frozenset(names)


def _value_problem(name: str, value: str) -> str | None:
    """Why a value redis-py would take breaks toolsearch's clients, or fails only at the first command; else None."""
    import codecs

    if name == "protocol" and value.strip() not in ("2", "3"):
        return "protocol is 2 (RESP2) or 3 (RESP3); redis-py refuses any other at the first command"
    if name == "encoding":
        try:
            utf8 = codecs.lookup(value).name == "utf-8"
        except LookupError:
            return f"encoding {value!r} is no codec Python knows"
        if not utf8:
            return ("toolsearch keeps its JSON in Redis as UTF-8 (text in any language), which another encoding "
                    "cannot hold or read back: drop encoding, or give utf-8")
    return None


def check_redis_url(
    url: str, what: str, error: Callable[[str], ToolSearchError], *, also: Collection[str] = ()
) -> None:
    """Raise `error` when redis-py would refuse or misread `url`, naming it without its credentials.

    A password holding an unencoded `#`, `?`, `/` (or `@`) cuts the authority short: redis-py then raises a
    ValueError quoting the password's first part as a port (`Port could not be cast to integer value as 'Xy7'`),
    or, when that part is digits, connects to localhost on it and names that port in every connection error. So
    an `@` past the authority of a `redis://` URL is refused too (a `unix://` URL keeps its password in the query,
    where an `@` is the password's own). A query parameter that the client does not take (every client takes
    redis-py's connection parameters, and `also`: the session store's pool takes `timeout`), or that breaks it, is
    refused, saying why or naming the ones it takes. Every Redis client of toolsearch calls this before redis-py sees
    the URL.
    """
    from redis.connection import parse_url

    parts = urlsplit(url)
    misread = parts.scheme in ("redis", "rediss") and "@" in url.partition("://")[2] and "@" not in parts.netloc
    try:
        if not misread:
            parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError:
        misread = True  # its message may quote part of the password: never shown
    if misread:
        raise error(
            f"{what} URL {redacted_url(url)!r} cannot be read: its port, database or query is malformed, or its "
            "password holds an unencoded '#', '?', '/' or '@'; percent-encode the password "
            "(urllib.parse.quote(password, safe=''): '#' is %23, '?' %3F, '/' %2F, '@' %40)"
        )
    allowed = url_parameters(parts.scheme, also)
    for name, values in parse_qs(parts.query, keep_blank_values=True).items():
        if name in _BREAKING:
            raise error(f"{what} URL {redacted_url(url)!r}: query parameter {name!r}: {_BREAKING[name]}")
        if name not in allowed:
            hint = _PARAMETER_HINTS.get(name)
            raise error(
                f"{what} URL {redacted_url(url)!r}: toolsearch's {what} takes no query parameter {name!r}"
                + (f" ({hint})" if hint else "") + f"; a {parts.scheme}:// URL may carry {', '.join(allowed)}"
            )
        problem = _value_problem(name, values[0]) if values and values[0] else None
        if problem is not None:  # (the value is not shown: the query is a URL's, and redacted_url hides its values)
            raise error(f"{what} URL {redacted_url(url)!r}: query parameter {name!r}: {problem}")


def has_credentials(url: str) -> bool:
    """Whether a Redis URL carries a user or password (in its user info, or as a `unix://` URL's query)."""
    parts = urlsplit(url)
    return bool(parts.username or parts.password) or bool({"username", "password"} & set(parse_qs(parts.query)))


def refusal_problem(exc: BaseException) -> str | None:
    """What to say when Redis answered and refused a command for a state of its own (full under `maxmemory`, a
    read-only replica), or for another reason; None when it did not answer. Redis is running then: "check that
    Redis is running" would send the reader after the wrong problem."""
    from redis.exceptions import OutOfMemoryError, ReadOnlyError, ResponseError

    if isinstance(exc, OutOfMemoryError):
        return ("Redis is full (its used memory is above maxmemory, and its eviction policy frees nothing) and "
                "refuses writes: raise maxmemory, or let Redis evict idle sessions (a session TTL, --session-ttl or "
                "ttl_seconds, with maxmemory-policy volatile-lru); the keys toolsearch keeps without a TTL (usage "
                "logs, large allowed subsets, the catalog epoch) are not evicted by a volatile-* policy")
    if isinstance(exc, ReadOnlyError):
        return ("Redis answered as a read-only replica: point the URL at the primary (after a failover, the new "
                "primary; or at a proxy or Sentinel-managed address that follows it)")
    if isinstance(exc, ResponseError):
        return "Redis refused the command (it answers, so it is running)"
    return None


def redis_words(exc: BaseException) -> str:
    """redis-py's message without what it quotes of a pipeline's command (a session's id and state): Redis's reply."""
    text = str(exc)
    return text.split(" of pipeline caused error: ", 1)[-1] if " of pipeline caused error: " in text else text


def credentials_problem(exc: BaseException, credentials: bool) -> str | None:
    """What to say when Redis refused the URL's credentials, wants some it lacks, or refuses its user a command;
    None for any other failure. (redis-py raises these as connection errors: "check that Redis is running" would
    send the reader after the wrong problem.) The credentials are never quoted; redis-py's own words hold none."""
    from redis.exceptions import AuthenticationError, AuthorizationError, NoPermissionError

    if isinstance(exc, AuthenticationError):
        if credentials:
            return ("Redis refused the user and password in the URL (wrong, or the user is disabled); fix them in "
                    "the URL (they are not shown here), or the user in Redis (requirepass, ACL SETUSER)")
        return ("Redis requires a password and the URL gives none; put it in the URL "
                "(redis://:PASSWORD@host:port/db or redis://USER:PASSWORD@..., percent-encoded)")
    if isinstance(exc, AuthorizationError | NoPermissionError):
        return ("Redis's ACL does not let the URL's user run this command; grant the user the commands and keys "
                "toolsearch uses (ACL SETUSER), or use another user")
    return None


def redis_failure(exc: BaseException, credentials: bool) -> tuple[str, bool]:
    """What to say of a Redis command that failed with `exc` (`credentials`: whether the URL carries some), and whether
    Redis answered it: when it refused the URL's credentials or the command (full, a read-only replica, ...), the
    text says so and what to do, since "check that Redis is running" would send the reader after the wrong problem.
    redis-py's words come without what they quote of a pipeline's command (a session's id and state, a log entry)."""
    words = named_error(exc, redis_words(exc))
    refused = credentials_problem(exc, credentials) or refusal_problem(exc)
    return (words, False) if refused is None else (f"{refused} ({words})", True)


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
    Size bounds are Redis's job (`maxmemory` with a TTL-aware eviction policy). An allowed
    subset of more than 64 tools is kept once per distinct subset under `{prefix}allowed:{hash}`
    (without expiry: sessions that outlive any TTL still need it; there are as many such keys
    as distinct subsets), written by `create` and by an `update` that changes the subset, each
    time before the session refers to it.
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
        if urlsplit(url).scheme not in REDIS_SCHEMES:
            raise SessionStoreError(
                f"session store URL {redacted_url(url)!r} is not a Redis URL; use redis://host:port/db"
            )
        # Refused here, naming the option: NaN passes `<= 0`, and NaN or infinity would fail later, in redis-py,
        # as a bare ValueError or OverflowError naming nothing (a NaN timeout at the first command only).
        if ttl_seconds is not None and not _positive_seconds(ttl_seconds):
            raise InvalidArgumentError(
                f"ttl_seconds must be a finite number of seconds above 0 (or None for no expiry), got {ttl_seconds!r}"
            )
        if not _positive_seconds(timeout) or (connect_timeout is not None and not _positive_seconds(connect_timeout)):
            raise InvalidArgumentError(
                "timeout and connect_timeout must be finite numbers of seconds above 0"
                f", got {timeout!r} and {connect_timeout!r}"
            )
        if max_connections < 1:
            raise InvalidArgumentError(f"max_connections must be at least 1, got {max_connections!r}")
        self.url = redacted_url(url)
        self.prefix = prefix
        self.ttl_seconds = ttl_seconds
        self.timeout = timeout
        self._ttl_ms = None if ttl_seconds is None else max(1, round(ttl_seconds * 1000))
        self._errors: tuple[type[BaseException], ...] = (redis.exceptions.RedisError,)
        check_redis_url(url, "session store", SessionStoreError, also=("timeout",))  # its blocking pool's wait
        self._credentials = has_credentials(url)
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
        self._subsets_lock = threading.Lock()
        self._refs: dict[frozenset[str], tuple[str, str]] = {}  # subset -> (hash, JSON text)
        self._subsets: dict[str, frozenset[str]] = {}  # hash -> subset

    # --- the store interface -------------------------------------------------------------------

    def key(self, session_id: str) -> str:
        """The Redis key of a session."""
        return f"{self.prefix}session:{session_id}"

    def _where(self, session_id: str) -> str:
        """A session's key as a message names it."""
        return f"key {shown_session_id(session_id, prefix=self.key(''))} in {self.url}"

    def _call(self, what: str, fn: Callable[..., T], *args: Any, where: str | None = None, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)`, its Redis errors as SessionStoreError; `where` names the session key it reads."""
        try:
            return fn(*args, **kwargs)
        except self._errors as exc:
            if where is not None and str(exc).startswith("WRONGTYPE"):
                # Another kind of value (a hash, a list) under a session's key: Redis answered, so this is no
                # outage, and the key is named, as for a string that is not a session's JSON.
                problem = "it holds a Redis value of another type than a string (WRONGTYPE)"
                raise unreadable_state(where, problem) from None
            why, answered = redis_failure(exc, self._credentials)
            if not answered:
                why += f" (timeout {self.timeout:g} s); check that Redis is running and reachable from this worker"
            raise SessionStoreError(f"session store {self.url} failed to {what}: {why}") from None

    def subset_key(self, ref: str) -> str:
        """The Redis key of a large allowed subset, by its content hash."""
        return f"{self.prefix}allowed:{ref}"

    def _subset_ref(self, allowed: frozenset[str]) -> tuple[str, str]:
        with self._subsets_lock:
            found = self._refs.get(allowed)
        if found is None:
            text = json.dumps(sorted(allowed), separators=(",", ":"), ensure_ascii=False)
            found = (hashlib.sha256(text.encode()).hexdigest()[:32], text)
            with self._subsets_lock:
                if len(self._refs) >= _CACHED_SUBSETS:
                    self._refs.clear()
                self._refs[allowed] = found
        return found

    def _encode(self, state: SessionState) -> tuple[str, tuple[str, str] | None]:
        """The state's JSON text, and (hash, text) of its allowed subset when that is kept apart."""
        if state.allowed is None or len(state.allowed) <= INLINE_ALLOWED:
            return encode_state(state), None
        ref, text = self._subset_ref(state.allowed)
        light = state.copy()
        light.allowed = None
        data = light.to_dict()
        del data["allowed"]
        data["allowed_ref"] = ref
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False), (ref, text)

    def _subset(self, ref: object, where: str) -> frozenset[str]:
        if not isinstance(ref, str):
            raise unreadable_state(where, "field 'allowed_ref' must be a string")
        with self._subsets_lock:
            found = self._subsets.get(ref)
        if found is not None:
            return found
        key = self.subset_key(ref)
        raw = self._call("read an allowed subset", self._client.get, key)
        if raw is None:
            raise SessionStoreError(
                f"{where} refers to the allowed subset {key!r}, which is missing from {self.url}; "
                "close the session and create it again"
            )
        raw = raw if isinstance(raw, bytes) else raw.encode()
        if hashlib.sha256(raw).hexdigest()[:32] != ref:
            raise SessionStoreError(f"{key!r} in {self.url} does not match its hash; delete it and its sessions")
        names = json.loads(raw)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise SessionStoreError(f"{key!r} in {self.url} is not a list of tool names; delete it and its sessions")
        subset = frozenset(names)
        with self._subsets_lock:
            if len(self._subsets) >= _CACHED_SUBSETS:
                self._subsets.clear()
            self._subsets[ref] = subset
        return subset

    def get(self, session_id: str) -> SessionState | None:
        key, where = self.key(session_id), self._where(session_id)
        if self._ttl_ms is None:
            raw = self._call("read a session", self._client.get, key, where=where)
        else:  # a read is activity: renew the idle TTL in the same command
            raw = self._call("read a session", self._client.getex, key, px=self._ttl_ms, where=where)
        if raw is None:
            return None
        return self._decode(session_id, raw)

    def _decode(self, session_id: str, raw: bytes | str) -> SessionState:
        """A session's stored text as its state (the allowed subset it refers to read once per process)."""
        where = self._where(session_id)
        try:
            data = json.loads(raw)
            ref = data.pop("allowed_ref", None) if isinstance(data, dict) else None
            state = SessionState.from_dict(data)
            if ref is not None:
                state.allowed = self._subset(ref, where)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise unreadable_state(where, exc) from None
        if state.id != session_id:
            raise SessionStoreError(
                f"{where} holds session {shown_session_id(state.id)}, not {shown_session_id(session_id)}; delete "
                "that key (the session starts over)"
            )
        return state

    def create(self, state: SessionState) -> bool:
        if not state.incarnation:
            state.incarnation = new_incarnation()
        text, subset = self._encode(state)
        pipe = self._client.pipeline(transaction=False)
        if subset is not None:  # content-addressed: written before any session refers to it
            pipe.set(self.subset_key(subset[0]), subset[1], nx=True)
        pipe.set(self.key(state.id), text, nx=True, px=self._ttl_ms)
        results = self._call("create a session", pipe.execute)
        return bool(results[-1])

    def update(self, session_id: str, fn: StateUpdate, *, base: SessionState | None = None) -> SessionState:
        """One atomic read-modify-write: a read (none when `base`, the caller's earlier read, is given) and one
        compare-and-set; a conflict's answer is the newer state, which the next attempt starts from."""
        for _ in range(MAX_UPDATE_ATTEMPTS):
            if base is not None:  # an earlier read (the caller's, or the conflicting state) stands in for a read
                state, base = base.copy(), None
            else:
                state = self.get(session_id) or _raise(_unknown(session_id))
            read_version, incarnation = state.version, state.incarnation
            before = state.copy()
            fn(state)
            state.incarnation = incarnation  # which session this is, never a change an update makes
            if state == before:
                return state
            state.version = read_version + 1
            text, subset = self._encode(state)
            if subset is not None and state.allowed != before.allowed:
                # A new large subset: its key is written before any session refers to it (content-addressed,
                # so SET NX; a separate command, as its key may live on another Redis Cluster node than the
                # session's). An unchanged subset was written by whoever wrote it into the session.
                self._call("write an allowed subset", self._client.set, self.subset_key(subset[0]), subset[1], nx=True)
            ttl = "" if self._ttl_ms is None else self._ttl_ms
            args = [read_version, text, ttl, incarnation]
            outcome = self._call(
                "update a session", self._cas, keys=[self.key(session_id)], args=args, where=self._where(session_id)
            )
            if isinstance(outcome, bytes | str):  # another writer was first: its state is the next base
                base = self._decode(session_id, outcome)
                continue
            if outcome == 1:
                return state
            if outcome == -1:
                raise _unknown(session_id)
            if outcome == -2:
                raise replaced_session(session_id)
            raise SessionStoreError(f"session store {self.url} answered a compare-and-set with {outcome!r}")
        raise SessionStoreError(
            f"session {shown_session_id(session_id)}: gave up after {MAX_UPDATE_ATTEMPTS} conflicting concurrent "
            "updates"
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


def _positive_seconds(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _raise(error: Exception) -> NoReturn:
    raise error


def _unknown(session_id: str) -> UnknownSessionError:
    return UnknownSessionError(f"session {shown_session_id(session_id)} has expired or was closed; create it again")
