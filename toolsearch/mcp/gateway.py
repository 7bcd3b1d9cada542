"""The tool-search gateway: one MCP server in front of many, serving both protocol eras on one endpoint.

The MCP Python SDK's shape: one server core (`GatewayRules`, toolsearch.mcp.rules: search, list and
admit a call) and thin adapters around it. This module is the composition root: it builds the rules
from explicit parts (index, meta-tool, pins, usage log, executor rules, settings), the two protocol
eras over them, and the SDK `Server` whose handlers resolve each request's caller once
(`GatewayRules.resolve`) and hand it to the era the request speaks (`caller.is_modern`): a request
carrying the 2026-07-28 envelope gets the stable list and found definitions in results
(toolsearch.mcp.modern); a handshake-era client gets its own session whose list grows as it finds
tools (toolsearch.mcp.handshake). No era holds the gateway. It also follows upstream catalog changes
and serves the transports (stdio, streamable HTTP).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.subscriptions import ListenHandler
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .._errors import CatalogStoreError, SessionStoreError, ToolSearchError
from ..catalog import Catalog
from ..index import ToolIndex
from ..metatool import ToolSearchMetaTool
from ..stores import InMemorySessionStore, SessionStore
from .caller import is_modern
from .caps import ConnectionCaps, caller_caps
from .errors import protocol_error
from .handshake import HandshakeEra
from .identity import SessionIdentity
from .metatools import CALL_TOOL
from .modern import ListenerBus, ModernEra
from .outage import CatalogOutage, catalog_outage
from .rules import Asker, GatewayRules, resolve_pins
from .settings import DEFAULT_SESSION_TTL, GatewaySettings, url_host
from .shared import CatalogBoard, SharedIndex
from .source import MCPToolSource
from .usage_feed import GatewayUsage
from .wire import CheckedLines, WireCheck, answered, claimed_stdin

if TYPE_CHECKING:
    from ..pg.index import PostgresIndex

__all__ = ["Gateway", "resolve_pins", "reuse_port_socket", "shared_catalog"]

logger = logging.getLogger("toolsearch.mcp")

T = TypeVar("T")

# How long an idle HTTP connection stays open. uvicorn's default, 5 s, equals the idle expiry of the
# httpx/httpcore pools MCP clients use (the Python SDK's among them), so a client may reuse a
# connection in the moment the server closes it, and that request fails ("Server disconnected without
# sending a response"). A server's idle timeout must outlast its clients' pools. The header-read
# timeout (`--header-timeout`, 10 s) still closes idle connections first.
KEEP_ALIVE_SECONDS = 75

# Seconds before a tool-list change the shared catalog could not take is written again, doubled after each failed
# try up to the longest: a Postgres restart is over in seconds, an outage of hours is tried once a minute.
_RESYNC_FIRST = 1.0
_RESYNC_LONGEST = 60.0


class Gateway:
    """An MCP server whose clients search one shared index of every upstream tool and call what they find.

    Stateless workers: with a session header (the gateway issues `mcp-session-id` itself when a
    shared store is configured), the HTTP transport keeps nothing per connection; handshake-era
    sessions and 2026-era context handles live in `store` (e.g. Redis), so any worker sharing the
    store answers any request. `board` spreads catalog changes between workers.
    """

    def __init__(
        self,
        source: MCPToolSource,
        settings: GatewaySettings | None = None,
        *,
        index: ToolIndex | None = None,
        store: SessionStore | None = None,
        board: CatalogBoard | None = None,
        shared_index: SharedIndex | None = None,
        metatool: ToolSearchMetaTool | None = None,
    ) -> None:
        self.settings = settings = settings or GatewaySettings()
        self.source = source
        if index is None:
            index = ToolIndex.build(source.catalog(), settings.backend, **dict(settings.backend_options))
        options = settings.options
        # Beside the session store: with Redis every worker appends to one log and credits a call to
        # the search that found it, whichever worker served either; else the file (merged) or memory.
        feed = GatewayUsage.from_url(
            index.catalog.hash, settings.workers.session_store, path=options.usage_file, enabled=options.usage_log,
            privacy=options.usage_privacy,
        )
        # AugmentationError here (a tool whose own parameter is named like an augmented field) stops the start
        self.rules = GatewayRules(
            index=index, metatool=metatool or ToolSearchMetaTool(), source=source, settings=settings, usage=feed
        )
        header = settings.workers.identity_header if settings.transport == "http" else None
        self.session_header = None if header is None else header.strip().lower()
        # A networked store's calls block for a round trip: they run on a worker thread, off the event loop.
        self._offload = store is not None and not isinstance(store, InMemorySessionStore)
        self.handshake = HandshakeEra(
            self.rules,
            store,
            header=self.session_header,
            store_call=self.store_call,
            max_discovered=settings.max_discovered,
        )
        # Context handles outlive any connection: they end when idle, in the shared store when there is one.
        context_store = (
            store
            if store is not None and not isinstance(store, InMemorySessionStore)
            else InMemorySessionStore(
                ttl_seconds=settings.workers.session_ttl or DEFAULT_SESSION_TTL, max_sessions=10_000
            )
        )
        # per caller: open sessions, context handles, and (with Redis) the rates every worker shares
        self.caps = caller_caps(settings.auth, self.handshake.sessions.store, context_store)
        self.modern = ModernEra(
            self.rules, context_store, store_call=self.store_call, caps=self.caps.contexts, contexts=settings.contexts
        )
        self.board = board or CatalogBoard()
        self.shared_index = shared_index
        self._epoch_seen: str | None = None
        self._sync_lock = anyio.Lock()  # one catalog write at a time, in the order they were asked for
        # a catalog write whose caller was cancelled (an upstream's connection ended mid-write), still running on its
        # thread, and the server whose change it writes: the next write waits for it (`_settled`)
        self._unfinished: tuple[str, _OwnThread[None]] | None = None
        # the upstream server whose tool-list change the shared catalog could not take yet (`resync_catalog` writes it)
        self._catalog_owed: str | None = None
        self._resync_wake: anyio.Event | None = None  # made by `resync_catalog`, in the event loop
        # seconds `resync_catalog` waits before its next try (while a try runs: after it), the one home of its backoff
        self._resync_next = _RESYNC_FIRST
        # subscriptions/listen by rights: each stream hears of changes to its own caller's list only
        self.bus = ListenerBus(self.modern)
        self._listen_handler = ListenHandler(self.bus)
        source.add_listener(self._upstream_changed)
        self.server: Server[Any] = _GatewayServer(
            settings.name,
            version=_version(),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=self._listen,
        )
        # The SDK checks a 2026 call's Mcp-Param-* headers against the called tool's schema; without this
        # lookup it would run the whole tools/list handler for every call to find it.
        self.server.get_tool_input_schema = self._input_schema
        self.server.add_request_handler("server/discover", types.RequestParams, self._discover)
        self.server.middleware.append(self._instructions_middleware)

    @property
    def index(self) -> ToolIndex:
        return self.rules.index

    @property
    def stateless(self) -> bool:
        """True when handshake-era sessions are named by a request header rather than kept per connection."""
        return self.session_header is not None

    async def store_call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._offload:
            return await anyio.to_thread.run_sync(fn, *args)
        return fn(*args)

    # --- MCP handlers: resolve the caller once, hand the request to its era --------------------

    async def _resolve(self, ctx: Any) -> Asker:
        """`GatewayRules.resolve`; when it found the policy file edited (new rules took effect), each client whose
        visible tools the new rights changed is told, in both eras, as after an upstream change, and every client is
        compared against its new rights from then on (else a later upstream change would be judged by old ones)."""
        before = self.rules.policy_version
        asker = self.rules.resolve(ctx)
        if self.rules.policy_version != before:
            await self._tools_changed()
        return asker

    async def _tools_changed(self) -> None:
        # Each client hears of a change only when what its own rights cover changed: a handshake-era client of a
        # change to any tool it may use, a 2026-era one of a change to its stable list (a pinned tool's definition,
        # the servers named in tool_search), never of every catalog change.
        await self.handshake.notify_changed()
        await self.bus.tools_changed()

    async def _instructions_middleware(self, ctx: Any, call_next: Any) -> Any:
        """`initialize` tells a handshake-era client about the tools and servers its caller may use only."""
        result = await call_next(ctx)
        if ctx.method == "initialize" and isinstance(result, dict):
            result = {**result, "instructions": self.rules.instructions(await self._resolve(ctx), modern=False)}
        return result

    async def _discover(self, ctx: Any, params: types.RequestParams) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS),
            capabilities=self.server.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=self.rules.instructions(await self._resolve(ctx), modern=True),
        )

    async def _listen(self, ctx: Any, params: types.SubscriptionsListenRequestParams) -> Any:
        """`subscriptions/listen`: the SDK's stream, subscribed for the request's caller (told of its own list only)."""
        return await self.bus.listen(self._listen_handler, ctx, params, await self._resolve(ctx))

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        """The input schema of a tool the 2026 era lists (its stable list, unfiltered), or None."""
        for tool in self.modern.listing(self.rules.everyone).tools:
            if tool.name == name:
                return dict(tool.input_schema)
        return None

    def _catalog_answers(self) -> None:
        """While the catalog store is known to be failing, a request that needs the catalog is refused at once (a
        protocol error, 503 over HTTP) rather than served from a copy the gateway cannot check or left to wait
        on a store that does not answer."""
        failure = catalog_outage(self.rules.index)
        if failure is not None:
            raise protocol_error(failure)

    async def _list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        self._catalog_answers()
        if params is not None and params.cursor is not None:
            # The list is always one page, so any cursor is one we never issued.
            raise MCPError(
                code=INVALID_PARAMS,
                message="tools/list: unknown cursor; this server lists every tool in one page, call it without one",
            )
        asker = await self._resolve(ctx)
        if is_modern(ctx.protocol_version):
            return await self.modern.list_tools(asker)
        return await self.handshake.list_tools(ctx, asker)

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        self._catalog_answers()
        # Started from the catalog its servers listed last time (toolsearch.mcp.remembered), a gateway admits a call
        # once the called tool's server has listed its own tools: never against a remembered definition.
        target = (params.arguments or {}).get("name") if params.name == CALL_TOOL else params.name
        asker = await self._resolve(ctx)
        if target != self.rules.metatool.name and not self.source.all_listed:
            name = target if isinstance(target, str) else None
            # A tool the caller may not use waits as long as one no server offers (for every server): refused
            # sooner, its refusal would tell the caller that it exists.
            allowed = asker.allowed is None or name in asker.allowed
            await self.source.listed(name if allowed else None)
            # the policy reads the catalog its servers list now (the file was checked once for this request already)
            asker = self.rules.asker_for(asker.caller, asker.owner)
        if is_modern(ctx.protocol_version):
            return await self.modern.call_tool(ctx, asker, params)
        return await self.handshake.call_tool(ctx, asker, params)

    # --- upstream changes ------------------------------------------------------------------------

    async def _upstream_changed(self, source: MCPToolSource, server: str) -> None:
        await self._sync_catalog(server)

    async def _sync_catalog(self, server: str) -> bool:
        """Bring the index (the shared catalog, with a store) to the upstreams' tools after `server`'s changed; whether
        it took them. When the shared catalog could not (Postgres fails, or another writer stopped mid-change holds
        it), this worker serves on from the catalog as it was, and `resync_catalog` writes it again within
        `_resync_next` s."""
        async with self._sync_lock:
            await self._settled()  # one a cancel left running ends first: else the older catalog could land last
            try:
                await self._apply_catalog(self.source, server)
            except CatalogStoreError as exc:
                self._write_failed(server, exc)
                return False
            self._catalog_owed = None  # written: a retry still waiting has nothing left to write
        try:  # every other worker re-lists its upstreams when it sees this
            epoch = await anyio.to_thread.run_sync(self.board.publish, self.index.catalog.hash)
            self._epoch_seen = epoch.token
        except SessionStoreError as exc:
            logger.warning("could not tell the other workers about the catalog change: %s", exc)
        await self._tools_changed()
        return True

    def _write_failed(self, server: str, exc: CatalogStoreError) -> None:
        """The shared catalog could not take `server`'s tool-list change: said, and owed to `resync_catalog`."""
        self._catalog_owed = server
        if self._resync_wake is not None:
            self._resync_wake.set()
        then = ("The next change of an upstream's tools (or a restart) writes it" if self._resync_wake is None
                else f"Trying again within {self._resync_next:g} s (and on the next change of an upstream's tools)")
        logger.warning("MCP server %r: its tool list changed, and the shared catalog was not brought to it: %s. %s",
                       server, exc, then)

    async def _settled(self) -> None:
        """Under `_sync_lock`: wait for the catalog write a cancel left running, then say its failure as any write's
        is said (and owed to the resync). A cancel of this wait leaves it to the next writer."""
        if self._unfinished is None:
            return
        server, write = self._unfinished
        await write.ended()
        if self._unfinished is not None and self._unfinished[1] is write:
            self._unfinished = None
        try:
            write.outcome()
        except CatalogStoreError as exc:
            self._write_failed(server, exc)
        except Exception:  # not the store failing: said, as after an upstream change (its listener logs it)
            logger.exception("MCP server %r: writing its tool-list change to the shared catalog failed; the next "
                             "change of an upstream's tools (or a restart) writes it", server)

    async def resync_catalog(self, *, first: float = _RESYNC_FIRST, longest: float = _RESYNC_LONGEST) -> None:
        """Run for the gateway's life: after a tool-list change the shared catalog could not take (Postgres down for
        a moment), write it again after `first` s, then twice as long each time up to `longest` s, until it takes it
        or a later change wrote it. Else the catalog every worker searches would stay stale until some upstream's
        tools changed again, which may be never."""
        self._resync_wake, self._resync_next = (wake := anyio.Event()), first
        while True:
            if self._unfinished is not None:  # a write a cancel left running: its failure must be said and retried
                async with self._sync_lock:
                    await self._settled()
            if self._catalog_owed is None:
                await wake.wait()
                self._resync_wake = wake = anyio.Event()
                continue
            tries = 0
            while (server := self._catalog_owed) is not None:
                await anyio.sleep(self._resync_next)
                if self._catalog_owed is None:  # a later change wrote it meanwhile
                    break
                tries += 1
                # the wait before the next try, set before this one: its failure (logged by _sync_catalog) says it
                self._resync_next = min(2 * self._resync_next, longest)
                try:
                    written = await self._sync_catalog(server)
                except Exception:  # not the store failing (a catalog removed, say): said, as after an upstream change
                    logger.exception("MCP server %r: writing its tool-list change to the shared catalog again failed; "
                                     "the next change of an upstream's tools (or a restart) writes it", server)
                    self._catalog_owed = None
                    break
                if written:
                    logger.info("MCP server %r: the shared catalog took its tool-list change, written again after it "
                                "failed (try %d)", server, tries)
            self._resync_next = first

    async def _apply_catalog(self, source: MCPToolSource, server: str | None = None) -> None:
        """Bring the index to `source`'s tools; `server`: the upstream whose change this writes (default: every one),
        named when a write a cancel left running fails."""
        index = self.rules.index
        if self.shared_index is not None:  # the first worker to see a new catalog builds its index; the others load it
            index, _ = await anyio.to_thread.run_sync(self.shared_index.open, source.catalog())
        elif (stored := _in_a_store(index)) is not None:  # every worker's: what this one cannot list is not its to drop
            catalog, unlisted = shared_catalog(source, stored.catalog_name)
            # may wait minutes for another process's build lock: on a thread of its own, which a cancel does not wait
            # for (the gateway's exit leaves it: one transaction). Any other cancel (the upstream's connection ended
            # mid-write) leaves it to the next write, which waits for its end (`_settled`), and to the resync.
            write = _OwnThread(lambda: stored.sync(catalog, keep_namespaces=unlisted), name="toolsearch-catalog-sync")
            try:
                await write.ended()
            except BaseException:  # cancelled: the write goes on
                self._unfinished = (server if server is not None else ", ".join(source.servers), write)
                if self._resync_wake is not None:
                    self._resync_wake.set()
                raise
            write.outcome()
        else:
            await anyio.to_thread.run_sync(index.sync, source.catalog())

        def rebind() -> None:
            # pins resolved again; an upstream tool that now collides with --augment is left out, and said so
            self.rules.rebind(index)
            self.handshake.rebind(index)
            self.modern.rebind(index)

        await anyio.to_thread.run_sync(rebind)  # the augmentation check walks every schema: off the event loop

    async def watch_catalog(self, interval: float = 1.0) -> None:
        """Poll the board; when another worker saw a catalog change, re-list this worker's upstreams."""
        failing = False
        while True:
            await anyio.sleep(interval)
            try:
                epoch = await anyio.to_thread.run_sync(self.board.read)
            except SessionStoreError as exc:
                if not failing:
                    logger.warning("cannot check for catalog changes: %s", exc)
                failing = True
                continue
            failing = False
            if epoch is None or epoch.token == self._epoch_seen:
                continue
            self._epoch_seen = epoch.token
            if epoch.catalog_hash != self.index.catalog.hash:
                logger.info("another worker saw the tool catalog change; re-listing the upstream servers")
                await self.source.refresh()  # a change found calls _upstream_changed

    # --- transports -------------------------------------------------------------------------------

    def initialization_options(self) -> Any:
        return self.server.create_initialization_options()

    async def run_stdio(self) -> None:
        """Serve one client over this process's stdin/stdout.

        Each line is read by toolsearch.mcp.wire before the SDK's transport: a line it would drop unanswered (not
        JSON, a batch, an id of 1.5) is answered with its JSON-RPC error."""
        from mcp.server.stdio import stdio_server

        with claimed_stdin() as stdin:
            lines = CheckedLines(anyio.wrap_file(stdin))
            # The SDK only iterates the stdin it is given (an AsyncFile by its annotation), line by line.
            async with stdio_server(stdin=cast(Any, lines)) as (read_stream, write_stream):
                lines.answer_on(write_stream)
                await self.serve_streams(read_stream, write_stream)

    async def serve_streams(self, read_stream: Any, write_stream: Any) -> None:
        """Serve one client over a stream pair, in the era its first request opens (the SDK's dual-era loop).

        A message the transport could not read reaches the SDK as an exception, which it drops: it is answered with
        its JSON-RPC error instead (toolsearch.mcp.wire)."""
        from mcp.server.runner import serve_dual_era_loop

        async with self.server.lifespan(self.server) as state:
            await serve_dual_era_loop(
                self.server,
                answered(read_stream, write_stream),
                write_stream,
                lifespan_state=state,
                init_options=self.initialization_options(),
            )

    def http_app(self, *, path: str = "/mcp", host: str = "127.0.0.1") -> Any:
        """An ASGI app serving streamable HTTP at `path`, both eras.

        Handshake-era sessions are per connection by default; stateless when sessions are named
        by a header, so that any worker sharing the session store can answer any request. A
        2026-era request is self-contained either way. A POST whose body the SDK would drop or answer with a
        validation dump (a batch, text that is not JSON) is answered 400 with its JSON-RPC error (toolsearch.mcp.wire).
        """
        from mcp.server.transport_security import TransportSecuritySettings

        # Origin and Host are checked by mcp.guard on every address (run_http wraps this app with
        # mcp.auth.protect); the SDK's own check, on only for 127.0.0.1/localhost/::1, would refuse the
        # origins an operator allows with --allowed-origins there.
        checked = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        if self.session_header is None:
            app = self.server.streamable_http_app(streamable_http_path=path, host=host, transport_security=checked)
            app = self._outage_answers(app, path)
            if not self.caps.per_connection:
                return WireCheck(app, path=path)
            manager = getattr(self.server, "_session_manager", None)
            idle = getattr(manager, "session_idle_timeout", None)
            limit = self.caps.per_connection
            capped = ConnectionCaps(app, limit=limit, path=path, idle_timeout=idle, live=_held_by(manager))
            return WireCheck(capped, path=path)
        app = self.server.streamable_http_app(
            streamable_http_path=path, host=host, stateless_http=True, transport_security=checked
        )
        app = self._outage_answers(app, path)
        identified = SessionIdentity(
            app,
            header=self.session_header,
            path=path,
            on_delete=lambda key: self.store_call(self.handshake.sessions.close, key),
            known=lambda key: self.store_call(self.handshake.known, key),
            register=lambda key: self.store_call(self.handshake.register, key),
            caps=self.caps.sessions,
        )
        # Outermost: a malformed first POST is answered before a session is issued (and counted) for it.
        return WireCheck(identified, path=path)

    def _outage_answers(self, app: Any, path: str) -> Any:
        """With the catalog in a store (Postgres), a request refused while it fails is answered 503 + Retry-After."""
        if not callable(getattr(self.rules.index, "outage", None)):
            return app  # local files: no store to fail, and no answer held back to look at
        return CatalogOutage(app, path=path)

    async def run_http(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        path: str = "/mcp",
        announce: Any = None,
        reuse_port: bool = False,
        middleware: Sequence[Callable[[Any], Any]] = (),
    ) -> None:
        """Serve streamable HTTP until cancelled; `announce(url)` is called once the socket listens.

        `reuse_port` binds with SO_REUSEPORT, so several worker processes listen on one port and
        the kernel spreads connections between them. `middleware` wraps the ASGI app, innermost
        first (e.g. an authentication layer that records each request's caller in its scope). Outside
        it go the settings' authentication and request guards (`mcp.auth.protect`), which need the
        bound port for the resource URL, so the socket is bound first; uvicorn reads request headers
        with a timeout.
        """
        import uvicorn

        from .auth import check_exposure, default_resource_url, protect

        class _Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield  # the start-up code handles signals, so the upstream servers are stopped cleanly too

        auth = self.settings.auth
        if not (self.settings.transport == "http" and host == self.settings.host):  # settings checked their own
            check_exposure(host, auth)  # AuthConfigError: no non-loopback address without authentication
        sock = reuse_port_socket(host, port, reuse=reuse_port)
        bound = sock.getsockname()[1]
        resource = auth.resource_url or default_resource_url(host, bound, path)
        app = self.http_app(path=path, host=host)
        for wrap in middleware:
            app = wrap(app)
        app = protect(app, auth, path=path, resource_url=resource, shared=self.caps.shared)
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="on",
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            **auth.server_options(),
        )
        server = _Server(config)
        sockets = [sock]

        failed: list[str] = []

        async def run() -> None:
            with anyio.CancelScope(shield=True):  # a cancel asks uvicorn to finish, it is not torn down
                try:
                    await server.serve(sockets=sockets)
                except SystemExit:  # uvicorn's answer to a port it cannot bind (it logged why)
                    failed.append("bind")
                    server.should_exit = True

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            try:
                while not server.started:
                    if server.should_exit or failed:
                        raise ToolSearchError(
                            f"cannot listen on {host}:{port} (is the port in use? --port 0 picks a free one)"
                        )
                    await anyio.sleep(0.01)
                if announce is not None:
                    announce(f"http://{url_host(host)}:{bound}{path}")
                await anyio.sleep_forever()
            finally:
                server.should_exit = True


