"""The tool-search gateway: one MCP server in front of many, exposing tools as each client finds them."""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import logging
import os
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND

from .._errors import SessionError, SessionStoreError, ToolSearchError
from ..catalog import Catalog
from ..executor import ExecutorConfig, ToolExecutor, argument_problems
from ..index import ToolIndex
from ..metatool import MetaToolOutcome, ToolSearchMetaTool
from ..providers import ToolCall
from ..session import Session, SessionManager
from ..stores import InMemorySessionStore, SessionStore
from ..tools import Tool
from .identity import MCP_SESSION_HEADER, SessionIdentity, session_key
from .options import GatewayOptions, add_option_arguments
from .pinning import DefinitionPins
from .shared import CatalogBoard, SharedIndex
from .source import MCPToolSource, _leaf, definition_changes, error_result, mcp_definition, upstream_of
from .usage_feed import GatewayUsage

__all__ = ["Gateway", "serve", "aserve", "add_mcp_arguments", "WorkerSettings", "DEFAULT_BACKEND", "CALL_TOOL"]

logger = logging.getLogger("toolsearch.mcp")

DEFAULT_BACKEND = "bm25"  # starts in milliseconds; "auto" picks hybrid when the vector extra is present
CALL_TOOL = "call_tool"
DEFAULT_SESSION_TTL = 3600.0  # stateless sessions have no connection to close them: they end when idle this long
_SESSION_KEY = "toolsearch.session"
_SESSION_METHODS = frozenset({"tools/list", "tools/call"})
# The session view of the request being served: read once before the handler, written once after.
_CURRENT: ContextVar[Session | None] = ContextVar("toolsearch_gateway_session", default=None)
T = TypeVar("T")
_CALL_TOOL_HINT = (
    "If these tools do not appear in your tool list, call them through `{call}` with "
    '{{"name": "<tool name>", "arguments": {{...}}}}.'
)


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def _compact_schema(tool: Tool) -> str:
    import json

    return json.dumps(dict(tool.input_schema), separators=(",", ":"), ensure_ascii=False)


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


