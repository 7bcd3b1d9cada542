"""MCP servers as a tool source: connect, list every page, namespace the tools, route calls, follow changes."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TextIO

import anyio
import anyio.abc
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from mcp_types.version import LATEST_MODERN_VERSION
from pydantic import ValidationError

from .._errors import InvalidToolError, UpstreamError
from ..catalog import Catalog
from ..tools import Tool, provider_safe_name
from .config import DEFAULT_MAX_RESULT_BYTES, MCPConfig, ServerConfig, load_config, parse_config

__all__ = [
    "SEPARATOR",
    "MCPToolSource",
    "UpstreamServer",
    "UpstreamError",
    "CollectedTools",
    "collect_tools",
    "namespaced_name",
    "tool_from_mcp",
    "upstream_of",
    "mcp_definition",
    "error_result",
]

logger = logging.getLogger("toolsearch.mcp")

SEPARATOR = "__"
"""Between server and tool name: `time__get_current_time`. Provider-safe, and rare inside tool names."""

RESTART_WINDOW = 60.0  # seconds: a server that crashes sooner than this after starting is crash-looping
MAX_PAGES = 1_000  # a server whose cursor never ends cannot hang startup
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")

State = Literal["idle", "starting", "ready", "failed", "crashed", "stopped"]
ChangeListener = Callable[["UpstreamServer"], Awaitable[None]]


# --- tools ------------------------------------------------------------------------------------


def namespaced_name(server: str, tool: str, *, separator: str = SEPARATOR) -> str:
    """The name a tool gets in the combined catalog: `<server><separator><tool>`, provider-safe."""
    prefix = _UNSAFE.sub("_", server).strip("_") or "server"
    return provider_safe_name(f"{prefix}{separator}{tool}")


def tool_from_mcp(definition: Any, server: str, *, separator: str = SEPARATOR) -> Tool:
    """Convert one upstream MCP tool; the original name and output schema stay in `metadata["mcp"]`."""
    data = (
        definition.model_dump(by_alias=True, exclude_none=True, mode="json")
        if hasattr(definition, "model_dump")
        else dict(definition)
    )
    base = Tool.from_mcp(data, namespace=server)
    origin: dict[str, Any] = {"server": server, "name": base.name}
    if isinstance(data.get("outputSchema"), Mapping):
        origin["outputSchema"] = data["outputSchema"]
    return Tool(
        name=namespaced_name(server, base.name, separator=separator),
        description=base.description,
        input_schema=base.input_schema,
        namespace=server,
        tags=base.tags,
        metadata={**base.metadata, "mcp": origin},
    )


def upstream_of(tool: Tool) -> tuple[str, str] | None:
    """(server, original tool name) for a tool that came from an MCP server, else None."""
    origin = tool.metadata.get("mcp")
    if isinstance(origin, Mapping) and isinstance(origin.get("server"), str) and isinstance(origin.get("name"), str):
        return origin["server"], origin["name"]
    return None


def mcp_definition(tool: Tool) -> types.Tool:
    """The MCP `Tool` a gateway client sees: our name, the upstream's schema, title, annotations."""
    origin = tool.metadata.get("mcp")
    extra: dict[str, Any] = {}
    if isinstance(tool.metadata.get("title"), str):
        extra["title"] = tool.metadata["title"]
    if isinstance(tool.metadata.get("annotations"), Mapping):
        extra["annotations"] = tool.metadata["annotations"]
    if isinstance(origin, Mapping) and isinstance(origin.get("outputSchema"), Mapping):
        extra["outputSchema"] = origin["outputSchema"]
    data = {"name": tool.name, "description": tool.description, "inputSchema": dict(tool.input_schema), **extra}
    return types.Tool.model_validate(data, by_name=False)


