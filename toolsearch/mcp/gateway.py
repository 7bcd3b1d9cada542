"""The tool-search gateway: one MCP server in front of many, serving both protocol eras on one endpoint.

A request's era is the client's choice: one carrying the 2026-07-28 envelope gets the stable
list and found definitions in results (toolsearch.mcp.modern); a handshake-era client gets its
own session whose list grows as it finds tools (toolsearch.mcp.handshake). Both share the
index, the meta-tools, the executor's rules, the rug-pull pins, the usage log, the caller
policy and the augmentation (`--augment`): every upstream tool a client is shown carries its
fields (`exposed`), and each call's values are taken out by the executor's rules, logged and
consumed (`take_augmented`) before the upstream is called with its own arguments.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .._errors import AugmentationError, SessionStoreError, ToolSearchError
from ..catalog import Catalog
from ..executor import ExecutorConfig, ToolExecutor, invalid_arguments_text
from ..index import ToolIndex
from ..metatool import ToolSearchMetaTool
from ..providers import ToolCall
from ..session import Session, SessionManager
from ..stores import InMemorySessionStore, SessionStore
from ..tools import Tool
from .caller import ANONYMOUS, LOCAL, Caller, caller_of_scope
from .caps import ConnectionCaps, caller_caps, owner_of
from .errors import tool_error
from .handshake import SESSION_METHODS, HandshakeEra
from .identity import SessionIdentity
from .metatools import CALL_TOOL
from .modern import ModernEra
from .pinning import DefinitionPins
from .settings import DEFAULT_SESSION_TTL, GatewaySettings, url_host
from .shared import CatalogBoard, SharedIndex
from .source import MCPToolSource, definition_changes, error_result, upstream_of
from .usage_feed import GatewayUsage

__all__ = ["Gateway", "CALL_TOOL", "resolve_pins", "reuse_port_socket"]

logger = logging.getLogger("toolsearch.mcp")

T = TypeVar("T")

# How long an idle HTTP connection stays open. uvicorn's default, 5 s, equals the idle expiry of the
# httpx/httpcore pools MCP clients use (the Python SDK's among them), so a client may reuse a
# connection in the moment the server closes it, and that request fails ("Server disconnected without
# sending a response"). A server's idle timeout must outlast its clients' pools. The header-read
# timeout (`--header-timeout`, 10 s) still closes idle connections first.
KEEP_ALIVE_SECONDS = 75


def resolve_pins(patterns: Iterable[str], catalog: Catalog) -> tuple[list[str], list[str]]:
    """Expand pins: an exact tool name, a server name (all its tools) or a glob (`time__*`).

    Returns (pinned names, patterns that matched nothing).
    """
    names = catalog.names
    pinned: dict[str, None] = {}
    unmatched: list[str] = []
    for pattern in patterns:
        if pattern in catalog:
            hits = [pattern]
        elif pattern in catalog.namespaces:
            members = catalog.names_in([pattern])
            hits = [n for n in names if n in members]
        else:
            hits = fnmatch.filter(names, pattern)
        if not hits:
            unmatched.append(pattern)
        for name in hits:
            pinned.setdefault(name, None)
    return list(pinned), unmatched


def is_modern(ctx: Any) -> bool:
    """Whether a request speaks the 2026-07-28 era (its own envelope, no session)."""
    return getattr(ctx, "protocol_version", None) in MODERN_PROTOCOL_VERSIONS


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
        self.index = (
            index
            if index is not None
            else ToolIndex.build(source.catalog(), settings.backend, **dict(settings.backend_options))
        )
        if settings.augment is not None:  # a field named like an upstream tool's parameter: refused at start
            settings.augment.check(self.index.catalog, catalog_key=self.index.catalog.hash)
        self.sessions = SessionManager(
            self.index, store=store, max_sessions=10_000, max_discovered=settings.max_discovered
        )
        # Context handles outlive any connection: they end when idle, in the shared store when there is one.
        self._context_store = (
            store
            if store is not None and not isinstance(store, InMemorySessionStore)
            else InMemorySessionStore(
                ttl_seconds=settings.workers.session_ttl or DEFAULT_SESSION_TTL, max_sessions=10_000
            )
        )
        header = settings.workers.identity_header if settings.transport == "http" else None
        self.session_header = None if header is None else header.strip().lower()
        self.board = board or CatalogBoard()
        self.shared_index = shared_index
        # A networked store's calls block for a round trip: they run on a worker thread, off the event loop.
        self._offload = not isinstance(self.sessions.store, InMemorySessionStore)
        # per caller: open sessions, context handles, and (with Redis) the rates every worker shares
        self.caps = caller_caps(settings.auth, self.sessions.store, self._context_store)
        self._epoch_seen: str | None = None
        self.metatool = metatool or ToolSearchMetaTool()
        self.pinned, unmatched = resolve_pins(settings.pinned, self.index.catalog)
        for pattern in unmatched:
            logger.warning("pin %r matches no tool; it is ignored", pattern)
        self._set_guards()
        self.clients: dict[str, ServerSession] = {}
        self._sync_lock = anyio.Lock()
        self.handshake = HandshakeEra(self)
        self.modern = ModernEra(self, self._contexts())
        self._stable = self.modern.fingerprint()
        self.bus = InMemorySubscriptionBus()
        source.add_listener(self._upstream_changed)
        self.server: Server[Any] = _GatewayServer(
            settings.name,
            version=_version(),
            instructions=self._instructions(),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=ListenHandler(self.bus),
        )
        # The SDK checks a 2026 call's Mcp-Param-* headers against the called tool's schema; without this
        # lookup it would run the whole tools/list handler for every call to find it.
        self.server.get_tool_input_schema = self._input_schema
        self.server.add_request_handler("server/discover", types.RequestParams, self._discover)
        self.server.middleware.append(self._session_middleware)

    @property
    def stateless(self) -> bool:
        """True when handshake-era sessions are named by a request header rather than kept per connection."""
        return self.session_header is not None

    def _contexts(self) -> SessionManager:
        return SessionManager(self.index, store=self._context_store, max_sessions=10_000)

    # --- who asks, and what they may use -----------------------------------------------------

    def caller(self, ctx: Any) -> Caller:
        """The request's caller: what the HTTP authentication layer recorded, else ANONYMOUS; LOCAL on stdio."""
        request = getattr(ctx, "request", None)
        if request is None:
            return LOCAL
        return caller_of_scope(getattr(request, "scope", None)) or ANONYMOUS

    def allowed_for(self, caller: Caller) -> frozenset[str] | None:
        """The tool names `caller` may list, search and call (None: all), per the settings' policy."""
        policy = self.settings.policy
        if policy is None:
            return None
        catalog = self.index.catalog
        allowed = policy.allowed(caller, catalog)
        return None if allowed is None else frozenset(n for n in allowed if n in catalog)

    async def store_call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._offload:
            return await anyio.to_thread.run_sync(fn, *args)
        return fn(*args)

    # --- MCP handlers: each era its own -------------------------------------------------------

    def _instructions(self, *, modern: bool = False) -> str:
        servers = ", ".join(self.index.catalog.namespaces) or "none"
        text = f"This server fronts {len(self.index)} tools from these MCP servers: {servers}. "
        if modern:
            return text + (
                f"Call `{self.metatool.name}` with a short description of what you need: it returns the "
                f"definitions of the tools it finds; call one through `{CALL_TOOL}` with its name and arguments."
            )
        text += (
            f"Only a few are loaded: call `{self.metatool.name}` with a short description of what you need; "
            "the tools it finds are added to your tool list."
        )
        if self.settings.call_tool:
            text += f" If your tool list does not update, call found tools through `{CALL_TOOL}`."
        return text

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        """The input schema of a tool the 2026 era lists (its stable list, unfiltered), or None."""
        for tool in self.modern.listing(None).tools:
            if tool.name == name:
                return dict(tool.input_schema)
        return None

    async def _discover(self, ctx: Any, params: types.RequestParams) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS),
            capabilities=self.server.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=self._instructions(modern=True),
        )

    async def _session_middleware(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method not in SESSION_METHODS or is_modern(ctx):
            return await call_next(ctx)
        return await self.handshake.middleware(ctx, call_next)

    async def _list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        if not is_modern(ctx):
            return await self.handshake.list_tools(ctx, params)
        if params is not None and params.cursor is not None:
            return await self.handshake.list_tools(ctx, params)  # the same refusal: one page, no cursors
        allowed = self.allowed_for(self.caller(ctx))
        return await anyio.to_thread.run_sync(self.modern.listing, allowed)

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if not is_modern(ctx):
            return await self.handshake.call_tool(ctx, params)
        caller = self.caller(ctx)
        allowed = self.allowed_for(caller)
        name, arguments = params.name, dict(params.arguments or {})
        request = getattr(ctx, "request", None)  # None on stdio: no per-caller caps there
        owner = owner_of(getattr(request, "scope", None) or {}) if request is not None else None
        try:
            if name == self.metatool.name:  # a search may embed the query: always off the event loop
                return await anyio.to_thread.run_sync(self.modern.search, caller, allowed, arguments, owner)
            result: types.CallToolResult = await self.modern.call(
                caller, allowed, name, arguments, str(getattr(ctx, "request_id", "")), owner
            )
            return result
        except (ToolSearchError, SessionStoreError) as exc:
            logger.warning("%s failed: %s", name, exc)
            return tool_error(exc)

    # --- shared rules ---------------------------------------------------------------------------

    def exposed(self, tool: Tool) -> Tool:
        """An upstream tool as clients are shown it: with the augmented fields, when there are any."""
        augment = self.settings.augment
        return tool if augment is None else augment.extend(tool)

    def split_augmented(
        self, session: Session, name: str, arguments: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any] | None] | types.CallToolResult:
        """(the call's own arguments, its augmented values; None without an augmentation), by the
        executor's rules; the tool error when the values do not fit the augmentation's schema."""
        if self.settings.augment is None:
            return arguments, None
        call, values, problems = self.rules.split_augmented(session, ToolCall("", name, arguments))
        if problems:
            return error_result(invalid_arguments_text(name, problems))
        return dict(call.arguments), values

    def consume_augmented(self, caller: Caller, name: str, values: dict[str, Any] | None, call_id: str) -> None:
        """Log an admitted call's augmented values and hand them to the augmentation's `on_augment`."""
        if values is None:
            return
        # The operator asked to see why each call is made: one log line per call (values cut short).
        logger.info("augmented call %s by %s: %s", name, caller.key, json.dumps(values, ensure_ascii=False)[:1000])
        self.rules.consume(name, values, call_id)

    def blocked(self, tool: Tool, seen: Tool) -> types.CallToolResult:
        server, original = upstream_of(tool) or ("?", tool.name)
        what = " and ".join(definition_changes(seen, tool)) if seen is not tool else "definition"
        logger.warning(
            "refused a call to %r of MCP server %r: its %s changed after the client saw it (changedTools: block)",
            original,
            server,
            what,
        )
        return error_result(
            f"Tool {tool.name!r} (MCP server {server!r}) changed its {what} after you loaded it, and this gateway "
            f"does not call changed tools unseen. Call {self.metatool.name} to see its current definition "
            "(your tool list is updated), then decide whether to call it."
        )

    def held(self, tool: Tool) -> types.CallToolResult | None:
        """In "block" mode, the refusal of a call to a tool whose server announced a change the index
        has not caught up with (re-listing, or listed anew but not yet indexed); None when it may go.

        Everyone is held, not only sessions that saw the tool: what the index holds, which a call
        would be checked and pinned against, is no longer what the upstream runs.
        """
        origin = upstream_of(tool)
        if origin is None or self.pins.policy_for(tool) != "block":
            return None
        server, original = origin
        live = self.source.definition(tool.name)
        if not self.source.changing(server) and live is not None and live.fingerprint == tool.fingerprint:
            return None
        logger.warning(
            "held a call to %r of MCP server %r: its tools changed and are being re-read (changedTools: block)",
            original,
            server,
        )
        return error_result(
            f"MCP server {server!r} announced that its tools changed, and this gateway is re-reading them; it does "
            f"not call them unseen meanwhile, so {tool.name!r} did not run. Wait a moment, call "
            f"{self.metatool.name} to see its current definition, then decide whether to call it."
        )

    def _set_guards(self) -> None:
        """Result size cap, pinned definitions and the usage log (see toolsearch.mcp.options)."""
        options = self.settings.options
        self.options = options
        # the executor's allow/discover rules, as the gateway applies them: a tool called by name joins
        self.rules = ToolExecutor(
            metatool=self.metatool,
            config=ExecutorConfig(tool_timeout=None, undiscovered="execute", provider_names=False),
            augment=self.settings.augment,
        )
        per_server = {server.name: server.changed_tools for server in self.source.config.servers}
        self.pins = DefinitionPins(options.changed_tools, per_server)
        # Beside the session store: with Redis every worker appends to one log and credits a call to
        # the search that found it, whichever worker served either; else the file (merged) or memory.
        self.usage = GatewayUsage.from_url(
            self.index.catalog.hash,
            self.settings.workers.session_store,
            path=options.usage_file,
            enabled=options.usage_log,
        )

    # --- upstream changes ------------------------------------------------------------------------

    async def _upstream_changed(self, source: MCPToolSource, server: str) -> None:
        async with self._sync_lock:
            await self._apply_catalog(source)
        try:  # every other worker re-lists its upstreams when it sees this
            epoch = await anyio.to_thread.run_sync(self.board.publish, self.index.catalog.hash)
            self._epoch_seen = epoch.token
        except SessionStoreError as exc:
            logger.warning("could not tell the other workers about the catalog change: %s", exc)
        for session_id, client in list(self.clients.items()):
            try:
                with anyio.move_on_after(5):
                    await client.send_tool_list_changed()
            except Exception as exc:  # a gone client must not stop the others
                logger.debug("could not notify session %s: %s", session_id, exc)
        # 2026-era clients list a stable set: they hear of a change only when that set changed
        # (a pinned tool's definition, the servers named in tool_search), not of every catalog change.
        stable = await anyio.to_thread.run_sync(self.modern.fingerprint)
        if stable != self._stable:
            self._stable = stable
            await self.bus.publish(ToolsListChanged())

    async def _apply_catalog(self, source: MCPToolSource) -> None:
        catalog = source.catalog()
        if self.shared_index is None:
            await anyio.to_thread.run_sync(self.index.sync, catalog)
        else:  # the first worker to see the new catalog builds its index; the others load that one
            shared = self.shared_index
            index, _ = await anyio.to_thread.run_sync(shared.open, catalog)
            sessions = self.sessions
            self.sessions = SessionManager(
                index, store=sessions.store, max_sessions=10_000, max_discovered=sessions.max_discovered
            )
            self.index = index
        self.pinned, _ = resolve_pins(self.settings.pinned, self.index.catalog)
        self.modern.rebind(self._contexts())
        if self.settings.augment is not None:
            try:
                self.settings.augment.check(self.index.catalog, catalog_key=self.index.catalog.hash)
            except AugmentationError as exc:  # such a tool is refused whenever it would be shown or called
                logger.error("an upstream tool cannot be offered with --augment: %s", exc)

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

    async def _delete_session(self, session_id: str) -> None:
        await self.store_call(self.sessions.close, session_id)

    def _session_known(self, session_id: str) -> bool:
        return self.sessions.store.get(session_id) is not None

    def _register_session(self, session_id: str, caller: Caller) -> None:
        """A gateway-issued session id exists in the store from the moment it is issued."""
        allowed = self.allowed_for(caller)
        pins = [n for n in self.pinned if n in self.index.catalog and (allowed is None or n in allowed)]
        self.sessions.get_or_create(session_id, allowed=allowed, pinned=pins)

    # --- transports -------------------------------------------------------------------------------

    def initialization_options(self) -> Any:
        return self.server.create_initialization_options()

    async def run_stdio(self) -> None:
        """Serve one client over this process's stdin/stdout."""
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read_stream, write_stream):
            await self.serve_streams(read_stream, write_stream)

    async def serve_streams(self, read_stream: Any, write_stream: Any) -> None:
        """Serve one client over a stream pair, in the era its first request opens (the SDK's dual-era loop)."""
        from mcp.server.runner import serve_dual_era_loop

        async with self.server.lifespan(self.server) as state:
            await serve_dual_era_loop(
                self.server, read_stream, write_stream, lifespan_state=state, init_options=self.initialization_options()
            )

    def http_app(self, *, path: str = "/mcp", host: str = "127.0.0.1") -> Any:
        """An ASGI app serving streamable HTTP at `path`, both eras.

        Handshake-era sessions are per connection by default; stateless when sessions are named
        by a header, so that any worker sharing the session store can answer any request. A
        2026-era request is self-contained either way.
        """
        from mcp.server.transport_security import TransportSecuritySettings

        # Origin and Host are checked by mcp.guard on every address (run_http wraps this app with
        # mcp.auth.protect); the SDK's own check, on only for 127.0.0.1/localhost/::1, would refuse the
        # origins an operator allows with --allowed-origins there.
        checked = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        if self.session_header is None:
            app = self.server.streamable_http_app(streamable_http_path=path, host=host, transport_security=checked)
            if not self.caps.per_connection:
                return app
            idle = getattr(getattr(self.server, "_session_manager", None), "session_idle_timeout", None)
            return ConnectionCaps(app, limit=self.caps.per_connection, path=path, idle_timeout=idle)
        app = self.server.streamable_http_app(
            streamable_http_path=path, host=host, stateless_http=True, transport_security=checked
        )
        return SessionIdentity(
            app,
            header=self.session_header,
            path=path,
            on_delete=self._delete_session,
            known=lambda key: self.store_call(self._session_known, key),
            register=lambda key, caller: self.store_call(self._register_session, key, caller),
            caps=self.caps.sessions,
        )

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

        from .auth import default_resource_url, protect
        from .guard import header_timeout_protocol

        class _Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield  # the start-up code handles signals, so the upstream servers are stopped cleanly too

        auth = self.settings.auth
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
            http=header_timeout_protocol(auth.header_timeout),
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
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