class Gateway:
    """An MCP server whose clients start with `tool_search` and gain the tools they find.

    Each client connection is its own session over one shared index of every upstream tool. After a
    search the found tools join that client's tool list and the gateway sends
    `notifications/tools/list_changed`; `call_tool` reaches any tool for clients that ignore list
    changes. Calls go to the owning upstream under its original name; failures are tool errors.

    Stateless workers: with `session_header` set, the HTTP transport keeps nothing per connection;
    each request names its session by that header (the gateway issues `mcp-session-id` itself when
    that is the header) and the session lives in `store` (e.g. Redis), so any worker sharing the
    store answers any request. `board` spreads catalog changes between workers.
    """

    def __init__(
        self,
        source: MCPToolSource,
        *,
        backend: str = DEFAULT_BACKEND,
        index: ToolIndex | None = None,
        pinned: Iterable[str] = (),
        max_discovered: int | None = None,
        call_tool: bool = True,
        metatool: ToolSearchMetaTool | None = None,
        name: str = "toolsearch",
        backend_options: Mapping[str, Any] | None = None,
        store: SessionStore | None = None,
        session_header: str | None = None,
        board: CatalogBoard | None = None,
        shared_index: SharedIndex | None = None,
        options: GatewayOptions | None = None,
    ) -> None:
        self.source = source
        self.index = (
            index if index is not None else ToolIndex.build(source.catalog(), backend, **dict(backend_options or {}))
        )
        self.sessions = SessionManager(self.index, store=store, max_sessions=10_000, max_discovered=max_discovered)
        self.session_header = None if session_header is None else session_header.strip().lower()
        self.board = board or CatalogBoard()
        self.shared_index = shared_index
        # A networked store's calls block for a round trip: they run on a worker thread, off the event loop.
        self._offload = not isinstance(self.sessions.store, InMemorySessionStore)
        self._epoch_seen: str | None = None
        self.metatool = metatool or ToolSearchMetaTool()
        self.call_tool_enabled = call_tool
        self.pinned, unmatched = resolve_pins(pinned, self.index.catalog)
        for pattern in unmatched:
            logger.warning("pin %r matches no tool; it is ignored", pattern)
        self._pin_patterns = list(pinned)
        self._set_guards(options or GatewayOptions())
        self._clients: dict[str, ServerSession] = {}
        self._sync_lock = anyio.Lock()
        source.add_listener(self._upstream_changed)
        self.server: Server[Any] = _GatewayServer(
            name,
            version=_version(),
            instructions=self._instructions(),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        # Progressive exposure needs per-connection state and list_changed notifications, which the
        # stateless 2026-07-28 era does not carry; refusing `server/discover` makes modern clients
        # fall back to the initialize handshake (up to 2025-11-25), which has both.
        self.server.add_request_handler("server/discover", types.RequestParams, _no_discover)
        self.server.middleware.append(self._session_middleware)

    @property
    def stateless(self) -> bool:
        """True when sessions are named by a request header rather than kept per connection."""
        return self.session_header is not None

    # --- sessions ---------------------------------------------------------------------------

    def _instructions(self) -> str:
        servers = ", ".join(self.index.catalog.namespaces) or "none"
        text = (
            f"This server fronts {len(self.index)} tools from these MCP servers: {servers}. Only a few are loaded: "
            f"call `{self.metatool.name}` with a short description of what you need; the tools it finds are "
            "added to your tool list."
        )
        if self.call_tool_enabled:
            text += f" If your tool list does not update, call found tools through `{CALL_TOOL}`."
        return text

    async def _store_call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._offload:
            return await anyio.to_thread.run_sync(fn, *args)
        return fn(*args)

    def _session_id(self, ctx: Any) -> str:
        """The store id of the session a request belongs to."""
        if self.session_header is not None:
            headers = getattr(getattr(ctx, "request", None), "headers", None)
            value = headers.get(self.session_header) if headers is not None else None
            if not isinstance(value, str) or not value.strip():
                raise MCPError(
                    code=INVALID_REQUEST,
                    message=f"this gateway identifies sessions by the {self.session_header!r} header, which the "
                    "request lacks; send it on every request",
                )
            return session_key(self.session_header, value.strip())
        connection = getattr(ctx.session, "_connection", None)
        state = getattr(connection, "state", None)
        if isinstance(state, dict):
            session_id = state.get(_SESSION_KEY)
            if session_id is None:
                session_id = uuid.uuid4().hex
                state[_SESSION_KEY] = session_id
                connection.exit_stack.push_async_callback(self._close, session_id)  # type: ignore[union-attr]
        else:
            # An SDK without per-connection state: key on the server-side session object, never on a
            # client-supplied header, so one client cannot read or take over another's discoveries.
            # Such sessions end by the manager's TTL/LRU bound; forget their clients with them.
            session_id = f"connection-{id(ctx.session)}"
            live = set(self.sessions.ids())
            for stale in [s for s in self._clients if s not in live and s != session_id]:
                del self._clients[stale]
        self._clients[session_id] = ctx.session
        return str(session_id)

    def _open(self, session_id: str) -> Session:
        """A view of the session: one store read (two more on its first request, to create it)."""
        sessions = self.sessions
        state = sessions.store.get(session_id)
        if state is None:
            pins = [n for n in self.pinned if n in self.index.catalog]
            return sessions.get_or_create(session_id, pinned=pins).view()
        return Session(sessions, state, snapshot=True).view()

    async def _commit(self, session: Session) -> None:
        if session._pending:  # nothing changed: no thread hop, no store round trip
            await self._store_call(session.commit)

    async def _session_middleware(self, ctx: Any, call_next: Any) -> Any:
        """Around tools/list and tools/call: read the session once before, write it once after.

        The handler works on a view; its changes reach the store in one atomic update (earlier
        when it notifies the client, see `_notify_changed`). A store that fails leaves the session
        as it was, and the client gets an error naming the store and saying what to do.
        """
        if ctx.method not in _SESSION_METHODS:
            return await call_next(ctx)
        answered = False
        try:
            session = await self._store_call(self._open, self._session_id(ctx))
            token = _CURRENT.set(session)
            try:
                result = await call_next(ctx)
                answered = True
            finally:
                _CURRENT.reset(token)
            await self._commit(session)
        except SessionError as exc:
            if answered and ctx.method == "tools/call":
                # The tool ran: an error now would invite the model to run it again. What is lost is
                # bookkeeping (last-use ticks); a change the client was told of was written before.
                logger.warning("tools/call answered, but its session update was not saved: %s", exc)
                return result
            logger.warning("%s failed: %s", ctx.method, exc)
            raise MCPError(code=INTERNAL_ERROR, message=_store_failure(exc)) from None
        return result

    def _session(self, ctx: Any) -> Session:
        """The session view of the request being served (the middleware opened it)."""
        current = _CURRENT.get()
        if current is not None:
            return current
        pins = [n for n in self.pinned if n in self.index.catalog]  # outside a request: a plain handle
        return self.sessions.get_or_create(self._session_id(ctx), pinned=pins)

    async def _close(self, session_id: str) -> None:
        self._clients.pop(session_id, None)
        try:
            await self._store_call(self.sessions.close, session_id)
        except SessionStoreError as exc:  # the store's idle expiry ends it instead
            logger.warning("could not close session %s: %s", session_id, exc)

    def _visible(self, session: Session) -> list[Tool]:
        meta = [self.metatool.definition(session)]
        if self.call_tool_enabled:
            meta.append(self._call_tool_definition())
        return meta + session.visible_tools()

    def _call_tool_definition(self) -> Tool:
        return Tool(
            name=CALL_TOOL,
            description=(
                f"Call a tool that {self.metatool.name} found, by name. Use it when found tools do not appear "
                "in your tool list; a call with wrong arguments returns the tool's input schema."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": f"The tool's name as {self.metatool.name} returned it"},
                    "arguments": {"type": "object", "description": "The tool's arguments"},
                },
                "required": ["name"],
            },
        )

    # --- MCP handlers -------------------------------------------------------------------------

    async def _list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        if params is not None and params.cursor is not None:
            # The list is always one page, so any cursor is one we never issued.
            raise MCPError(
                code=INVALID_PARAMS,
                message="tools/list: unknown cursor; this server lists every tool in one page, call it without one",
            )
        session = self._session(ctx)
        return await anyio.to_thread.run_sync(self._listing, session)  # store reads and writes: off the loop

    def _listing(self, session: Session) -> types.ListToolsResult:
        visible = self._visible(session)
        pins = self.pins.record(session, [t for t in visible if t.metadata.get("mcp")])
        tools: list[types.Tool] = []
        for tool in visible:
            if tool.metadata.get("mcp"):  # an upstream tool: the definition this session saw (see pinning)
                tools.append(mcp_definition(self.pins.view(tool, pins).shown))
            else:
                tools.append(types.Tool.model_validate(tool.to_mcp()))
        return types.ListToolsResult(tools=tools)

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        session = self._session(ctx)
        name, arguments = params.name, dict(params.arguments or {})
        if name == self.metatool.name:
            return await self._search(ctx, session, arguments)
        if name == CALL_TOOL and self.call_tool_enabled:
            target = arguments.get("name")
            inner = arguments.get("arguments") or {}
            if not isinstance(target, str) or not target:
                return error_result(f'{CALL_TOOL} needs "name": the name of a tool {self.metatool.name} found.')
            if not isinstance(inner, Mapping):
                return error_result(f'{CALL_TOOL}: "arguments" must be a JSON object of the tool\'s arguments.')
            return await self._forward(ctx, session, target, dict(inner), via_call_tool=True)
        return await self._forward(ctx, session, name, arguments, via_call_tool=False)

    async def _search(self, ctx: Any, session: Session, arguments: dict[str, Any]) -> types.CallToolResult:
        before = session.discovered
        try:
            outcome, repinned = await anyio.to_thread.run_sync(self._run_search, session, arguments)
        except ToolSearchError as exc:
            return error_result(f"{self.metatool.name} failed: {exc}")
        text = outcome.text
        if outcome.ok and outcome.tools and self.call_tool_enabled:
            text += "\n" + _CALL_TOOL_HINT.format(call=CALL_TOOL)
        if session.discovered != before or repinned:
            await self._notify_changed(ctx)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=not outcome.ok)

    def _run_search(self, session: Session, arguments: dict[str, Any]) -> tuple[MetaToolOutcome, bool]:
        """Search, then re-pin the session's tools to their current definitions (it is shown them
        again) and feed the usage log; True as the second value when a definition it saw changed."""
        outcome = self.metatool.run(session, arguments)
        if not outcome.ok:
            return outcome, False
        loaded = [t for t in session.visible_tools() if t.metadata.get("mcp")]
        before = self.pins.pins_of(session.state())
        after = self.pins.record(session, loaded, refresh=True)
        repinned = any(name in before and before[name] != after.get(name) for name in (t.name for t in loaded))
        self.usage.catalog_changed(self.index.catalog.hash)
        self.usage.searched(session.id, outcome.query, [t.name for t in outcome.tools] + list(outcome.already_loaded))
        return outcome, repinned

    async def _notify_changed(self, ctx: Any) -> None:
        # Write the change first: a notified client lists its tools next, maybe through another worker.
        current = _CURRENT.get()
        if current is not None:
            await self._commit(current)
        # Request-scoped, so over HTTP it rides this call's response stream ahead of the result.
        try:
            await ctx.session.send_notification(types.ToolListChangedNotification(), related_request_id=ctx.request_id)
        except Exception as exc:  # the call itself succeeded
            logger.warning("could not send tools/list_changed: %s", exc)

    async def _forward(
        self, ctx: Any, session: Session, name: str, arguments: dict[str, Any], *, via_call_tool: bool
    ) -> types.CallToolResult:
        if via_call_tool and name in (self.metatool.name, CALL_TOOL):
            return error_result(f"{name} cannot be called through {CALL_TOOL}; call it directly.")
        admitted = await anyio.to_thread.run_sync(self._admit, session, name, arguments)
        if isinstance(admitted, types.CallToolResult):
            return admitted
        if admitted:  # a tool called by name joins this session's list, like a found one
            await self._notify_changed(ctx)
        result = await self.source.call_tool(name, arguments, max_result_bytes=self.options.max_result_bytes)
        self.usage.called(session.id, name, not result.is_error)
        if via_call_tool and result.structured_content is not None and not result.content:
            import json

            text = json.dumps(result.structured_content, ensure_ascii=False)
            result = result.model_copy(update={"content": [types.TextContent(type="text", text=text)]})
        return result

    def _admit(self, session: Session, name: str, arguments: dict[str, Any]) -> types.CallToolResult | bool:
        """The rules before a call: the executor's allow and discover rules (a tool called by name
        joins the session), not blocked as changed, arguments valid (the executor's check). A refusal
        as a tool error, else True when the tool joined the session's list."""
        joined = not session.is_visible(name)
        refused = self.rules.admit(session, ToolCall("", name, arguments))
        if refused is not None:
            return error_result(refused.content)
        tool = self.index.catalog.get(name)
        if tool is None:  # removed by an upstream change a moment ago
            return error_result(f"Tool {name!r} is no longer offered. Call {self.metatool.name} to find another.")
        pinned = self.pins.view(tool, self.pins.record(session, [tool]))  # a first call is a first sighting
        if pinned.blocked:
            return self._blocked(tool, pinned.shown)
        problems = argument_problems(tool, arguments)
        if problems:
            return error_result(
                f"Arguments for {name!r} do not match its input schema: {'; '.join(problems)}. Fix them and call "
                f"it again. Schema: {_compact_schema(tool)}"
            )
        if not joined:
            session.touch([name])
        return joined

    def _blocked(self, tool: Tool, seen: Tool) -> types.CallToolResult:
        server, original = upstream_of(tool) or ("?", tool.name)
        what = " and ".join(definition_changes(seen, tool)) if seen is not tool else "definition"
        logger.warning(
            "refused a call to %r of MCP server %r: its %s changed after the session loaded it (changedTools: block)",
            original,
            server,
            what,
        )
        return error_result(
            f"Tool {tool.name!r} (MCP server {server!r}) changed its {what} after you loaded it, and this gateway "
            f"does not call changed tools unseen. Call {self.metatool.name} to see its current definition "
            "(your tool list is updated), then decide whether to call it."
        )

    def _set_guards(self, options: GatewayOptions) -> None:
        """Result size cap, pinned definitions and the usage log (see toolsearch.mcp.options)."""
        self.options = options
        # the executor's allow/discover rules, as the gateway applies them: a tool called by name joins
        self.rules = ToolExecutor(
            metatool=self.metatool,
            config=ExecutorConfig(tool_timeout=None, undiscovered="execute", provider_names=False),
        )
        per_server = {server.name: server.changed_tools for server in self.source.config.servers}
        self.pins = DefinitionPins(options.changed_tools, per_server)
        self.usage = GatewayUsage.from_file(self.index.catalog.hash, options.usage_file, enabled=options.usage_log)

    # --- upstream changes ------------------------------------------------------------------------

    async def _upstream_changed(self, source: MCPToolSource, server: str) -> None:
        async with self._sync_lock:
            await self._apply_catalog(source)
        try:  # every other worker re-lists its upstreams when it sees this
            epoch = await anyio.to_thread.run_sync(self.board.publish, self.index.catalog.hash)
            self._epoch_seen = epoch.token
        except SessionStoreError as exc:
            logger.warning("could not tell the other workers about the catalog change: %s", exc)
        for session_id, client in list(self._clients.items()):
            try:
                with anyio.move_on_after(5):
                    await client.send_tool_list_changed()
            except Exception as exc:  # a gone client must not stop the others
                logger.debug("could not notify session %s: %s", session_id, exc)

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
        self.pinned, _ = resolve_pins(self._pin_patterns, self.index.catalog)

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
        await self._store_call(self.sessions.close, session_id)

    # --- transports -------------------------------------------------------------------------------

    def initialization_options(self) -> Any:
        return self.server.create_initialization_options()

    async def run_stdio(self) -> None:
        """Serve one client over this process's stdin/stdout."""
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read_stream, write_stream):
            await self.serve_streams(read_stream, write_stream)

    async def serve_streams(self, read_stream: Any, write_stream: Any) -> None:
        """Serve one client over a stream pair, in the initialize-handshake era only.

        `Server.run` lets the client's first request pick the connection's era for good, so a
        client probing with `server/discover` would lock the pipe to the 2026 era and could not
        fall back to `initialize`. `serve_loop` (what the HTTP session manager runs per session)
        serves only the handshake era: the probe gets our -32601 and the fallback works.
        """
        from mcp.server.runner import serve_loop

        async with self.server.lifespan(self.server) as state:
            await serve_loop(
                self.server, read_stream, write_stream, lifespan_state=state, init_options=self.initialization_options()
            )

    def http_app(self, *, path: str = "/mcp", host: str = "127.0.0.1") -> Any:
        """An ASGI app serving streamable HTTP at `path`.

        Per connection (one session per client) by default; stateless when sessions are named by
        a header, so that any worker sharing the session store can answer any request.
        """
        if self.session_header is None:
            return self.server.streamable_http_app(streamable_http_path=path, host=host)
        app = self.server.streamable_http_app(streamable_http_path=path, host=host, stateless_http=True)
        return SessionIdentity(app, header=self.session_header, path=path, on_delete=self._delete_session)

    async def run_http(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        path: str = "/mcp",
        announce: Any = None,
        reuse_port: bool = False,
    ) -> None:
        """Serve streamable HTTP until cancelled; `announce(url)` is called once the socket listens.

        `reuse_port` binds with SO_REUSEPORT, so several worker processes listen on one port and
        the kernel spreads connections between them.
        """
        import uvicorn

        class _Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield  # aserve handles signals, so the upstream servers are stopped cleanly too

        app = self.http_app(path=path, host=host)
        server = _Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
        sockets = [reuse_port_socket(host, port)] if reuse_port else None

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
                bound = server.servers[0].sockets[0].getsockname()[1] if server.servers else port
                if announce is not None:
                    announce(f"http://{host}:{bound}{path}")
                await anyio.sleep_forever()
            finally:
                server.should_exit = True


