"""Connections to the catalog store: the DSN and how it is shown, the pool, and psycopg's errors translated once.

A DSN's password never leaves this module in text: `display_dsn` is what messages, logs, manifests and
spans get, and every error message is scrubbed of the password's literal text as well (a server or
driver message could echo it).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from .._errors import BackendError, CatalogStoreError, missing_dependency
from .._redact import HIDDEN, redacted_url

__all__ = [
    "STORE_ENV",
    "PG_SCHEMES",
    "OUTAGE_HOLD_SECONDS",
    "StoreSettings",
    "display_dsn",
    "is_postgres_url",
    "Connector",
    "default_dsn",
]

STORE_ENV = "TOOLSEARCH_STORE"
PG_SCHEMES = ("postgres", "postgresql")
logger = logging.getLogger("toolsearch.pg")
T = TypeVar("T")


# A statement gets statement_timeout on the server; the client waits this much longer before it cuts the socket.
_CLIENT_GRACE = 1.0

# How long a failure of the store stands without news of it: meanwhile `Connector.outage` names it, so a server
# (the gateway) refuses requests that need the store at once instead of leaving each to wait `timeout` on a store
# known to be down; the first request after it tries the store again, and a success (or the change watcher
# reaching the store again) ends it sooner. Also the Retry-After the gateway sends.
OUTAGE_HOLD_SECONDS = 5

# Marks the log records that an outage starts and ends: they are for a server's log. A one-shot command drops them
# (cli._ConsoleHandler), since the command fails with the same error, and printed it twice.
OUTAGE_RECORD = {"outage": True}


def _cut_off(conn: Any, cut: threading.Event) -> None:
    """Shut the socket of a connection whose server does not answer: the blocked call then fails at once."""
    import socket

    cut.set()
    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


def is_postgres_url(text: object) -> bool:
    return isinstance(text, str) and text.split("://", 1)[0].lower() in PG_SCHEMES and "://" in text


def default_dsn() -> str | None:
    """The DSN in $TOOLSEARCH_STORE when it names Postgres (so a password need not be on a command line)."""
    value = os.environ.get(STORE_ENV, "").strip()
    return value if is_postgres_url(value) else None


def display_dsn(dsn: str) -> str:
    """The DSN as messages may show it: URL user info and query values hidden, a `password=` keyword dropped."""
    if "://" in dsn:
        return redacted_url(dsn)
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:  # not parseable: show nothing of it rather than risk a secret
        return HIDDEN
    return " ".join(f"{k}={HIDDEN if k in _SECRET_KEYS else v}" for k, v in parts.items() if v is not None)


# libpq's parameters that hold a secret: the role's password, and the one that unlocks the client's TLS key
_SECRET_KEYS = frozenset({"password", "sslpassword"})


def _secrets(dsn: str) -> tuple[str, ...] | None:
    """The secrets a DSN holds, to scrub from messages; None when it cannot be parsed (then anything may be one)."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:
        return None
    return tuple(str(parts[k]) for k in _SECRET_KEYS if parts.get(k))