class _OwnThread(Generic[T]):
    """`fn()` on a daemon thread of its own, which a cancel of the task that waits for it (`ended`) does not stop: it
    ends by itself, or with the process.

    For a write to the shared catalog, which waits as long as another process's build of it runs (minutes) and up
    to `timeout` for a hung Postgres: a stdio gateway whose client left must exit meanwhile. `anyio.to_thread` cannot
    run it: a cancel waits for its call, and the interpreter waits at its exit for its threads, an abandoned call's
    too. The write is one transaction: left at the exit, it commits whole or, when the process ends first, not at
    all."""

    def __init__(self, fn: Callable[[], T], *, name: str) -> None:
        self._results: list[T] = []
        self._errors: list[BaseException] = []
        self._guard = threading.Lock()
        self._done = False
        self._wakes: list[threading.Event] = []  # one per task waiting for the end
        context = contextvars.copy_context()  # as anyio.to_thread runs a call: in the caller's context (tracing)

        def run() -> None:
            try:
                self._results.append(context.run(fn))
            except BaseException as exc:  # raised by `outcome`, in whichever task looks at it
                self._errors.append(exc)
            finally:
                with self._guard:
                    self._done, wakes, self._wakes = True, self._wakes, []
                for wake in wakes:
                    wake.set()

        threading.Thread(target=run, name=name, daemon=True).start()

    async def ended(self) -> None:
        """Return once the thread ended; a cancel returns at once, and the thread goes on."""
        wake = threading.Event()
        with self._guard:
            if not self._done:
                self._wakes.append(wake)
            else:
                wake.set()
        try:
            await anyio.to_thread.run_sync(wake.wait, abandon_on_cancel=True)
        finally:
            wake.set()  # after a cancel: lets go of the worker thread that waits for it (the exit would wait for it)

    def outcome(self) -> T:
        """What `fn` returned, or its exception raised; only once `ended` returned."""
        if self._errors:
            raise self._errors[0]
        return self._results[0]