class _GatewayServer(Server[Any]):
    """The SDK's server, advertising `tools.listChanged` on every transport.

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


def reuse_port_socket(host: str, port: int) -> Any:
    """A socket bound (not listening) with SO_REUSEPORT, so several gateway processes can share the port."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ToolSearchError(
            f"cannot listen on {host}:{port}: {exc} (is the port in use? --port 0 picks a free one)"
        ) from None
    return sock


def _redacted(url: str) -> str:
    from ..stores.redis import redacted_url

    return url if _is_memory(url) else redacted_url(url)


def _store_failure(exc: BaseException) -> str:
    if isinstance(exc, SessionStoreError):
        return f"toolsearch gateway: {exc}. This request changed nothing; retry once the session store answers."
    return f"toolsearch gateway: {exc}"


async def _no_discover(ctx: Any, params: types.RequestParams) -> types.DiscoverResult:
    raise MCPError(code=METHOD_NOT_FOUND, message="Method not found: this gateway speaks the initialize handshake")


def _version() -> str:
    from .. import __version__

    return __version__


# --- entry points -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """How a gateway process shares its state: session store, session identity, index folder, workers."""

    session_store: str = "memory"
    session_header: str | None = None
    session_ttl: float | None = None
    index_dir: Path | None = None
    catalog_poll: float = 1.0
    reuse_port: bool = False  # set in the worker processes of `--workers N`

    @property
    def shared_store(self) -> bool:
        return not _is_memory(self.session_store)

    @property
    def identity_header(self) -> str | None:
        """The header naming each request's session, or None for one session per connection."""
        if self.session_header:
            return self.session_header
        return MCP_SESSION_HEADER if self.shared_store else None