def error_result(message: str) -> types.CallToolResult:
    """A tool result the model reads as an error (`isError`), never a protocol failure."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def definition_changes(old: Tool, new: Tool) -> list[str]:
    """What differs between two definitions of one tool, in words for a log line."""
    changes = []
    if old.description != new.description:
        changes.append("description")
    if dict(old.input_schema) != dict(new.input_schema):
        changes.append("input schema")
    old_origin, new_origin = old.metadata.get("mcp") or {}, new.metadata.get("mcp") or {}
    if old_origin.get("outputSchema") != new_origin.get("outputSchema"):
        changes.append("output schema")
    if not changes:
        changes.append("title, annotations or other metadata")
    return changes


# --- listing --------------------------------------------------------------------------------------


async def _list_page(
    session: ClientSession, params: types.PaginatedRequestParams | None
) -> tuple[types.ListToolsResult, list[str]]:
    """One page of tools/list, and a line for each malformed definition left out of it.

    The SDK validates a page as one object, so one malformed tool would sink the whole server.
    When that happens the page is fetched again as plain JSON and each definition is checked on
    its own; the good ones are handed back to the session's cache (its `call_tool` looks output
    schemas up there, and would otherwise re-list, strictly, and fail again).
    """
    try:
        return await session.list_tools(params=params), []
    except ValidationError as strict_error:
        send_raw = getattr(getattr(session, "_dispatcher", None), "send_raw_request", None)
        absorb = getattr(session, "_absorb_tool_listing", None)
        if send_raw is None or absorb is None:  # an SDK without these internals: fail as before
            raise strict_error from None
    data: dict[str, Any] = {"method": "tools/list"}
    if params is not None:
        data["params"] = params.model_dump(by_alias=True, exclude_none=True)
    opts: dict[str, Any] = {}
    stamp = getattr(session, "_stamp", None)
    if stamp is not None:  # the protocol-version header (and _meta) the SDK adds to every request
        stamp(data, opts)
    raw = await send_raw(data["method"], data.get("params"), opts)
    entries = raw.get("tools") if isinstance(raw, Mapping) else None
    if not isinstance(entries, list):
        raise UpstreamError("tools/list answered without a 'tools' list")
    tools: list[types.Tool] = []
    problems: list[str] = []
    for position, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        label = f"tool {name!r}" if isinstance(name, str) else f"tool number {position + 1} of the page"
        try:
            tools.append(types.Tool.model_validate(entry, by_name=False))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "definition"
            problems.append(f"{label}: malformed definition ({where}: {first['msg']})")
    cursor = raw.get("nextCursor")
    page = types.ListToolsResult(tools=tools, next_cursor=cursor if isinstance(cursor, str) and cursor else None)
    complete = params is None and page.next_cursor is None
    return absorb(page, complete=complete), problems


# --- one upstream server ----------------------------------------------------------------------


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe_failure(config: ServerConfig, exc: BaseException) -> str:
    exc = _leaf(exc)
    if isinstance(exc, MCPError) and exc.error.code == CONNECTION_CLOSED:
        if config.transport == "stdio":
            return (
                f"the process exited or closed its output before completing the MCP handshake; "
                f"run `{config.describe()}` by hand to see its error"
            )
        return "the server closed the connection before completing the MCP handshake"
    if isinstance(exc, FileNotFoundError) and config.transport == "stdio":
        return f"command not found: {config.command!r} (check 'command' and PATH)"
    if isinstance(exc, OSError) and config.transport == "stdio":
        return f"cannot start `{config.describe()}`: {exc.strerror or exc}"
    if isinstance(exc, MCPError):
        return f"the server answered with an error: {exc.error.message} (code {exc.error.code})"
    name = type(exc).__name__
    if config.transport != "stdio" and ("Connect" in name or "Transport" in name or "HTTP" in name):
        return f"cannot reach {config.url}: {exc or name}"
    return f"{name}: {exc}" if str(exc) else name


def _result_bytes(result: types.CallToolResult, limit: int) -> int:
    """The size of a result as JSON, in bytes (counted in characters first: cheap, and a lower bound)."""
    text = result.model_dump_json(by_alias=True, exclude_none=True)
    return len(text) if len(text) > limit else len(text.encode())


def _short(exc: BaseException, limit: int = 300) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


_HIGH = r"\\u[dD][89abAB][0-9a-fA-F]{2}"
_LOW = r"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
# A surrogate escape without its pair: JSON allows it, but it names no character, and the SDK's
# parser rejects the whole message (one bad tool would lose its server's whole tools/list page).
_LONE_SURROGATE = re.compile(rf"{_HIGH}(?!{_LOW})|(?<!{_HIGH}){_LOW}")
_REPLACED = "\ufffd"
_BROKEN_TEXT = (
    "its definition holds text that is not valid Unicode (a lone surrogate escape); fix the server's tool definition"
)


def _repair_message(error: Exception) -> SessionMessage | None:
    """A message the SDK could not parse because of lone surrogate escapes, parsed with them replaced."""
    if not isinstance(error, ValidationError):
        return None
    problems = error.errors()
    raw = problems[0].get("input") if problems and problems[0].get("type") == "json_invalid" else None
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not isinstance(raw, str) or not _LONE_SURROGATE.search(raw):
        return None
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(_LONE_SURROGATE.sub(r"\\ufffd", raw)))
    except ValueError:
        return None


@asynccontextmanager
async def _repairing(read: Any, on_repair: Callable[[], None]) -> AsyncIterator[Any]:
    """The transport's read stream, with messages rejected only for lone surrogate escapes repaired."""
    send, receive = anyio.create_memory_object_stream[Any](0)

    async def pump() -> None:
        async with send:
            async for item in read:
                repaired = _repair_message(item) if isinstance(item, Exception) else None
                if repaired is not None:
                    on_repair()
                    item = repaired
                await send.send(item)

    async with anyio.create_task_group() as tg, receive:
        tg.start_soon(pump)
        yield receive
        tg.cancel_scope.cancel()