@dataclass(frozen=True, slots=True)
class StoreSettings:
    """How a process talks to the store: pool size, how long a caller waits, and the HNSW search width.

    - `timeout`: seconds a statement may run (`statement_timeout`) and a caller waits for a free
      connection; a connection attempt waits `connect_timeout`.
    - `ef_search`: pgvector's `hnsw.ef_search`, the candidate list of each HNSW walk (recall against
      exact search is reported by benchmarks/postgres.py); filtered walks scan on (`iterative_scan`).
    """

    min_connections: int = 1
    max_connections: int = 8
    timeout: float = 5.0
    connect_timeout: float = 3.0
    ef_search: int = 100

    def __post_init__(self) -> None:
        for name in ("min_connections", "max_connections", "ef_search"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "min_connections" else 1):
                raise BackendError(f"{name} must be a positive whole number, got {value!r}")
        if self.min_connections > self.max_connections:
            raise BackendError("min_connections cannot exceed max_connections")
        for name in ("timeout", "connect_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise BackendError(f"{name} must be a positive number of seconds, got {value!r}")


class Connector:
    """One pool per (DSN, settings) in a process, shared by every index that names that store."""

    _pools: ClassVar[dict[tuple[str, StoreSettings], Connector]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, dsn: str, settings: StoreSettings) -> None:
        try:
            import psycopg
            import psycopg_pool
        except ImportError:
            raise missing_dependency("psycopg", "postgres") from None
        self.dsn = dsn
        self.shown = display_dsn(dsn)
        self.settings = settings
        self._secrets = _secrets(dsn)
        self._psycopg = psycopg
        self._errors: tuple[type[BaseException], ...] = (psycopg.Error, psycopg_pool.PoolTimeout, OSError)
        self.pool = psycopg_pool.ConnectionPool(
            dsn,
            min_size=settings.min_connections,
            max_size=settings.max_connections,
            timeout=settings.timeout,
            kwargs={"connect_timeout": max(1, round(settings.connect_timeout)), "autocommit": True},
            configure=self._configure,
            # no `check` round trip before each use: it would hang on a server that accepts but does not answer;
            # a connection the server dropped fails at once instead, and reads retry once on a fresh one (`call`)
            name=f"toolsearch {self.shown}",
            open=False,
            reconnect_timeout=0,  # never give up re-filling the pool; each caller still fails within timeout
        )
        self._opened = False
        self._open_lock = threading.Lock()
        self._failure: tuple[float, CatalogStoreError] | None = None  # (when, what) of the last outage, until news

    @classmethod
    def shared(cls, dsn: str, settings: StoreSettings) -> Connector:
        with cls._lock:
            found = cls._pools.get((dsn, settings))
            if found is None or (found.pool.closed and found._opened):
                found = cls._pools[(dsn, settings)] = cls(dsn, settings)
            return found

    def _configure(self, conn: Any) -> None:
        from pgvector.psycopg import register_vector

        timeout_ms = round(self.settings.timeout * 1000)
        conn.execute(
            f"SET statement_timeout = {timeout_ms}; SET lock_timeout = {timeout_ms}; "
            f"SET hnsw.ef_search = {self.settings.ef_search}; SET hnsw.iterative_scan = strict_order; "
            # a search must walk the HNSW and GIN indexes even where a small table makes a scan look cheaper
            # to the planner (it is not: every row's vector or tsvector is read); whole-table reads turn it on
            "SET enable_seqscan = off"
        )
        register_vector(conn)

    def _open(self) -> None:
        """Reach the store once before the pool opens: a wrong password or a server that is down is said at
        once, in the server's words, and the shared tables and the vector extension exist before any
        pooled connection registers the vector type."""
        if self._opened:
            return
        with self._open_lock:
            if self._opened:
                return
            from .schema import ensure_schema

            try:
                with self.direct() as conn:
                    ensure_schema(conn)
            except self._errors as exc:
                raise self.error("connect", exc) from None
            self.pool.open(wait=False)
            self._opened = True

    def direct(self) -> Any:
        """A connection of its own, outside the pool (LISTEN, locks held across transactions, the first check)."""
        return self._psycopg.connect(
            self.dsn, autocommit=True, connect_timeout=max(1, round(self.settings.connect_timeout))
        )

    @contextmanager
    def connection(self, what: str) -> Iterator[Any]:
        """A pooled connection for one job; every failure becomes a CatalogStoreError saying `what` failed."""
        self._open()
        try:
            with self.pool.connection() as conn:
                yield conn
        except CatalogStoreError:
            raise
        except self._errors as exc:
            raise self.error(what, exc) from None

    def call(self, what: str, fn: Callable[[Any], T], *, read: bool = False, slow: bool = False) -> T:
        """`fn(conn)` on a pooled connection, cut off client-side when Postgres does not answer within the timeout
        (a hung server keeps the socket open, so no server-side timeout fires). A `read` that finds its
        connection dropped by the server (a restart since it was last used) runs once more on a fresh one.
        `slow` work (a whole catalog read or written) has no deadline: it sets `statement_timeout = 0` itself."""
        for attempt in (1, 2):
            with self.connection(what) as conn:
                cut = threading.Event()
                deadline = threading.Timer(self.settings.timeout + _CLIENT_GRACE, _cut_off, (conn, cut))
                deadline.daemon = True
                if not slow:
                    deadline.start()
                try:
                    result = fn(conn)
                    self.answered()
                    return result
                except self._errors as exc:
                    stale = isinstance(exc, self._psycopg.OperationalError) and not cut.is_set() and conn.broken
                    if read and stale and attempt == 1:
                        continue
                    raise self.error(what, exc, hung=cut.is_set()) from None
                finally:
                    deadline.cancel()
        raise AssertionError("unreachable")  # pragma: no cover

    # --- outages: what a server tells its clients while the store fails -------------------------------------

    def outage(self) -> CatalogStoreError | None:
        """The store's last failure while it stands: no success since, and at most OUTAGE_HOLD_SECONDS old."""
        failure = self._failure
        if failure is None or time.monotonic() - failure[0] > OUTAGE_HOLD_SECONDS:
            return None
        return failure[1]

    def failed(self, error: CatalogStoreError) -> CatalogStoreError:
        """Record an outage (said once in the log, when it starts); returns `error`."""
        if self._failure is None:
            logger.warning("%s; what needs the catalog store fails until it answers", error, extra=OUTAGE_RECORD)
        self._failure = (time.monotonic(), error)
        return error

    def answered(self) -> None:
        """The store answered: an outage recorded before is over."""
        if self._failure is not None:
            self._failure = None
            logger.warning("catalog store %s answers again", self.shown, extra=OUTAGE_RECORD)

    def error(self, what: str, exc: BaseException, *, hung: bool = False) -> CatalogStoreError:
        """The one translation of a driver or pool failure: what failed, where, why, and what to do. A failure of
        the store itself (down, restarting, hung, slow, out of connections, refusing the credentials) is recorded
        as an outage (`outage`); an error in a statement is not."""
        import psycopg_pool

        psycopg = self._psycopg
        detail = " ".join(str(exc).split()) or type(exc).__name__
        outage = True
        if hung:
            why = f"Postgres did not answer within {self.settings.timeout:g} s (hung, or very slow)"
        elif isinstance(exc, psycopg_pool.PoolTimeout):
            why = (f"no connection within {self.settings.timeout:g} s: Postgres is down, unreachable or out of "
                   f"connections, or all {self.settings.max_connections} of this process's are busy")
        elif isinstance(exc, psycopg.errors.QueryCanceled):
            why = f"the statement ran past {self.settings.timeout:g} s (statement_timeout): Postgres is slow or busy"
        elif isinstance(exc, psycopg.errors.InvalidPassword | psycopg.errors.InvalidAuthorizationSpecification):
            why = "Postgres refused the credentials: check the user and password of the DSN"
        elif isinstance(exc, psycopg.errors.TooManyConnections):
            why = "Postgres is out of connections (max_connections): raise it or lower the workers' pools"
        elif isinstance(exc, psycopg.OperationalError | OSError):
            why = "the connection failed or was lost (Postgres down or restarting)"
        else:
            why = f"{type(exc).__name__}"
            outage = False
        # a failed connection carries no SQLSTATE: the server's words say which failure it was
        if "password authentication failed" in detail:
            why = "Postgres refused the credentials: check the user and password of the DSN"
        elif "too many clients" in detail or "remaining connection slots" in detail:
            why = "Postgres is out of connections (max_connections): raise it or lower the workers' pools"
        advice = ("fix the DSN, or the role's password in Postgres" if "credentials" in why
                  else "nothing was half written; retry once Postgres answers")
        if self._secrets is None:  # libpq quotes the part it cannot read, which may be the password
            why, detail = "the DSN cannot be parsed", type(exc).__name__
            advice = "fix the DSN (its text is not shown: it may hold a password)"
            outage = False
        message = f"catalog store {self.shown} failed to {what}: {why} ({detail}); {advice}"
        error = CatalogStoreError(self.scrub(message))
        return self.failed(error) if outage else error

    def scrub(self, text: str) -> str:
        for secret in self._secrets or ():
            text = text.replace(secret, HIDDEN)
        return text

    def close(self) -> None:
        with Connector._lock:
            for key, value in list(Connector._pools.items()):
                if value is self:
                    del Connector._pools[key]
        self.pool.close()

    def __repr__(self) -> str:
        return f"Connector({self.shown!r})"