def _is_memory(url: str) -> bool:
    return url in ("memory", "memory://")


def open_store(settings: WorkerSettings) -> SessionStore | None:
    """The session store the settings name (None: the gateway's default in-memory store)."""
    from ..stores import store_from_url

    ttl = settings.session_ttl
    if not settings.shared_store:
        return (
            None
            if ttl is None and settings.session_header is None
            else InMemorySessionStore(ttl_seconds=ttl or DEFAULT_SESSION_TTL, max_sessions=10_000)
        )
    # More connections than the threads that may call the store at once (anyio's default limit is 40),
    # so a burst of requests waits for Redis, not for a free connection.
    store = store_from_url(settings.session_store, ttl_seconds=ttl or DEFAULT_SESSION_TTL, max_connections=48)
    ping = getattr(store, "ping", None)
    if ping is not None:
        try:
            ping()
        except SessionStoreError as exc:  # start anyway: requests fail clearly until the store is back
            logger.warning("%s", exc)
    return store


async def aserve(
    config_path: str | Path,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 0,
    path: str = "/mcp",
    backend: str = DEFAULT_BACKEND,
    pinned: Sequence[str] = (),
    max_discovered: int | None = None,
    call_tool: bool = True,
    announce: Any = None,
    errlog: TextIO | None = None,
    workers: WorkerSettings | None = None,
    options: GatewayOptions | None = None,
) -> None:
    """Start the upstream servers, index their tools, and serve the gateway until stopped.

    `errlog` receives the stdio upstream servers' stderr (default: this process's stderr);
    `workers` says how state is shared with other gateway processes; `options` holds the
    `Gateway` keyword arguments.
    """
    if transport not in ("stdio", "http"):
        raise ToolSearchError(f"unknown transport {transport!r}; use 'stdio' or 'http'")
    settings = workers or WorkerSettings()
    if settings.session_header and transport != "http":
        raise ToolSearchError("--session-header names an HTTP header: use it with --transport http")
    try:
        await _serve(
            config_path,
            transport,
            host,
            port,
            path,
            backend,
            pinned,
            max_discovered,
            call_tool,
            announce,
            errlog,
            settings,
            options,
        )
    except BaseExceptionGroup as group:  # task groups wrap errors; callers expect ours unwrapped
        leaf = _leaf(group)
        if isinstance(leaf, ToolSearchError | OSError):
            raise leaf from None
        raise


