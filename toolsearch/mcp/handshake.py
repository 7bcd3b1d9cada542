"""The initialize-handshake era (up to 2025-11-25): one session per client, whose tool list grows as it finds tools.

A thin adapter over the gateway's rules (toolsearch.mcp.rules): it finds the session a request
belongs to (its connection's, or for stateless workers the gateway-issued id the request carries),
reads it once, has the rules search, list or admit a call for the request's asker, writes the
session once, and answers on the wire. After a search the found tools join that client's list and
the gateway sends `notifications/tools/list_changed`; `call_tool` reaches any tool for clients that
ignore list changes. Deprecated by the 2026-07-28 protocol; kept for clients in the deprecation window.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST

from .. import tracing
from .._errors import CatalogStoreError, SessionError, SessionStoreError, ToolSearchError
from ..index import ToolIndex
from ..session import Session, SessionManager
from ..stores import SessionStore
from ..stores.memory import InMemorySessionStore
from .caller import Caller
from .errors import protocol_error, tool_error
from .identity import session_key
from .metatools import CALL_TOOL, call_tool_definition, call_tool_target, with_text
from .pinning import repinned_text
from .rules import Asker, Found, GatewayRules, progress_sink
from .source import ProgressSink, mcp_definition

__all__ = ["HandshakeEra"]

logger = logging.getLogger("toolsearch.mcp")

Run = Callable[..., Awaitable[Any]]
T = TypeVar("T")

_SESSION_KEY = "toolsearch.session"

# The most a session's tool list holds, in bytes of its tools' JSON. A `tools/list` answer is one message, and the MCP
# Python SDK's client reads at most 1 MiB of one server-sent event (DEFAULT_MAX_SSE_EVENT_SIZE, 1,048,576 bytes): past
# it, every tools/list of the session fails, and so does every call of a tool by name (that client lists the tools
# again to check a result against the tool's output schema). 64 KiB are left for what frames the tools: the JSON-RPC
# envelope with the request's id, the SSE field names and the event id.
LIST_BYTES = 1024 * 1024 - 64 * 1024
# How the meta-tool's text of a search that found tools ends its opening sentence (ToolSearchMetaTool.render): not
# true of a found tool the list bound leaves out, so `_search` says what is instead.
_AVAILABLE = " They are now available: call them by name."
_CALL_TOOL_HINT = (
    "If these tools do not appear in your tool list, call them through `{call}` with "
    '{{"name": "<tool name>", "arguments": {{...}}}}.'
)


@dataclass(slots=True)
class _Client:
    """A connected client: where to send its notifications, whom it acts for, and what it was last told of (the
    digest of the tools its rights cover, `GatewayRules.visible_fingerprint`)."""

    session: ServerSession
    caller: Caller
    seen: str


class HandshakeEra:
    """Serves `tools/list` and `tools/call` for handshake-era connections: progressive exposure per session.

    `store` keeps the sessions; `header` names the request header that identifies a session (stateless
    workers) or is None (one session per connection); `store_call` calls the store off the event loop when it
    is networked.
    """

    def __init__(
        self,
        rules: GatewayRules,
        store: SessionStore | None,
        *,
        header: str | None,
        store_call: Run,
        max_discovered: int | None = None,
    ) -> None:
        self.rules = rules
        self.header = header
        self.store_call = store_call
        if store is None:  # one process's sessions: bounded, the least recent forgotten
            store = InMemorySessionStore(max_sessions=10_000)
        self.sessions = SessionManager(rules.index, store=store, max_discovered=max_discovered)
        self.clients: dict[str, _Client] = {}  # who to tell when the catalog changes
        self._pins_over = False  # whether the pinned tools alone were found over LIST_BYTES (logged once)

    def rebind(self, index: ToolIndex) -> None:
        """The index was replaced (a shared index for a new catalog): sessions read it from now on."""
        if index is not self.sessions.index:
            old = self.sessions
            self.sessions = SessionManager(index, store=old.store, max_discovered=old.max_discovered)

    # --- sessions ---------------------------------------------------------------------------

    def session_id(self, ctx: Any, caller: Caller) -> str:
        """The store id of the session a request belongs to."""
        if self.header is not None:
            headers = getattr(getattr(ctx, "request", None), "headers", None)
            value = headers.get(self.header) if headers is not None else None
            if not isinstance(value, str) or not value.strip():
                raise MCPError(
                    code=INVALID_REQUEST,
                    message=f"this gateway identifies sessions by the {self.header!r} header, which the "
                    "request lacks; send it on every request",
                )
            return session_key(self.header, value.strip(), caller.key)
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
            live = set(self.sessions.ids())
            for stale in [s for s in self.clients if s not in live and s != session_id]:
                del self.clients[stale]
        known = self.clients.get(session_id)
        if known is None or known.session is not ctx.session or known.caller != caller:
            # what its rights let it see now: it is told of a change only when that changes
            self.clients[session_id] = _Client(ctx.session, caller, self.rules.seen_by(caller))
        return str(session_id)

    def register(self, session_id: str) -> None:
        """A gateway-issued session id exists in the store from the moment it is issued (with no rights:
        each request's token decides what it may use)."""
        self.sessions.get_or_create(session_id, allowed=None, pinned=self.rules.pinned_in(self.sessions.index))

    def known(self, session_id: str) -> bool:
        return self.sessions.store.get(session_id) is not None

    def _open(self, session_id: str) -> Session:
        """A view of the session: one store read (two more on its first request, to create it)."""
        state = self.sessions.store.get(session_id)
        if state is None:
            pinned = self.rules.pinned_in(self.sessions.index)
            return self.sessions.get_or_create(session_id, allowed=None, pinned=pinned).view()
        return Session(self.sessions, state, snapshot=True).view()

    async def _in_session(self, ctx: Any, asker: Asker, work: Callable[[Session], T]) -> T:
        """`work` on the request's session, in one thread hop: one store read, `work`, and one atomic write of what
        it changed (none when nothing did). A store that fails (the session store, or the catalog store a search
        reads) is a protocol error naming it: nothing ran that a retry would repeat (an upstream tool is called
        only after this returns)."""
        session_id = self.session_id(ctx, asker.caller)
        tracing.gateway_session(session_id)

        def run() -> T:
            session = self._open(session_id)
            result = work(session)
            if session._pending:
                session.commit()
            return result

        try:
            return await anyio.to_thread.run_sync(run)
        except (SessionError, CatalogStoreError) as exc:
            logger.warning("%s failed: %s", ctx.method, exc)
            raise protocol_error(exc) from None

    async def close(self, session_id: str) -> None:
        self.clients.pop(session_id, None)
        try:
            await self.store_call(self.sessions.close, session_id)
        except SessionStoreError as exc:  # the store's idle expiry ends it instead
            logger.warning("could not close session %s: %s", session_id, exc)

    async def notify_changed(self) -> None:
        """The catalog or the policy changed: tell each connected client whose rights cover a changed tool (or whose
        rights changed what it may use) that its tool list may have changed; a client is never told of a change to
        tools it may not use (that would say they exist). Each is then compared against what it was told now."""
        clients = list(self.clients.items())
        if not clients:
            return
        # off the event loop: one digest per distinct set of rights, each walking the tools those rights cover
        callers = [client.caller for _, client in clients]
        rules = self.rules
        visible = lambda asker: rules.visible_fingerprint(asker.allowed)  # noqa: E731  (the tools its rights cover)
        digests = await anyio.to_thread.run_sync(rules.by_rights, callers, visible)
        changed: list[tuple[str, _Client]] = []
        for (session_id, client), seen in zip(clients, digests, strict=True):
            if seen != client.seen:
                client.seen = seen
                changed.append((session_id, client))

        async def send(session_id: str, client: _Client) -> None:
            try:
                with anyio.move_on_after(5):
                    await client.session.send_tool_list_changed()
            except Exception as exc:  # a gone client must not stop the others
                logger.debug("could not notify session %s: %s", session_id, exc)

        async with anyio.create_task_group() as tg:  # side by side: a slow client holds up no other
            for session_id, client in changed:
                tg.start_soon(send, session_id, client)

    # --- tools/list ---------------------------------------------------------------------------

    async def list_tools(self, ctx: Any, asker: Asker) -> types.ListToolsResult:
        """The session's list for this asker: tool_search, call_tool, and the pinned and found tools it may use."""
        return await self._in_session(ctx, asker, lambda session: self._listing(asker, session))

    def _listing(self, asker: Asker, session: Session) -> types.ListToolsResult:
        return self._fitted(asker, session)[0]

    def _fitted(self, asker: Asker, session: Session) -> tuple[types.ListToolsResult, list[str]]:
        """The session's list, and the found tools unloaded from the session to keep it within LIST_BYTES.

        The one home of that bound, for `tools/list` and for the search that loads tools (which says what it
        unloaded). Found tools go least recently used first, the session's own eviction order (`max_discovered`):
        the older ones before this search's, its weaker hits before its best; pinned tools always stay. Unloaded,
        not just left out of this answer: a tool the session kept but never showed would read as loaded to the next
        search, which would not offer it again.
        """
        shown = self.rules.shown(asker, session)  # binds the session to the asker's rights first
        meta = [self.rules.metatool.definition(session)]
        if self.rules.settings.call_tool:
            meta.append(call_tool_definition(self.rules.metatool))
        tools = [types.Tool.model_validate(t.to_mcp()) for t in meta] + [mcp_definition(t) for t in shown]
        sizes = [len(t.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8")) + 1 for t in tools]
        total = sum(sizes)
        if total <= LIST_BYTES:
            return types.ListToolsResult(tools=tools), []
        last_used = session.state().last_used  # pinned tools are not in it
        # positions in `tools` of the found tools, least recently used first
        found = sorted((len(meta) + i for i, t in enumerate(shown) if t.name in last_used),
                       key=lambda j: last_used[tools[j].name])  # fmt: skip
        unloaded: list[str] = []
        dropped: set[int] = set()
        for j in found:
            if total <= LIST_BYTES:
                break
            dropped.add(j)
            unloaded.append(tools[j].name)
            total -= sizes[j]
        if unloaded:  # an empty change is still a change queued: the session would be written for nothing
            session.forget(unloaded)
        if total > LIST_BYTES and not self._pins_over:  # said once: every listing of every session would repeat it
            self._pins_over = True
            logger.warning(
                "the pinned tools alone take %d bytes of a session's tool list, over the %d an MCP client reads in one "
                "message (with the gateway's own tools): pin fewer tools (--pin)",
                total,
                LIST_BYTES,
            )
        return types.ListToolsResult(tools=[t for j, t in enumerate(tools) if j not in dropped]), unloaded

    # --- tools/call ---------------------------------------------------------------------------

    async def call_tool(self, ctx: Any, asker: Asker, params: types.CallToolRequestParams) -> types.CallToolResult:
        """A search, or a call of an upstream tool (by its name or through call_tool); what fails in it is a
        tool error the model reads, except a store that fails before anything ran (a protocol error)."""
        name, arguments = params.name, dict(params.arguments or {})
        try:
            if name == self.rules.metatool.name:
                return await self._search(ctx, asker, arguments)
            via_call_tool = name == CALL_TOOL and self.rules.settings.call_tool
            if via_call_tool:
                target = call_tool_target(self.rules.metatool, arguments)
                if isinstance(target, types.CallToolResult):
                    return target
                name, arguments = target
            progress = progress_sink(ctx, params)  # the upstream's progress, to a client that asked for it
            return await self._forward(ctx, asker, name, arguments, via_call_tool=via_call_tool, progress=progress)
        except ToolSearchError as exc:
            logger.warning("%s failed: %s", name, exc)
            return tool_error(exc)

    async def _search(self, ctx: Any, asker: Asker, arguments: dict[str, Any]) -> types.CallToolResult:
        def search(session: Session) -> tuple[Found, bool, list[str]]:
            before = session.discovered
            found = self.rules.search(asker, session, arguments, session.id)
            unloaded = self._fitted(asker, session)[1] if found.outcome.ok else []  # what the list cannot hold
            return found, session.discovered != before, unloaded

        # The change is written (in the same hop) before the client is told: it lists its tools next, maybe
        # through another worker.
        found, discovered, unloaded = await self._in_session(ctx, asker, search)
        outcome = found.outcome
        text = outcome.text
        if unloaded:  # the model must know that a tool it was just told of is not in its list, and why
            text = self._unloaded_said(text, unloaded, [t.name for t in outcome.tools], {t.name for t in found.tools})
        if found.repinned:  # the model is told, not just shown: a changed tool is news it must read
            text += "\n" + repinned_text(found.repinned)
        if outcome.ok and outcome.tools and self.rules.settings.call_tool:
            text += "\n" + _CALL_TOOL_HINT.format(call=CALL_TOOL)
        if discovered or found.repinned:
            await self._notify_changed(ctx)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=not outcome.ok)

    def _unloaded_said(self, text: str, unloaded: list[str], found: list[str], shown: set[str]) -> str:
        """The search's `text` saying which tools the list bound left out: the found ones in its opening sentence,
        in place of "They are now available" (which would say the opposite of a note after it), the others (tools
        loaded earlier, re-pinned ones) in notes. `found`: the tools this search found, best first; `shown`: every
        tool the search shows the session (found and re-pinned)."""
        why = f"this session's tool list is kept under {LIST_BYTES:,} bytes (MCP clients read 1 MiB of one message)"
        reach = (
            f"call them through `{CALL_TOOL}`"
            if self.rules.settings.call_tool
            else "search for fewer tools (max_results) or with narrower words to load them"
        )
        opening, rest = text.split("\n", 1) if "\n" in text else (text, "")
        left_out = [name for name in found if name in unloaded]
        if left_out and opening.endswith(_AVAILABLE):
            loaded = [name for name in found if name not in unloaded]
            if loaded:
                said = (f"Now available, call them by name: {', '.join(loaded)}. Not added to your tool list, as "
                        f"{why}: {', '.join(left_out)}; {reach}.")
            else:
                said = f"Not added to your tool list, as {why}: {reach}."
            text = opening.removesuffix(_AVAILABLE) + " " + said + ("\n" + rest if rest else "")
            unloaded = [name for name in unloaded if name not in left_out]
        lines = [text]
        new = [name for name in unloaded if name in shown]
        if new:
            lines.append(f"Note: not loaded, as {why}: {', '.join(new)}; {reach}.")
        old = [name for name in unloaded if name not in shown]
        if old:
            lines.append(f"Note: unloaded, as {why}: {', '.join(old)} (search again to reload one).")
        return "\n".join(lines)

    async def _notify_changed(self, ctx: Any) -> None:
        # Request-scoped, so over HTTP it rides this call's response stream ahead of the result.
        try:
            await ctx.session.send_notification(types.ToolListChangedNotification(), related_request_id=ctx.request_id)
        except Exception as exc:  # the call itself succeeded
            logger.warning("could not send tools/list_changed: %s", exc)

    async def _forward(
        self,
        ctx: Any,
        asker: Asker,
        name: str,
        arguments: dict[str, Any],
        *,
        via_call_tool: bool,
        progress: ProgressSink | None = None,
    ) -> types.CallToolResult:
        # The session is written before the upstream call (its last-use tick, a tool that joined the list): a store
        # that fails then refuses the call before it ran, never after, when an error would invite a second run.
        admitted = await self._in_session(ctx, asker, lambda session: self.rules.admit(asker, session, name, arguments))
        if isinstance(admitted, types.CallToolResult):
            return admitted
        if admitted.joined:  # a tool called by name joins this session's list, like a found one
            await self._notify_changed(ctx)
        # No input_round: a tool that asks for input is a tool error here (this era knows no InputRequiredResult).
        result = await self.rules.call(asker, admitted, str(getattr(ctx, "request_id", "")), progress=progress)
        return with_text(result) if via_call_tool else result
