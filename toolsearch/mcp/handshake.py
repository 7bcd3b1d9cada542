"""The initialize-handshake era (up to 2025-11-25): one session per client, whose tool list grows as it finds tools.

Each client connection (or, for stateless workers, each gateway-issued session id) is a session
over the shared index. After a search the found tools join that client's list and the gateway
sends `notifications/tools/list_changed`; `call_tool` reaches any tool for clients that ignore
list changes. Deprecated by the 2026-07-28 protocol; kept for clients in the deprecation window.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, INVALID_REQUEST

from .. import tracing
from .._errors import SessionError, SessionStoreError, ToolSearchError
from ..metatool import MetaToolOutcome
from ..providers import ToolCall
from ..session import Session
from ..tools import Tool
from .caller import Caller
from .errors import protocol_error, tool_error
from .identity import session_key
from .metatools import CALL_TOOL, call_tool_definition, call_tool_target, schema_problems, with_text
from .pinning import Repinned, repinned_text
from .source import error_result, mcp_definition

if TYPE_CHECKING:
    from .gateway import Gateway

__all__ = ["HandshakeEra", "SESSION_METHODS"]

logger = logging.getLogger("toolsearch.mcp")

_SESSION_KEY = "toolsearch.session"
SESSION_METHODS = frozenset({"tools/list", "tools/call"})
# The session view of the request being served: read once before the handler, written once after.
_CURRENT: ContextVar[Session | None] = ContextVar("toolsearch_gateway_session", default=None)
_CALL_TOOL_HINT = (
    "If these tools do not appear in your tool list, call them through `{call}` with "
    '{{"name": "<tool name>", "arguments": {{...}}}}.'
)


class HandshakeEra:
    """Serves `tools/list` and `tools/call` for handshake-era connections: progressive exposure per session."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    # --- sessions ---------------------------------------------------------------------------

    def session_id(self, ctx: Any, caller: Caller) -> str:
        """The store id of the session a request belongs to."""
        gateway = self.gateway
        header = gateway.session_header
        if header is not None:
            headers = getattr(getattr(ctx, "request", None), "headers", None)
            value = headers.get(header) if headers is not None else None
            if not isinstance(value, str) or not value.strip():
                raise MCPError(
                    code=INVALID_REQUEST,
                    message=f"this gateway identifies sessions by the {header!r} header, which the "
                    "request lacks; send it on every request",
                )
            return session_key(header, value.strip(), caller.key)
        connection = getattr(ctx.session, "_connection", None)
        state = getattr(connection, "state", None)
        if isinstance(state, dict):
            session_id = state.get(_SESSION_KEY)
            if session_id is None:
                session_id = uuid.uuid4().hex
                state[_SESSION_KEY] = session_id
                connection.exit_stack.push_async_callback(self.close, session_id)  # type: ignore[union-attr]
        else:
            # An SDK without per-connection state: key on the server-side session object, never on a
            # client-supplied header, so one client cannot read or take over another's discoveries.
            # Such sessions end by the manager's TTL/LRU bound; forget their clients with them.
            session_id = f"connection-{id(ctx.session)}"
            live = set(gateway.sessions.ids())
            for stale in [s for s in gateway.clients if s not in live and s != session_id]:
                del gateway.clients[stale]
        gateway.clients[session_id] = ctx.session
        return str(session_id)

    def _open(self, session_id: str, caller: Caller) -> Session:
        """A view of the session: one store read (two more on its first request, to create it)."""
        gateway = self.gateway
        sessions = gateway.sessions
        state = sessions.store.get(session_id)
        if state is None:
            allowed = gateway.allowed_for(caller)
            pins = [n for n in gateway.pinned if n in gateway.index.catalog and (allowed is None or n in allowed)]
            return sessions.get_or_create(session_id, allowed=allowed, pinned=pins).view()
        return Session(sessions, state, snapshot=True).view()

    async def _commit(self, session: Session) -> None:
        if session._pending:  # nothing changed: no thread hop, no store round trip
            await self.gateway.store_call(session.commit)

    async def middleware(self, ctx: Any, call_next: Any) -> Any:
        """Around tools/list and tools/call: read the session once before, write it once after.

        The handler works on a view; its changes reach the store in one atomic update (earlier
        when it notifies the client, see `_notify_changed`). A store that fails leaves the session
        as it was, and the client gets an error naming the store and saying what to do.
        """
        answered = False
        try:
            session_id = self.session_id(ctx, self.gateway.caller(ctx))
            tracing.gateway_session(session_id)
            session = await self.gateway.store_call(self._open, session_id, self.gateway.caller(ctx))
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
            raise protocol_error(exc) from None
        return result

    def _session(self, ctx: Any) -> Session:
        """The session view of the request being served (the middleware opened it)."""
        current = _CURRENT.get()
        if current is not None:
            return current
        caller = self.gateway.caller(ctx)  # outside a request: a plain handle
        return self._open(self.session_id(ctx, caller), caller)

    async def close(self, session_id: str) -> None:
        gateway = self.gateway
        gateway.clients.pop(session_id, None)
        try:
            await gateway.store_call(gateway.sessions.close, session_id)
        except SessionStoreError as exc:  # the store's idle expiry ends it instead
            logger.warning("could not close session %s: %s", session_id, exc)

    def _visible(self, session: Session) -> list[Tool]:
        gateway = self.gateway
        meta = [gateway.metatool.definition(session)]
        if gateway.settings.call_tool:
            meta.append(call_tool_definition(gateway.metatool))
        return meta + session.visible_tools()

    # --- MCP handlers -------------------------------------------------------------------------

    async def list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        if params is not None and params.cursor is not None:
            # The list is always one page, so any cursor is one we never issued.
            raise MCPError(
                code=INVALID_PARAMS,
                message="tools/list: unknown cursor; this server lists every tool in one page, call it without one",
            )
        session = self._session(ctx)
        return await anyio.to_thread.run_sync(self._listing, session)  # store reads and writes: off the loop

    def _listing(self, session: Session) -> types.ListToolsResult:
        pins_ = self.gateway.pins
        visible = self._visible(session)
        pins = pins_.record(session, [t for t in visible if t.metadata.get("mcp")])
        tools: list[types.Tool] = []
        for tool in visible:
            if tool.metadata.get("mcp"):  # an upstream tool: the definition this session saw (see pinning)
                tools.append(mcp_definition(self.gateway.exposed(pins_.view(tool, pins).shown)))
            else:
                tools.append(types.Tool.model_validate(tool.to_mcp()))
        return types.ListToolsResult(tools=tools)

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        gateway = self.gateway
        session = self._session(ctx)
        name, arguments = params.name, dict(params.arguments or {})
        if name == gateway.metatool.name:
            return await self._search(ctx, session, arguments)
        if name == CALL_TOOL and gateway.settings.call_tool:
            target = call_tool_target(gateway.metatool, arguments)
            if isinstance(target, types.CallToolResult):
                return target
            return await self._forward(ctx, session, *target, via_call_tool=True)
        return await self._forward(ctx, session, name, arguments, via_call_tool=False)

    async def _search(self, ctx: Any, session: Session, arguments: dict[str, Any]) -> types.CallToolResult:
        before = session.discovered
        try:
            outcome, repinned = await anyio.to_thread.run_sync(self._run_search, session, arguments)
        except ToolSearchError as exc:
            return tool_error(exc, f"{self.gateway.metatool.name} failed")
        text = outcome.text
        if repinned:  # the model is told, not just shown: a changed tool is news it must read
            text += "\n" + repinned_text(repinned)
        if outcome.ok and outcome.tools and self.gateway.settings.call_tool:
            text += "\n" + _CALL_TOOL_HINT.format(call=CALL_TOOL)
        if session.discovered != before or repinned:
            await self._notify_changed(ctx)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=not outcome.ok)

    def _run_search(self, session: Session, arguments: dict[str, Any]) -> tuple[MetaToolOutcome, list[Repinned]]:
        """Search, then re-pin the session's tools to their current definitions (it is shown them
        again) and feed the usage log; the second value names the tools whose definition changed."""
        gateway = self.gateway
        outcome = gateway.metatool.run(session, arguments)
        if not outcome.ok:
            return outcome, []
        loaded = [t for t in session.visible_tools() if t.metadata.get("mcp")]
        repinned = gateway.pins.refresh(session, loaded)
        gateway.usage.catalog_changed(gateway.index.catalog.hash)
        gateway.usage.searched(
            session.id, outcome.query, [t.name for t in outcome.tools] + list(outcome.already_loaded)
        )
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
        gateway = self.gateway
        admitted = await anyio.to_thread.run_sync(self._admit, session, name, arguments)
        if isinstance(admitted, types.CallToolResult):
            return admitted
        joined, arguments, values = admitted
        gateway.consume_augmented(gateway.caller(ctx), name, values, str(getattr(ctx, "request_id", "")))
        if joined:  # a tool called by name joins this session's list, like a found one
            await self._notify_changed(ctx)
        result = await gateway.source.call_tool(
            name, arguments, max_result_bytes=gateway.settings.options.max_result_bytes
        )
        gateway.usage.called(session.id, name, not result.is_error)
        return with_text(result) if via_call_tool else result

    def _admit(
        self, session: Session, name: str, arguments: Mapping[str, Any]
    ) -> types.CallToolResult | tuple[bool, dict[str, Any], dict[str, Any] | None]:
        """The rules before a call: the executor's allow and discover rules (a tool called by name
        joins the session), not blocked as changed, augmented values and arguments valid (the
        executor's checks). A refusal as a tool error, else (True when the tool joined the session's
        list, the tool's own arguments, the augmented values)."""
        gateway = self.gateway
        joined = not session.is_visible(name)
        if joined and gateway.settings.require_discovery and name in gateway.index.catalog:
            return error_result(
                f"Tool {name!r} was not found by {gateway.metatool.name} in this session, and this gateway calls "
                f"only found tools. Call {gateway.metatool.name} first, then call it again."
            )
        refused = gateway.rules.admit(session, ToolCall("", name, dict(arguments)))
        if refused is not None:
            return error_result(refused.content)
        tool = gateway.index.catalog.get(name)
        if tool is None:  # removed by an upstream change a moment ago
            return error_result(f"Tool {name!r} is no longer offered. Call {gateway.metatool.name} to find another.")
        held = gateway.held(tool)
        if held is not None:
            return held
        pinned = gateway.pins.view(tool, gateway.pins.record(session, [tool]))  # a first call is a first sighting
        if pinned.blocked:
            return gateway.blocked(tool, pinned.shown)
        split = gateway.split_augmented(session, name, dict(arguments))
        if isinstance(split, types.CallToolResult):
            return split
        own, values = split
        problem = schema_problems(pinned.shown, own)  # "keep": the schema the session saw, never an unseen one
        if problem is not None:
            return problem
        if not joined:
            session.touch([name])
        return joined, own, values