async def _serve(
    config_path: str | Path,
    transport: str,
    host: str,
    port: int,
    path: str,
    backend: str,
    pinned: Sequence[str],
    max_discovered: int | None,
    call_tool: bool,
    announce: Any,
    errlog: TextIO | None,
    settings: WorkerSettings,
    options: GatewayOptions | None,
) -> None:
    from .shared import board_from_url

    store = open_store(settings)
    board = board_from_url(settings.session_store) if settings.shared_store else CatalogBoard()
    async with MCPToolSource(config_path, errlog=errlog or sys.stderr) as source, anyio.create_task_group() as tg:
        tg.start_soon(_stop_on_signal, tg.cancel_scope)
        if not source.ready:
            failures = "; ".join(f"{n}: {r}" for n, r in source.failures.items())
            raise ToolSearchError(f"no MCP server in {config_path} could be started ({failures})")
        shared = None
        if settings.index_dir is not None:
            shared = SharedIndex(settings.index_dir, backend, None)
        try:
            index = None if shared is None else (await anyio.to_thread.run_sync(shared.open, source.catalog()))[0]
            gateway = await anyio.to_thread.run_sync(
                lambda: Gateway(
                    source,
                    backend=backend,
                    index=index,
                    pinned=pinned,
                    max_discovered=max_discovered,
                    call_tool=call_tool,
                    store=store,
                    session_header=settings.identity_header if transport == "http" else None,
                    board=board,
                    shared_index=shared,
                    options=options,
                )
            )
        except ImportError as exc:
            raise ToolSearchError(f"cannot build the {backend!r} index: {exc}") from None
        logger.info(
            "gateway ready: %d tools from %d servers (%s index, %s sessions)",
            len(gateway.index),
            len(source.ready),
            gateway.index.backend_name,
            f"stateless, {_redacted(settings.session_store)}" if gateway.stateless else "per-connection",
        )
        if settings.shared_store:
            tg.start_soon(gateway.watch_catalog, settings.catalog_poll)
        try:
            if transport == "stdio":
                await gateway.run_stdio()  # returns when the client closes stdin
            else:
                await gateway.run_http(
                    host=host, port=port, path=path, announce=announce, reuse_port=settings.reuse_port
                )
        finally:
            board.close()
        tg.cancel_scope.cancel()


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


