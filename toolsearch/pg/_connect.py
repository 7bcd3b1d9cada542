"""Connections to the catalog store: the DSN and how it is shown, the pool, and psycopg's errors translated once.

A DSN's password never leaves this module in text: `display_dsn` is what messages, logs, manifests and
spans get, a URL that libpq would misread (part of the password taken for the host) is refused before libpq
sees it (`check_dsn`), and every error message is scrubbed of the password's literal text and its pieces as
well (a server or driver message could echo them).

A forked child never uses the pools it inherited (their sockets are its parent's): each Connector gets a
fresh pool in the child, and the inherited one is kept, never closed (closing would end the parent's sessions).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar
from urllib.parse import unquote

from .._errors import BackendError, CatalogStoreError, ToolSearchError, check_seconds, missing_dependency
from .._redact import DSN_SECRET_KEYS, HIDDEN, _user_info_end, redacted_url

__all__ = [
    "STORE_ENV",
    "PG_SCHEMES",
    "OUTAGE_HOLD_SECONDS",
    "StoreSettings",
    "display_dsn",
    "check_dsn",
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
    return " ".join(f"{k}={HIDDEN if k in DSN_SECRET_KEYS else v}" for k, v in parts.items() if v is not None)


_PORTS = re.compile(r"[0-9]*(,[0-9]*)*")  # libpq's port list: one per host, each may be empty (the default)


def check_dsn(dsn: str) -> None:
    """Raise CatalogStoreError, naming the DSN without its password, when libpq would misread or refuse it.

    libpq ends a URL's user info at its first `@` and its authority at the first `/`, so a password holding an
    unencoded `@` (`postgres:Ab12@cD9@host`) makes the rest of it part of the host, and one holding a `/`
    (`postgres:Zq98/xK2@host`) makes `postgres` the host and the password's start its port; libpq's errors then
    quote those pieces and say the server is unreachable. Such a URL (a second `@` in the authority, an `@` in
    the database path, a port that is not a number) is refused here, before any of it reaches libpq; a DSN that
    libpq cannot parse at all is refused the same way (libpq's message quotes the part it could not read).
    """
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # Connector says which extra to install
        return
    try:
        parts = conninfo_to_dict(dsn)
    except Exception:
        misread = True
    else:
        misread = not _PORTS.fullmatch(str(parts.get("port") or ""))
        if "://" in dsn:
            # the authority ends at the first `/` or `?` (a URL without a database path may have a query, whose
            # values may hold `@`: `?application_name=svc@box`); the path ends at the `?`
            rest = dsn.partition("://")[2]
            authority = re.split(r"[/?]", rest, maxsplit=1)[0]
            path = rest[len(authority):].partition("?")[0] if rest[len(authority):].startswith("/") else ""
            misread = misread or authority.count("@") > 1 or "@" in path
    if misread:
        error = CatalogStoreError(
            f"catalog store {display_dsn(dsn)}: the DSN cannot be parsed (its host, port or database is malformed, "
            "or its password holds an unencoded '@', '/' or '%', which libpq would read as part of the host or port); "
            "fix the DSN: percent-encode the password (urllib.parse.quote(password, safe=''): '@' is %40, '/' %2F, "
            "'%' %25)"
        )
        error.outage = False
        raise error


def _secrets(dsn: str) -> tuple[str, ...] | None:
    """The secrets a DSN holds, to scrub from messages (longest first); None when it cannot be parsed (then anything
    may be one). A URL's password is taken as libpq reads it and as the widest reading of its user info does
    (`redacted_url`), with each piece of it between URL delimiters: a misread password reaches messages in pieces."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:
        return None
    found = {str(parts[k]) for k in DSN_SECRET_KEYS if parts.get(k)}
    if "://" in dsn:
        rest = dsn.partition("://")[2]
        slash = rest.find("/")
        first = rest.find("@", 0, len(rest) if slash < 0 else slash)  # where libpq ends the user info
        end = max(_user_info_end(rest), first)
        user_info = rest[:end] if end > 0 else ""
        _, colon, password = user_info.partition(":")
        if colon and password:  # a user name alone is no secret (and "postgres" is in every message)
            for text in (password, unquote(password)):
                found.add(text)
                found.update(piece for piece in re.split(r"[@/?#:%]", text) if len(piece) >= _SHORTEST_PIECE)
    return tuple(sorted((s for s in found if s), key=len, reverse=True))


# Pieces of a password shorter than this are not scrubbed on their own: they would blank common words and numbers.
_SHORTEST_PIECE = 3


@dataclass(frozen=True, slots=True)
class StoreSettings:
    """How a process talks to the store: pool size, how long a caller waits, and the HNSW search width.

    - `timeout`: seconds a statement may run (`statement_timeout`) and a caller waits for a free
      connection; a connection attempt waits `connect_timeout`.
    - `ef_search`: pgvector's `hnsw.ef_search`, the candidate list of each HNSW walk (recall against
      exact search is reported by benchmarks/postgres.py); filtered walks scan on (`iterative_scan`).
    - `lock_wait`: seconds a change waits for another's that holds the catalog and runs no statement (a writer
      stopped mid-change: SIGSTOP, a paused VM, a cut network keep its transaction open for hours) before it fails;
      a holder that runs a statement is waited for however long its change takes. A build or sync that waits for
      another's build lock gives up on a holder whose lock connection has shown no sign of life this long (a busy
      holder's beats every few seconds; a stopped one's does not). Default: `turn_bound`.
    """

    min_connections: int = 1
    max_connections: int = 8
    timeout: float = 5.0
    connect_timeout: float = 3.0
    ef_search: int = 100
    lock_wait: float | None = None

    def __post_init__(self) -> None:
        for name in ("min_connections", "max_connections", "ef_search"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "min_connections" else 1):
                raise BackendError(f"{name} must be a positive whole number, got {value!r}")
        if self.min_connections > self.max_connections:
            raise BackendError("min_connections cannot exceed max_connections")
        for name in ("timeout", "connect_timeout", "lock_wait"):
            value = getattr(self, name)
            if name == "lock_wait" and value is None:
                continue
            check_seconds(name, value)

    @property
    def turn_bound(self) -> float:
        """How long a change waits for a holder of the catalog that runs no statement: `lock_wait`, else ten times
        `timeout` and at least a minute (a writer's pause between two statements of its change is far shorter)."""
        return self.lock_wait if self.lock_wait is not None else max(10 * self.timeout, 60.0)


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
        check_dsn(dsn)
        self.dsn = dsn
        self.shown = display_dsn(dsn)
        self.settings = settings
        self._secrets = _secrets(dsn)
        self._psycopg = psycopg
        self._errors: tuple[type[BaseException], ...] = (psycopg.Error, psycopg_pool.PoolTimeout, OSError)
        self._pool = self._new_pool()
        self._opened = False
        self._open_lock = threading.Lock()
        self._failure: tuple[float, CatalogStoreError] | None = None  # (when, what) of the last outage, until news
        _LIVE.add(self)

    def _new_pool(self) -> Any:
        import psycopg_pool

        settings = self.settings
        return psycopg_pool.ConnectionPool(
            self.dsn,
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

    @property
    def pool(self) -> Any:
        """This process's pool (psycopg_pool.ConnectionPool)."""
        return self._pool

    def _forked(self) -> None:
        """In a forked child: a pool of its own. The inherited one's connections are the parent's sessions (two
        processes on one socket read each other's replies); it is kept, never used, closed or collected here, as
        closing or finalising its connections would end them for the parent too."""
        self._open_lock = threading.Lock()  # another thread may have held it at the fork
        if self._opened and self._pool.closed:  # closed in the parent: it stays closed
            return
        _INHERITED.append(self._pool)
        self._pool = self._new_pool()
        self._opened = False  # opened again (the schema check, then the pool) on first use
        self._failure = None

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
        # a statement that waits for a lock all along (a search meeting a rebuild's swap) is stopped by lock_timeout
        # just before statement_timeout would: said as a lock held by another process, not as a slow Postgres
        lock_ms = max(1, timeout_ms - min(timeout_ms // 10, 500))
        conn.execute(
            f"SET statement_timeout = {timeout_ms}; SET lock_timeout = {lock_ms}; "
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
            self._pool.open(wait=False)
            self._opened = True

    def direct(self, *, application_name: str | None = None) -> Any:
        """A connection of its own, outside the pool (LISTEN, locks held across transactions, the first check);
        `application_name` names it in pg_stat_activity unless the DSN names its connections itself."""
        named: dict[str, Any] = {} if application_name is None or "application_name" in self.dsn else {
            "application_name": application_name}
        return self._psycopg.connect(
            self.dsn, autocommit=True, connect_timeout=max(1, round(self.settings.connect_timeout)), **named
        )

    @contextmanager
    def connection(self, what: str) -> Iterator[Any]:
        """A pooled connection for one job; every failure becomes a CatalogStoreError saying `what` failed."""
        self._open()
        try:
            with self._pool.connection() as conn:
                yield conn
        except ToolSearchError:  # said already (a catalog that is gone is an IndexNotFoundError, an OSError too)
            raise
        except self._errors as exc:
            raise self.error(what, exc) from None

    def call(self, what: str, fn: Callable[[Any], T], *, read: bool = False, slow: bool = False) -> T:
        """`fn(conn)` on a pooled connection, cut off client-side when Postgres does not answer within the timeout
        (a hung server keeps the socket open, so no server-side timeout fires). A connection the server dropped
        (a restart since it was last used) means the pool's other idle ones are likely dead too: they are checked
        and replaced, and a `read` then runs once more on a fresh one (no outage is recorded when that answers).
        `slow` work (a whole catalog read or written) has no deadline: it sets `statement_timeout = 0` itself."""
        for attempt in (1, 2):
            failure: BaseException | None = None
            hung = stale = False
            with self.connection(what) as conn:
                cut = threading.Event()
                deadline = threading.Timer(self.settings.timeout + _CLIENT_GRACE, _cut_off, (conn, cut))
                deadline.daemon = True
                if not slow:
                    deadline.start()
                try:
                    result = fn(conn)
                except ToolSearchError:  # ours, not the store's failure (see `connection`)
                    raise
                except self._errors as exc:
                    failure, hung = exc, cut.is_set()
                    stale = isinstance(exc, self._psycopg.OperationalError) and not hung and conn.broken
                else:
                    self.answered()
                    return result
                finally:
                    deadline.cancel()
            # the dead connection is back in the pool, which discarded it; now the idle ones it still holds
            if stale:
                self._drop_dead_connections()
                if read and attempt == 1:
                    continue
            assert failure is not None
            raise self.error(what, failure, hung=hung) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _drop_dead_connections(self) -> None:
        """Test the pool's idle connections (one empty statement each) and replace those the server dropped, so
        that a retry, or the next caller, does not take another one left over from before a restart."""
        with contextlib.suppress(Exception):  # the retry that follows says what is wrong, if anything is
            self._pool.check()

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
        advice: str | None = None
        if hung:
            why = f"Postgres did not answer within {self.settings.timeout:g} s (hung, or very slow)"
        elif isinstance(exc, psycopg.errors.LockNotAvailable) or (
            isinstance(exc, psycopg.errors.QueryCanceled) and "while locking" in detail
        ):  # Postgres answers; another session holds what this needs (another writer's change): its turn, no outage
            why = (f"another process held a lock this needs for about {self.settings.timeout:g} s (another "
                   "writer's change of the catalog, a rebuild's swap, or a long read of the catalog by another "
                   "process meeting that swap, is in progress)")
            advice = "nothing was half written; Postgres is up: retry once that change has ended"
            outage = False
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
        else:  # Postgres answered, and refused this statement: the store is up, and the same statement fails again
            why = f"Postgres refused the statement ({type(exc).__name__})"
            outage = False
        # a failed connection carries no SQLSTATE: the server's words say which failure it was
        if "password authentication failed" in detail:
            why = "Postgres refused the credentials: check the user and password of the DSN"
        elif "too many clients" in detail or "remaining connection slots" in detail:
            why = "Postgres is out of connections (max_connections): raise it or lower the workers' pools"
        if "credentials" in why:
            advice = "fix the DSN, or the role's password in Postgres"
        elif outage:
            advice = "nothing was half written; retry once Postgres answers"
        elif advice is None:
            advice = ("nothing was half written; this is no outage, so retrying will not help: check the catalog "
                      "and what was asked of it, and build it again if its tables were changed by hand "
                      "(`toolsearch build FILE --store URL --name NAME --rebuild`, or PostgresIndex.open(..., "
                      "rebuild=True))")
        if self._secrets is None:  # libpq quotes the part it cannot read, which may be the password
            why, detail = "the DSN cannot be parsed", type(exc).__name__
            advice = "fix the DSN (its text is not shown: it may hold a password)"
            outage = False
        # the server's and the driver's words are scrubbed; the rest is ours, and names the DSN redacted already
        message = f"catalog store {self.shown} failed to {what}: {why} ({self.scrub(detail)}); {advice}"
        error = CatalogStoreError(message)
        error.outage = outage
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
        self._pool.close()

    def __repr__(self) -> str:
        return f"Connector({self.shown!r})"


# Every Connector of the process (weakly), and the pools forked children inherited: see `Connector._forked`.
_LIVE: weakref.WeakSet[Connector] = weakref.WeakSet()
_INHERITED: list[Any] = []


def _after_fork_in_child() -> None:
    Connector._lock = threading.Lock()  # another thread may have held it at the fork
    for connector in list(_LIVE):
        connector._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)