def _in_a_store(index: ToolIndex) -> PostgresIndex | None:
    """`index` when it is a catalog in a store that other workers share, else None."""
    pg = sys.modules.get("toolsearch.pg.index")  # loaded by whoever opened one: nothing to import otherwise
    return index if pg is not None and isinstance(index, pg.PostgresIndex) else None


def shared_catalog(source: MCPToolSource, name: str | None) -> tuple[Catalog, tuple[str, ...]]:
    """What this worker may write to the shared catalog `name`: the tools of the upstream servers it lists now, and
    the servers it could not list (failed to start, crashed, not listed yet), whose stored tools stay as other
    workers wrote them. One host's failure is its own: were their tools removed, every worker's searches would lose
    a server that is up elsewhere (a call to one of its tools fails on this worker only). A server that is down
    everywhere keeps its last listed tools; one taken out of the config is removed."""
    unlisted = {server: upstream.error or upstream.state for server, upstream in source.servers.items()
                if not upstream.ready}
    if not unlisted:
        return source.catalog(), ()
    logger.warning(
        "MCP %s not listed by this worker (%s): %s tools in the shared catalog %r are kept as other workers listed "
        "them, not removed",
        "server" if len(unlisted) == 1 else "servers",
        "; ".join(f"{server}: {why}" for server, why in unlisted.items()),
        "its" if len(unlisted) == 1 else "their",
        name,
    )
    listed = Catalog(t for t in source.tools() if t.namespace not in unlisted)
    return listed, tuple(unlisted)