def serve(
    config_path: str | Path,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 0,
    path: str = "/mcp",
    backend: str = DEFAULT_BACKEND,
    pinned: Sequence[str] = (),
    max_discovered: int | None = None,
    call_tool: bool = True,
    quiet: bool = False,
    workers: WorkerSettings | None = None,
    options: GatewayOptions | None = None,
) -> None:
    """Blocking `aserve`; over HTTP the listening URL is printed to stderr.

    `quiet`: only errors on stderr, and the upstream servers' stderr is discarded.
    """
    configure_logging(quiet)
    child = workers is not None and workers.reuse_port

    def announce(url: str) -> None:
        if child:  # one of `--workers N`: the parent announces the port once every worker listens
            print(f"ready {url}", flush=True)
        else:
            print(f"toolsearch gateway listening on {url}", file=sys.stderr, flush=True)

    _INTERRUPTED.clear()
    with contextlib.ExitStack() as stack:
        # The upstream servers write to the file descriptor they inherit: a quiet gateway hands them /dev/null.
        errlog = stack.enter_context(open(os.devnull, "w")) if quiet else sys.stderr
        anyio.run(
            lambda: aserve(
                config_path,
                transport=transport,
                host=host,
                port=port,
                path=path,
                backend=backend,
                pinned=pinned,
                max_discovered=max_discovered,
                call_tool=call_tool,
                announce=announce,
                errlog=errlog,
                workers=workers,
                options=options,
            )
        )
    if _INTERRUPTED.is_set():
        raise KeyboardInterrupt


def add_mcp_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `toolsearch mcp serve`."""
    parser.add_argument(
        "--config",
        "-c",
        required=True,
        type=Path,
        metavar="FILE",
        help='servers config in the {"mcpServers": {...}} format',
    )
    parser.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (default; for clients that launch the gateway) or streamable HTTP",
    )
    parser.add_argument("--host", default="127.0.0.1", help="HTTP: interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP: port (default 8000; 0 picks a free one)")
    parser.add_argument("--path", default="/mcp", help="HTTP: endpoint path (default /mcp)")
    parser.add_argument(
        "--backend", default=DEFAULT_BACKEND, help="search backend: bm25 (default), regex, vector, hybrid or auto"
    )
    parser.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="TOOL",
        help="always show this tool: a name (time__get_current_time), a server name, or a glob; repeatable",
    )
    parser.add_argument(
        "--max-discovered",
        type=int,
        default=None,
        metavar="N",
        help="at most N found tools per client; the least recently used are unloaded",
    )
    parser.add_argument(
        "--no-call-tool",
        action="store_true",
        help=f"do not offer the {CALL_TOOL} passthrough (for clients that follow list changes)",
    )
    add_option_arguments(parser)
