"""The 2026-07-28 era: a stable tool list (tool_search, call_tool, pins), found definitions in results, context handles.

A thin adapter over the gateway's rules (toolsearch.mcp.rules). No request changes what
`tools/list` returns: a search puts the found definitions in its result, and the model calls them
through `call_tool`. What a conversation found lives behind an explicit `context` handle (SEP-2567's
pattern) in the session store, keyed by the caller, so another caller's handle is simply unknown; a
handle keeps what was found, never rights (each request's token decides those). A handle is
optional: without one a search or call is stateless.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import secrets
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

import anyio.lowlevel
import anyio.to_thread
import mcp_types as types
from mcp.server.subscriptions import ServerEvent, ToolsListChanged

from .. import tracing
from .._errors import CatalogStoreError, ToolSearchError
from ..index import ToolIndex
from ..session import Session, SessionManager
from ..stores import InMemorySessionStore, SessionStore
from ..stores.limits import Claim
from ..tools import Tool
from .caller import Caller
from .caps import StoreCaps, contexts_refused
from .errors import protocol_error, tool_error
from .metatools import (
    CALL_TOOL,
    CONTEXT_ARGUMENT,
    call_tool_definition,
    call_tool_target,
    found_definition,
    found_text,
    modern_search_definition,
    with_text,
)
from .pinning import repinned_text
from .rules import Admitted, Asker, Found, GatewayRules, progress_sink
from .source import InputRound, ProgressSink, error_result, mcp_definition

__all__ = ["ListenerBus", "ModernEra", "context_key", "LIST_TTL_MS"]

logger = logging.getLogger("toolsearch.mcp")

Run = Callable[..., Awaitable[Any]]

LIST_TTL_MS = 300_000  # a stable list may be cached this long; `subscriptions/listen` says when it changes sooner
_HANDLE_BYTES = 24


def context_key(caller: Caller, handle: str) -> str:
    """The store id of a context handle: bound to the caller, so another caller's handle names nothing."""
    digest = hashlib.sha256(f"{caller.key}\0{handle}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"x-{digest[:40]}"


@dataclass(frozen=True, slots=True)
class _Opened:
    session: Session
    handle: str | None  # None: a stateless request (a scratch session nobody keeps)


class ModernEra:
    """Serves `tools/list` and `tools/call` for requests that carry the 2026-07-28 envelope.

    `store` keeps the context handles; `caps` bounds them per owner (None: no cap); `contexts=False`
    mints none (every request is stateless); `store_call` calls the store off the event loop when networked.
    """

    def __init__(
        self,
        rules: GatewayRules,
        store: SessionStore,
        *,
        store_call: Run,
        caps: StoreCaps | None = None,
        contexts: bool = True,
    ) -> None:
        self.rules = rules
        self.store_call = store_call
        self.caps = caps
        self.minting = contexts
        self.contexts = SessionManager(rules.index, store=store)  # bounded by the store itself
        # Stateless requests run on a throw-away session in this process (no store round trip).
        self.scratch = SessionManager(rules.index, store=InMemorySessionStore(max_sessions=10_000))
        self._listings: dict[tuple[str, frozenset[str] | None], types.ListToolsResult] = {}

    def rebind(self, index: ToolIndex) -> None:
        """The catalog changed: managers over the current index, listings recomputed."""
        self.contexts = SessionManager(index, store=self.contexts.store)
        self.scratch = SessionManager(index, store=self.scratch.store)
        self._listings.clear()

    # --- the stable list ----------------------------------------------------------------------

    async def list_tools(self, asker: Asker) -> types.ListToolsResult:
        return await anyio.to_thread.run_sync(self.listing, asker)

    def listing(self, asker: Asker) -> types.ListToolsResult:
        """tools/list: the same tools in the same order for every request with the same authorization."""
        rules = self.rules
        key = (rules.index.catalog.hash, asker.allowed)
        cached = self._listings.get(key)
        if cached is not None:
            return cached
        session = self._scratch(asker)
        try:
            search = modern_search_definition(rules.metatool.definition(session))
        finally:
            self.scratch.close(session.id)
        tools = [
            types.Tool.model_validate(search.to_mcp()),
            types.Tool.model_validate(call_tool_definition(rules.metatool, context=True).to_mcp()),
            *(mcp_definition(t) for t in rules.pinned_tools(asker)),
        ]
        # With a policy the list varies by authorization: a client may not share it across callers.
        scope: Literal["public", "private"] = "private" if rules.varies_by_caller else "public"
        result = types.ListToolsResult(tools=tools, ttl_ms=LIST_TTL_MS, cache_scope=scope)
        if len(self._listings) > 256:
            self._listings.clear()
        self._listings[key] = result
        return result

    def fingerprint(self, asker: Asker) -> str:
        """A digest of the asker's stable list: when it changes, its subscribed clients are told (`ListenerBus`)."""
        listing = self.listing(asker)
        return hashlib.sha256(listing.model_dump_json(by_alias=True, exclude_none=True).encode()).hexdigest()

    # --- contexts -----------------------------------------------------------------------------

    def _scratch(self, asker: Asker) -> Session:
        pinned = self.rules.pinned_in(self.scratch.index)
        session = self.scratch.create(f"scratch-{uuid.uuid4().hex}", allowed=None, pinned=pinned)
        return self.rules.bind(session, asker)

    def open(self, asker: Asker, handle: object) -> _Opened | types.CallToolResult:
        """The session a request works on: its context's (one store read), or a scratch one."""
        if handle is None:
            return _Opened(self._scratch(asker), None)
        search = self.rules.metatool.name
        if not isinstance(handle, str) or not handle.strip():
            return error_result(
                f'"{CONTEXT_ARGUMENT}" must be the string an earlier {search} returned; '
                "leave it out to start without one."
            )
        state = self.contexts.store.get(context_key(asker.caller, handle.strip()))
        if state is None:
            return error_result(
                f"Unknown context {handle.strip()[:16]!r}: it expired, or was not issued to you. Call "
                f"{search} without a context to start a new one."
            )
        if self.caps is not None and asker.owner is not None:
            self.caps.keep(asker.owner, state.id)
        session = Session(self.contexts, state, snapshot=True).view()
        return _Opened(self.rules.bind(session, asker), handle.strip())

    def _keep(self, asker: Asker, scratch: Session, handle: str) -> bool | Claim:
        """Keep what a stateless search found under a new handle: one store write (and one claim of the
        owner's cap on handles, whose refusal is returned instead). What is kept carries no rights."""
        key = context_key(asker.caller, handle)
        caps = self.caps if asker.owner is not None else None  # over HTTP only
        if caps is not None:
            claim = caps.claim_now(asker.owner or asker.caller.key, key)
            if not claim.granted:
                return claim
        kept = dataclasses.replace(scratch.state().copy(), id=key, version=0, allowed=None)
        if not self.contexts.store.create(kept):  # 192 random bits: a collision is a broken store
            raise ToolSearchError("could not keep the search context (the store refused a new id)")
        return True

    def _close(self, opened: _Opened) -> None:
        if opened.handle is None:
            self.scratch.close(opened.session.id)
        elif opened.session._pending:
            opened.session.commit()

    # --- tools/call ---------------------------------------------------------------------------

    async def call_tool(
        self, ctx: Any, asker: Asker, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        """tool_search, or a call through call_tool (or by name); what fails in it is a tool error. A called tool's
        progress reaches a client that gave a progress token; a tool that asks for input first is answered with its
        `InputRequiredResult`, and the client's retry (`inputResponses`, `requestState`) reaches it unchanged."""
        name, arguments = params.name, dict(params.arguments or {})
        try:
            if name == self.rules.metatool.name:  # a search may embed the query: always off the event loop
                return await anyio.to_thread.run_sync(self.search, asker, arguments)
            asked = InputRound(params.input_responses, params.request_state, _capabilities(ctx))
            call_id = str(getattr(ctx, "request_id", ""))
            return await self.call(
                asker, name, arguments, call_id, progress=progress_sink(ctx, params), input_round=asked
            )
        except CatalogStoreError as exc:  # never an answer from a catalog that could not be read: a protocol error
            logger.warning("%s failed: %s", name, exc)
            raise protocol_error(exc) from None
        except ToolSearchError as exc:
            logger.warning("%s failed: %s", name, exc)
            return tool_error(exc)

    def search(self, asker: Asker, arguments: dict[str, Any]) -> types.CallToolResult:
        """Search, and return each found tool's full definition (text and structuredContent)."""
        rules = self.rules
        opened = self.open(asker, arguments.pop(CONTEXT_ARGUMENT, None))
        if isinstance(opened, types.CallToolResult):
            return opened
        session = opened.session
        mint = opened.handle is None and self.minting
        handle = secrets.token_urlsafe(_HANDLE_BYTES) if mint else opened.handle
        refused = ""
        try:
            usage_id = session.id if handle is None else context_key(asker.caller, handle)
            found = rules.search(asker, session, arguments, usage_id)
            if not found.outcome.ok:
                return error_result(found.outcome.text)
            if mint and handle is not None:
                kept = self._keep(asker, session, handle)
                if isinstance(kept, Claim):
                    handle = None
                    if self.caps is not None:
                        refused = contexts_refused(kept, self.caps.limit)
            tracing.gateway_session(session.id if handle is None else context_key(asker.caller, handle))
        finally:
            self._close(opened)
        return self._result(found, handle, refused)

    def _result(self, found: Found, handle: str | None, refused: str) -> types.CallToolResult:
        outcome = found.outcome
        entries = [found_definition(t) for t in (self.rules.exposed(t) for t in found.tools) if t is not None]
        structured: dict[str, Any] = {"query": outcome.query, "tools": entries}
        if outcome.already_loaded:
            structured["alreadyFound"] = list(outcome.already_loaded)
        if found.repinned:
            structured["changed"] = [r.entry() for r in found.repinned]
        if handle is not None:
            structured[CONTEXT_ARGUMENT] = handle
        lines: list[str] = [repinned_text(found.repinned)] if found.repinned else []
        if entries:
            lines.append(
                f"Found {len(entries)} tool(s) for {outcome.query!r}. Call one through {CALL_TOOL} with "
                '{"name": "<tool name>", "arguments": {...}} matching its input schema.'
            )
            lines += [found_text(e) for e in entries]
            lines += [f"Note: {note}" for note in (outcome.result.notes if outcome.result else ())]
        else:
            lines.append(outcome.text)  # no new tools: the search's own advice (other words, already found)
        if outcome.already_loaded and entries:
            lines.append("Found earlier in this context, not repeated: " + ", ".join(outcome.already_loaded) + ".")
        if handle is not None:
            lines.append(f'Context: pass "{CONTEXT_ARGUMENT}": "{handle}" to later tool_search and {CALL_TOOL} calls.')
        if refused:
            lines.append(refused)
        text = "\n".join(lines)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=structured)

    def admit(self, asker: Asker, name: str, arguments: dict[str, Any]) -> Admitted | types.CallToolResult:
        """Parse a call (call_tool's target, the context handle) and have the rules admit it on the
        conversation's session: (the admitted call) or the tool error."""
        # The gateway's own argument of call_tool; on a direct call, unless the tool declares one of its own (a
        # pinned tool listed with its full definition), whose value is the tool's argument, not a context handle.
        own = name != CALL_TOOL and _declares(self.rules.index.catalog.get(name), CONTEXT_ARGUMENT)
        handle = None if own else arguments.pop(CONTEXT_ARGUMENT, None)
        if name == CALL_TOOL:
            target = call_tool_target(self.rules.metatool, arguments)
            if isinstance(target, types.CallToolResult):
                return target
            name, arguments = target
        opened = self.open(asker, handle)
        if isinstance(opened, types.CallToolResult):
            return opened
        hint = "" if opened.handle is not None else f' and pass the "{CONTEXT_ARGUMENT}" it returns'
        try:
            return self.rules.admit(asker, opened.session, name, arguments, unfound_hint=hint)
        finally:
            self._close(opened)

    async def call(
        self,
        asker: Asker,
        name: str,
        arguments: dict[str, Any],
        call_id: str,
        *,
        progress: ProgressSink | None = None,
        input_round: InputRound,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """An upstream tool's call, admitted first; its progress to `progress`, and a request for input answered
        as `input_round` says (`MCPToolSource.call_tool`): a client of this era takes it (see `call_tool`)."""
        admitted = await self.store_call(self.admit, asker, name, arguments)
        if isinstance(admitted, types.CallToolResult):
            return admitted
        result = await self.rules.call(asker, admitted, call_id, progress=progress, input_round=input_round)
        return with_text(result) if isinstance(result, types.CallToolResult) else result


def _capabilities(ctx: Any) -> types.ClientCapabilities | None:
    """What this request's client declared it can do (in 2026-07-28 every request declares it)."""
    capabilities = getattr(ctx.session, "client_capabilities", None)
    return capabilities if isinstance(capabilities, types.ClientCapabilities) else None


@dataclass(slots=True)
class _Listener:
    deliver: Callable[[ServerEvent], None]
    caller: Caller
    seen: str  # the digest of its stable list it was last told of (or listened with)


# Whom the `subscriptions/listen` request being opened listens for, and the digest of its list then: set around the
# SDK's ListenHandler, which subscribes to the bus in that same task.
_LISTENING: ContextVar[tuple[Caller, str] | None] = ContextVar("toolsearch_listening", default=None)


class ListenerBus:
    """The `SubscriptionBus` of `subscriptions/listen`, by rights: each stream is told of a change of the tool list
    its own caller is served (`ModernEra.fingerprint`), never of a change to tools it may not see.

    `listen` wraps the SDK's ListenHandler so that each stream is subscribed with its caller; `tools_changed`
    publishes after a catalog change to the streams whose list changed. Other events go to every stream.
    """

    def __init__(self, era: ModernEra) -> None:
        self.era = era
        self._listeners: dict[object, _Listener] = {}

    async def listen(self, handler: Run, ctx: Any, params: Any, asker: Asker) -> Any:
        """Serve one listen request through `handler` (the SDK's), its stream subscribed for its caller (`asker`)."""
        seen = await anyio.to_thread.run_sync(self.era.fingerprint, asker)
        token = _LISTENING.set((asker.caller, seen))
        try:
            return await handler(ctx, params)
        finally:
            _LISTENING.reset(token)

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        listening = _LISTENING.get()
        if listening is None:  # subscribed other than through `listen`: it hears of no tool change (it has no rights)
            listening = (Caller(key="nobody", subject="nobody"), "")
        key = object()
        self._listeners[key] = _Listener(listener, *listening)

        def unsubscribe() -> None:
            self._listeners.pop(key, None)

        return unsubscribe

    async def publish(self, event: ServerEvent) -> None:
        if isinstance(event, ToolsListChanged):
            await self.tools_changed()
            return
        for listener in list(self._listeners.values()):
            _deliver(listener, event)
        await anyio.lowlevel.checkpoint()

    async def tools_changed(self) -> None:
        """The catalog changed: tell each stream whose caller's stable list changed (one digest per set of rights)."""
        listeners = list(self._listeners.values())
        if not listeners:
            return
        callers = [listener.caller for listener in listeners]
        digests = await anyio.to_thread.run_sync(self.era.rules.by_rights, callers, self.era.fingerprint)
        for listener, digest in zip(listeners, digests, strict=True):
            if digest != listener.seen:
                listener.seen = digest
                _deliver(listener, ToolsListChanged())
        await anyio.lowlevel.checkpoint()


def _deliver(listener: _Listener, event: ServerEvent) -> None:
    try:
        listener.deliver(event)
    except Exception:  # one bad stream must not starve the others
        logger.exception("subscription listener raised; continuing")


def _declares(tool: Tool | None, argument: str) -> bool:
    """Whether `tool`'s input schema names `argument` among its properties."""
    properties = tool.input_schema.get("properties") if tool is not None else None
    return isinstance(properties, dict) and argument in properties