class _GatewayServer(Server[Any]):
    """The SDK's server, advertising `tools.listChanged` to handshake-era clients on every transport.

    The streamable-HTTP session manager answers `initialize` with the server's default
    initialization options (there is no way to pass ours), so the default must be the gateway's.
    """

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> Any:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True), experimental_capabilities, extensions
        )


def _held_by(manager: Any) -> Callable[[str], bool] | None:
    """Whether the SDK's stateful session manager still holds a session id, or None where it cannot be told.

    The SDK answers 404 both for a session it has ended and for one presented with another credential
    (another client id of the same caller); only its own table says which, so a session stops counting
    against its caller's cap when it has really ended.
    """
    instances = getattr(manager, "_server_instances", None)
    if not isinstance(instances, dict):
        return None
    return lambda session_id: session_id in manager._server_instances


def reuse_port_socket(host: str, port: int, *, reuse: bool = True) -> Any:
    """A socket bound (not listening); with `reuse`, SO_REUSEPORT, so several gateway processes can share the port."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: without it a response written as headers then body waits for
    # the client's delayed ACK of the headers (about 40 ms per 2026-era request on loopback).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if reuse:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ToolSearchError(
            f"cannot listen on {host}:{port}: {exc} (is the port in use? --port 0 picks a free one)"
        ) from None
    return sock


def _version() -> str:
    from .. import __version__

    return __version__
