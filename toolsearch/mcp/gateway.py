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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND

from .._errors import ToolSearchError
from ..catalog import Catalog
from ..executor import ExecutorConfig, ToolExecutor, argument_problems
from ..index import ToolIndex
from ..metatool import MetaToolOutcome, ToolSearchMetaTool
from ..providers import ToolCall
from ..session import Session, SessionManager
from ..tools import Tool
from .options import GatewayOptions, add_option_arguments
from .pinning import DefinitionPins
from .source import MCPToolSource, _leaf, definition_changes, error_result, mcp_definition, upstream_of
from .usage_feed import GatewayUsage

__all__ = ["Gateway", "serve", "aserve", "add_mcp_arguments", "DEFAULT_BACKEND", "CALL_TOOL"]

logger = logging.getLogger("toolsearch.mcp")

DEFAULT_BACKEND = "bm25"  # starts in milliseconds; "auto" picks hybrid when the vector extra is present
CALL_TOOL = "call_tool"
_SESSION_KEY = "toolsearch.session"
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
        options: GatewayOptions | None = None,
    ) -> None:
        self.source = source
        self.index = (
            index if index is not None else ToolIndex.build(source.catalog(), backend, **dict(backend_options or {}))
        )
        self.sessions = SessionManager(self.index, max_sessions=10_000, max_discovered=max_discovered)
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

    def _session(self, ctx: Any) -> Session:
        """This connection's session, created on its first request and closed with the connection."""
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
        pins = [n for n in self.pinned if n in self.index.catalog]
        return self.sessions.get_or_create(session_id, pinned=pins)

    async def _close(self, session_id: str) -> None:
        self._clients.pop(session_id, None)
        self.sessions.close(session_id)

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
            await anyio.to_thread.run_sync(self.index.sync, source.catalog())
            self.pinned, _ = resolve_pins(self._pin_patterns, self.index.catalog)
        for session_id, client in list(self._clients.items()):
            try:
                with anyio.move_on_after(5):
                    await client.send_tool_list_changed()
            except Exception as exc:  # a gone client must not stop the others
                logger.debug("could not notify session %s: %s", session_id, exc)

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
        """A Starlette app serving streamable HTTP at `path` (one session per client)."""
        return self.server.streamable_http_app(streamable_http_path=path, host=host)

    async def run_http(
        self, *, host: str = "127.0.0.1", port: int = 0, path: str = "/mcp", announce: Any = None
    ) -> None:
        """Serve streamable HTTP until cancelled; `announce(url)` is called once the socket listens."""
        import uvicorn

        class _Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield  # aserve handles signals, so the upstream servers are stopped cleanly too

        app = self.http_app(path=path, host=host)
        server = _Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))

        failed: list[str] = []

        async def run() -> None:
            with anyio.CancelScope(shield=True):  # a cancel asks uvicorn to finish, it is not torn down
                try:
                    await server.serve()
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


async def _no_discover(ctx: Any, params: types.RequestParams) -> types.DiscoverResult:
    raise MCPError(code=METHOD_NOT_FOUND, message="Method not found: this gateway speaks the initialize handshake")


def _version() -> str:
    from .. import __version__

    return __version__


# --- entry points -----------------------------------------------------------------------------------


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
    options: GatewayOptions | None = None,
) -> None:
    """Start the upstream servers, index their tools, and serve the gateway until stopped.

    `errlog` receives the stdio upstream servers' stderr (default: this process's stderr).
    """
    if transport not in ("stdio", "http"):
        raise ToolSearchError(f"unknown transport {transport!r}; use 'stdio' or 'http'")
    try:
        await _serve(
            config_path, transport, host, port, path, backend, pinned, max_discovered, call_tool, announce, errlog,
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
    options: GatewayOptions | None = None,
) -> None:
    async with MCPToolSource(config_path, errlog=errlog or sys.stderr) as source, anyio.create_task_group() as tg:
        tg.start_soon(_stop_on_signal, tg.cancel_scope)
        if not source.ready:
            failures = "; ".join(f"{n}: {r}" for n, r in source.failures.items())
            raise ToolSearchError(f"no MCP server in {config_path} could be started ({failures})")
        try:
            gateway = await anyio.to_thread.run_sync(
                lambda: Gateway(
                    source, backend=backend, pinned=pinned, max_discovered=max_discovered, call_tool=call_tool,
                    options=options,
                )
            )
        except ImportError as exc:
            raise ToolSearchError(f"cannot build the {backend!r} index: {exc}") from None
        logger.info(
            "gateway ready: %d tools from %d servers (%s index)",
            len(gateway.index),
            len(source.ready),
            gateway.index.backend_name,
        )
        if transport == "stdio":
            await gateway.run_stdio()  # returns when the client closes stdin
        else:
            await gateway.run_http(host=host, port=port, path=path, announce=announce)
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
    options: GatewayOptions | None = None,
) -> None:
    """Blocking `aserve`; over HTTP the listening URL is printed to stderr.

    `quiet`: only errors on stderr, and the upstream servers' stderr is discarded.
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.ERROR if quiet else logging.INFO,
            stream=sys.stderr,
            format="toolsearch: %(message)s",
        )
        logging.getLogger("mcp").setLevel(logging.WARNING)
        logging.getLogger("httpx2").setLevel(logging.WARNING)

    def announce(url: str) -> None:
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