class UpstreamServer:
    """One upstream MCP server: its connection, its current tools, and calls routed to it.

    A server whose connection ends during a call is restarted in the background, at most
    `max_restarts` times in a row; then it is down (calls say so) until the gateway restarts.
    Once it has served RESTART_WINDOW seconds since its last start, a crash starts a new count.
    """

    def __init__(
        self,
        config: ServerConfig,
        *,
        separator: str = SEPARATOR,
        restart: bool = True,
        max_restarts: int = 3,
        on_tools_changed: ChangeListener | None = None,
        errlog: TextIO | None = None,
    ) -> None:
        self.config = config
        self.separator = separator
        self.restart_enabled = restart
        self.max_restarts = max_restarts
        self.state: State = "idle"
        self.error: str | None = None
        self.restarts = 0
        self.tools: tuple[Tool, ...] = ()
        self.skipped: list[str] = []  # upstream tools whose definitions we could not accept
        self.server_info: types.Implementation | None = None
        self._broken_text = False  # a message of this server had lone surrogates repaired (see _repairing)
        self.protocol_version: str | None = None  # what the gateway speaks with this server
        self._on_tools_changed = on_tools_changed
        self._errlog = errlog
        self._session: ClientSession | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._scope: anyio.CancelScope | None = None
        self._stop = anyio.Event()
        self._ready = anyio.Event()
        self._done = anyio.Event()
        self._done.set()
        self._lifecycle = anyio.Lock()
        self._refresh_lock = anyio.Lock()
        self._refresh_pending = False
        # True from a change notification until its re-listing is applied: "block" holds calls meanwhile.
        self.relisting = False
        self._generation = 0
        self._listing_problems: list[str] = []
        self._ready_at: float | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def ready(self) -> bool:
        return self.state == "ready" and self._session is not None

    def __repr__(self) -> str:
        return f"UpstreamServer({self.name!r}, {self.state}, {len(self.tools)} tools)"

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self, task_group: anyio.abc.TaskGroup) -> bool:
        """Connect, handshake and list tools within the startup timeout; False (with `error`) on failure."""
        async with self._lifecycle:
            return await self._start_locked(task_group)

    async def _start_locked(self, task_group: anyio.abc.TaskGroup) -> bool:
        self._task_group = task_group
        self._generation += 1
        self.state, self.error = "starting", None
        self._stop, self._ready, self._done = anyio.Event(), anyio.Event(), anyio.Event()
        self._scope = anyio.CancelScope()
        task_group.start_soon(self._run, self._scope, self._stop, self._ready, self._done)
        with anyio.move_on_after(self.config.startup_timeout):
            await self._ready.wait()
        if not self._ready.is_set():
            self._scope.cancel()
            self.state = "failed"
            self.error = (
                f"did not finish starting (connect, handshake, tools/list) within "
                f"{self.config.startup_timeout:g} s; raise 'startupTimeout' if it is just slow"
            )
            with anyio.move_on_after(10):
                await self._done.wait()
        ok = self.ready  # the runner task moved the state on while we waited
        if not ok:
            logger.warning("MCP server %r skipped: %s", self.name, self.error)
        return ok

    async def stop(self) -> None:
        """Close the connection (stdio: stdin closed, then the process tree is terminated)."""
        async with self._lifecycle:
            await self._stop_locked()
            self.state = "stopped"

    async def _stop_locked(self) -> None:
        self._stop.set()
        with anyio.move_on_after(10):
            await self._done.wait()
        if not self._done.is_set() and self._scope is not None:
            self._scope.cancel()
            with anyio.move_on_after(5):
                await self._done.wait()

    async def _run(self, scope: anyio.CancelScope, stop: anyio.Event, ready: anyio.Event, done: anyio.Event) -> None:
        generation = self._generation  # a run that outlives its restart must not touch the next run's state

        def current() -> bool:
            return generation == self._generation

        session: ClientSession | None = None
        try:
            with scope:
                async with AsyncExitStack() as stack:
                    read, write = await stack.enter_async_context(self._transport())
                    session = await stack.enter_async_context(
                        ClientSession(
                            read,
                            write,
                            message_handler=self._on_message,
                            client_info=types.Implementation(name="toolsearch", version=_version()),
                        )
                    )
                    modern = await self._negotiate(session)
                    listed = await self._list_all(session)
                    listening = None
                    if modern:  # 2026-era servers announce changes only on a subscriptions/listen stream
                        listening = await stack.enter_async_context(anyio.create_task_group())
                        await listening.start(self._listen, session)
                    if current():
                        self.server_info = session.server_info
                        self.protocol_version = session.protocol_version
                        self._apply(listed)
                        self._session = session
                        self.state = "ready"
                        self._ready_at = anyio.current_time()
                    ready.set()
                    await stop.wait()
                    if listening is not None:
                        listening.cancel_scope.cancel()
        except Exception as exc:  # any failure is reported, the other servers go on
            if not ready.is_set() and current():
                self.state, self.error = "failed", _describe_failure(self.config, exc)
            elif not stop.is_set():
                logger.warning("MCP server %r: connection ended with an error: %s", self.name, _leaf(exc))
        finally:
            if current():
                if self._session is session:
                    self._session = None
                if not ready.is_set() and self.state == "starting":
                    self.state, self.error = "failed", "startup was cancelled"
            ready.set()
            done.set()

    async def _negotiate(self, session: ClientSession) -> bool:
        """The newest protocol both sides speak: True for the 2026-07-28 era, False for the handshake.

        Over HTTP every request names its era, so a server can be asked `server/discover` and,
        when it cannot announce tool changes in the 2026 era (no `subscriptions/listen`), still be
        spoken to with the handshake, where it can. Over stdio a probe would lock a dual-era
        server's pipe to the 2026 era whatever it then offers, so stdio servers get the handshake.
        """
        if self.config.transport != "http":
            await session.initialize()
            return False
        try:  # probe without adopting: the handshake must still go out as a handshake
            discovered = types.DiscoverResult.model_validate(await session.send_discover(LATEST_MODERN_VERSION))
        except (MCPError, ValidationError):  # not a 2026 server: the handshake it is
            await session.initialize()
            return False
        if LATEST_MODERN_VERSION not in discovered.supported_versions:
            await session.initialize()
            return False
        tools = discovered.capabilities.tools
        if tools is None or not tools.list_changed:
            try:
                await session.initialize()  # the handshake era can tell us of changes; this server's 2026 era cannot
                return False
            except MCPError:
                pass  # a 2026-only server with a fixed list
        session.adopt(discovered)
        logger.info("MCP server %r: speaks %s (changes via subscriptions/listen)", self.name, session.protocol_version)
        return True

    async def _listen(self, session: ClientSession, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Re-list the tools whenever the server says they changed, for as long as the connection lives."""
        from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost, listen

        started = False
        try:
            async with listen(session, tools_list_changed=True) as subscription:
                task_status.started()
                started = True
                async for _event in subscription:
                    if self._task_group is not None:
                        self.relisting = True
                        self._task_group.start_soon(self.refresh)
        except (MCPError, ListenNotSupportedError, SubscriptionLost) as exc:
            logger.warning("MCP server %r: no tool change notifications (%s)", self.name, exc)
        finally:
            if not started:  # start-up goes on without change notifications
                task_status.started()

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        async with self._raw_transport() as (read, write), _repairing(read, self._repaired) as repaired:
            yield repaired, write

    def _repaired(self) -> None:
        self._broken_text = True

    @asynccontextmanager
    async def _raw_transport(self) -> AsyncIterator[Any]:
        config = self.config
        if config.transport == "stdio":
            params = StdioServerParameters(
                command=config.command or "",
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
            async with stdio_client(params, errlog=self._errlog or sys.stderr) as streams:
                yield streams
        elif config.transport == "http":
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            async with (
                create_mcp_http_client(headers=dict(config.headers) or None) as client,
                streamable_http_client(config.url or "", http_client=client) as streams,
            ):
                yield streams
        else:
            from mcp.client.sse import sse_client

            async with sse_client(config.url or "", headers=dict(config.headers) or None) as streams:
                yield streams

    async def _list_all(self, session: ClientSession) -> list[types.Tool]:
        """Every page of tools/list; a repeated cursor or too many pages is an error, not a hang.

        Malformed definitions are left out and named in `_listing_problems` (reported by `_apply`).
        """
        tools: list[types.Tool] = []
        problems: list[str] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page, rejected = await _list_page(session, params)
            tools.extend(page.tools)
            problems.extend(rejected)
            cursor = page.next_cursor
            if not cursor:
                self._listing_problems = problems
                return tools
            if cursor in seen:
                raise UpstreamError(f"tools/list repeated the cursor {cursor!r}; the server's pagination loops")
            seen.add(cursor)
        raise UpstreamError(f"tools/list returned more than {MAX_PAGES} pages")

    def _apply(self, listed: list[types.Tool]) -> bool:
        """Convert and store the listed tools; True when anything changed.

        A definition we cannot accept is skipped with a warning naming the server and the tool;
        the rest are listed. A tool whose definition changed is logged by name (see docs/mcp.md,
        "Pinned tool definitions").
        """
        converted: list[Tool] = []
        skipped: list[str] = list(self._listing_problems)
        self._listing_problems = []
        seen: set[str] = set()
        broken, self._broken_text = self._broken_text, False
        for definition in listed:
            if broken and _REPLACED in definition.model_dump_json():
                skipped.append(f"tool {definition.name!r}: {_BROKEN_TEXT}")
                continue
            try:
                tool = tool_from_mcp(definition, self.name, separator=self.separator)
            except InvalidToolError as exc:
                skipped.append(str(exc))
                continue
            except UnicodeError:  # e.g. a lone surrogate escape ("\\ud800"): valid JSON, not encodable text
                skipped.append(f"tool {definition.name!r}: {_BROKEN_TEXT}")
                continue
            if tool.name in seen:
                skipped.append(f"tool {definition.name!r} is listed more than once; the first definition is kept")
                continue
            seen.add(tool.name)
            converted.append(tool)
        for message in skipped:
            if message not in self.skipped:
                logger.warning("MCP server %r: skipped a tool (the others are listed): %s", self.name, message)
        self.skipped = skipped
        before = {t.name: t for t in self.tools}
        for tool in converted:
            old = before.get(tool.name)
            if old is not None and old.fingerprint != tool.fingerprint:
                origin = upstream_of(tool)
                logger.warning(
                    "MCP server %r changed the definition of tool %r (%s)",
                    self.name,
                    origin[1] if origin else tool.name,
                    ", ".join(definition_changes(old, tool)),
                )
        changed = [t.fingerprint for t in converted] != [t.fingerprint for t in self.tools]
        self.tools = tuple(converted)
        return changed

    # --- list changes -----------------------------------------------------------------------

    async def _on_message(self, message: Any) -> None:
        # Runs inline in the session's receive loop: never do session I/O here, spawn it.
        if isinstance(message, types.ToolListChangedNotification) and self._task_group is not None:
            self.relisting = True  # now, not when the re-listing task starts
            self._task_group.start_soon(self.refresh)

    async def refresh(self) -> bool:
        """Re-list the tools (as after tools/list_changed); True when they changed."""
        if self._refresh_lock.locked():
            self._refresh_pending = True  # coalesce a burst of notifications into one more listing
            return False
        changed = False
        self.relisting = True
        async with self._refresh_lock:
            try:
                while True:
                    self._refresh_pending = False
                    session = self._session
                    if session is None:
                        return changed
                    try:
                        listed = await self._list_all(session)
                    except Exception as exc:
                        logger.warning("MCP server %r: re-listing tools failed: %s", self.name, _leaf(exc))
                        return changed
                    changed = self._apply(listed) or changed
                    if not self._refresh_pending:
                        break
            finally:
                self.relisting = False
        if changed and self._on_tools_changed is not None:
            await self._on_tools_changed(self)
        return changed

    # --- calls --------------------------------------------------------------------------------

    async def _restart(self) -> bool:
        async with self._lifecycle:
            if self.ready:
                return True  # another caller restarted it already
            if not self.restart_enabled or self._task_group is None or self.restarts >= self.max_restarts:
                return False
            self.restarts += 1
            logger.warning("MCP server %r: restarting (%d of %d)", self.name, self.restarts, self.max_restarts)
            await self._stop_locked()
            before = [t.fingerprint for t in self.tools]
            ok = await self._start_locked(self._task_group)
        if ok and [t.fingerprint for t in self.tools] != before and self._on_tools_changed is not None:
            await self._on_tools_changed(self)
        return ok

    async def _session_for_call(self) -> ClientSession | None:
        if self.state == "starting":
            with anyio.move_on_after(self.config.startup_timeout):
                await self._ready.wait()
        if not self.ready and self.state in ("crashed", "failed") and self.restart_enabled:
            await self._restart()
        return self._session if self.ready else None

    async def call(
        self, tool: str, arguments: Mapping[str, Any] | None, *, max_result_bytes: int | None = None
    ) -> types.CallToolResult:
        """Call `tool` (the upstream's own name). Every failure comes back as an `isError` result.

        A result larger than the server's `maxResultBytes` (else `max_result_bytes`, else
        DEFAULT_MAX_RESULT_BYTES) is replaced by an error saying so: see `_oversized`.
        """
        session = await self._session_for_call()
        if session is None:
            return error_result(
                f"MCP server {self.name!r} is not available ({self.error or self.state}), so {tool!r} cannot run now. "
                "Use a tool of another server, or try again later."
            )
        try:
            result = await session.call_tool(
                tool, dict(arguments) if arguments else None, read_timeout_seconds=self.config.call_timeout
            )
        except MCPError as exc:
            code = exc.error.code
            if code == CONNECTION_CLOSED:
                return await self._crashed(tool)
            if code == REQUEST_TIMEOUT:
                logger.warning(
                    "MCP server %r: %r did not answer within %g s", self.name, tool, self.config.call_timeout
                )
                return error_result(
                    f"MCP server {self.name!r} did not answer {tool!r} within {self.config.call_timeout:g} s, so the "
                    "gateway stopped waiting (the call may still be running there; a late answer is dropped). "
                    "Do not assume it worked: check its effect, or retry with a smaller request."
                )
            return error_result(f"MCP server {self.name!r} rejected the call to {tool!r}: {exc.error.message}")
        except ValidationError as exc:  # an answer that is not a tool result at all
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "result"
            return error_result(
                f"MCP server {self.name!r}: calling {tool!r} failed: it answered with a malformed result "
                f"({where}: {first['msg']}). The tool may have run, but its result cannot be read; use another tool."
            )
        except Exception as exc:  # e.g. a result that fails its own output schema
            return error_result(f"MCP server {self.name!r}: calling {tool!r} failed: {_short(_leaf(exc))}")
        limit = self.config.max_result_bytes or max_result_bytes or DEFAULT_MAX_RESULT_BYTES
        size = _result_bytes(result, limit)
        if size > limit:
            return self._oversized(tool, size, limit)
        return result

    def _oversized(self, tool: str, size: int, limit: int) -> types.CallToolResult:
        # An error, not a truncated result: a cut-off list or JSON document reads as complete to a
        # model, and structured or binary content cannot be cut meaningfully. The call did run, so
        # the message says not to repeat it to see the result.
        logger.warning(
            "MCP server %r: the result of %r (%s bytes) is over the limit of %s bytes; it was dropped",
            self.name,
            tool,
            f"{size:,}",
            f"{limit:,}",
        )
        return error_result(
            f"The call to {tool!r} on MCP server {self.name!r} ran, but its result ({size:,} bytes) is larger than "
            f"this gateway passes on ({limit:,} bytes), so it was dropped. Do not repeat the same call to see it: "
            "ask for less (a narrower query, a filter, a page or a limit argument, if the tool has one)."
        )

    async def _crashed(self, tool: str) -> types.CallToolResult:
        if self._ready_at is not None and anyio.current_time() - self._ready_at > RESTART_WINDOW:
            self.restarts = 0  # it served a good while since its last start: a new crash, not a crash loop
        self.state = "crashed"
        self.error = f"the connection closed while {tool!r} was running"
        logger.warning("MCP server %r: connection lost during %r", self.name, tool)
        message = (
            f"MCP server {self.name!r} stopped (connection closed) while running {tool!r}; the call did not finish."
        )
        if self.restart_enabled and self._task_group is not None and self.restarts < self.max_restarts:
            self._task_group.start_soon(self._restart)
            message += " The server is being restarted; check whether the call had an effect before you retry it."
        else:
            self.error += f"; not restarted ({self.restarts} restarts used of {self.max_restarts})"
            message += " It is down and will not be restarted; use another tool."
        return error_result(message)


def _version() -> str:
    from .. import __version__

    return __version__


# --- many servers ---------------------------------------------------------------------------------


SourceListener = Callable[["MCPToolSource", str], Awaitable[None]]


class MCPToolSource:
    """Tools from many MCP servers, namespaced by server, kept current, with calls routed back.

    Use as an async context manager. Servers start concurrently; one that fails to start or times
    out is logged and listed in `failures`, and the others still work.
    """

    def __init__(
        self,
        config: MCPConfig | Mapping[str, Any] | str | Path,
        *,
        separator: str = SEPARATOR,
        restart: bool = True,
        max_restarts: int = 3,
        errlog: TextIO | None = None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        if isinstance(config, str | Path):
            config = load_config(config)
        elif not isinstance(config, MCPConfig):
            config = parse_config(config)
        self.config = config
        self.separator = separator
        self.max_result_bytes = max_result_bytes
        self._listeners: list[SourceListener] = []
        self.servers: dict[str, UpstreamServer] = {
            server.name: UpstreamServer(
                server,
                separator=separator,
                restart=restart,
                max_restarts=max_restarts,
                on_tools_changed=self._server_changed,
                errlog=errlog,
            )
            for server in config.servers
        }
        self._stack: AsyncExitStack | None = None
        self._routes: dict[str, tuple[UpstreamServer, str]] = {}
        self._tools: list[Tool] = []

    # --- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> MCPToolSource:
        stack = AsyncExitStack()
        task_group = await stack.enter_async_context(anyio.create_task_group())
        stack.push_async_callback(self._stop_all)
        self._stack = stack
        try:
            async with anyio.create_task_group() as starting:
                for server in self.servers.values():
                    starting.start_soon(server.start, task_group)
        except BaseException:
            await stack.__aexit__(None, None, None)
            raise
        self._rebuild()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, tb)

    async def _stop_all(self) -> None:
        async with anyio.create_task_group() as stopping:
            for server in self.servers.values():
                stopping.start_soon(server.stop)

    # --- catalog --------------------------------------------------------------------------

    @property
    def failures(self) -> dict[str, str]:
        """Servers that are not serving, with the reason."""
        return {n: s.error or s.state for n, s in self.servers.items() if s.state in ("failed", "crashed")}

    @property
    def ready(self) -> list[str]:
        return [n for n, s in self.servers.items() if s.ready]

    def tools(self) -> list[Tool]:
        """Every tool of every server, in config order then server order."""
        return list(self._tools)

    def catalog(self) -> Catalog:
        return Catalog(self._tools)

    def route(self, name: str) -> tuple[str, str] | None:
        """(server, original name) for a namespaced tool name, or None when no server has it."""
        hit = self._routes.get(name)
        return (hit[0].name, hit[1]) if hit else None

    def definition(self, name: str) -> Tool | None:
        """The namespaced tool's definition as its server last listed it (ahead of any index built from `catalog`)."""
        hit = self._routes.get(name)
        if hit is None:
            return None
        return next((t for t in hit[0].tools if t.name == name), None)

    def changing(self, server: str) -> bool:
        """True while `server` announced a change to its tools that is not re-listed yet."""
        upstream = self.servers.get(server)
        return upstream is not None and upstream.relisting

    def add_listener(self, listener: SourceListener) -> None:
        """Call `listener(source, server_name)` after a server's tools changed."""
        self._listeners.append(listener)

    def _rebuild(self) -> None:
        routes: dict[str, tuple[UpstreamServer, str]] = {}
        tools: list[Tool] = []
        for server in self.servers.values():
            for tool in server.tools:
                if tool.name in routes:
                    other = routes[tool.name][0].name
                    logger.warning(
                        "tool %r of MCP server %r has the same name as one of %r; it is left out",
                        tool.name,
                        server.name,
                        other,
                    )
                    continue
                origin = upstream_of(tool)
                routes[tool.name] = (server, origin[1] if origin else tool.name)
                tools.append(tool)
        self._routes, self._tools = routes, tools

    async def _server_changed(self, server: UpstreamServer) -> None:
        self._rebuild()
        logger.info("MCP server %r: tool list changed (%d tools)", server.name, len(server.tools))
        for listener in list(self._listeners):
            try:
                await listener(self, server.name)
            except Exception:  # one listener's bug must not stop the others
                logger.exception("tool-change listener failed")

    async def refresh(self, server: str | None = None) -> None:
        """Re-list one server's tools (or every server's)."""
        targets = [self.servers[server]] if server else list(self.servers.values())
        for upstream in targets:
            await upstream.refresh()

    # --- calls ----------------------------------------------------------------------------

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, max_result_bytes: int | None = None
    ) -> types.CallToolResult:
        """Call a tool by its namespaced name; unknown names and upstream failures are `isError` results.

        `max_result_bytes` caps the result for servers whose config does not set `maxResultBytes`
        (default: the source's `max_result_bytes`).
        """
        hit = self._routes.get(name)
        if hit is None:
            return error_result(f"no MCP server offers a tool named {name!r}; search for tools first")
        server, original = hit
        return await server.call(original, arguments, max_result_bytes=max_result_bytes or self.max_result_bytes)


# --- one-shot listing -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CollectedTools:
    """Tools listed from every server that answered, and why the others did not."""

    tools: list[Tool]
    failures: dict[str, str] = field(default_factory=dict)


async def acollect_tools(
    config: MCPConfig | Mapping[str, Any] | str | Path, *, separator: str = SEPARATOR
) -> CollectedTools:
    async with MCPToolSource(config, separator=separator, restart=False) as source:
        return CollectedTools(source.tools(), source.failures)


def collect_tools(config: MCPConfig | Mapping[str, Any] | str | Path, *, separator: str = SEPARATOR) -> CollectedTools:
    """Start every configured server, list its tools, stop it: a snapshot for indexing."""
    return anyio.run(lambda: acollect_tools(config, separator=separator))
