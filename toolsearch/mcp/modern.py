"""The 2026-07-28 era: a stable tool list (tool_search, call_tool, pins), found definitions in results, context handles.

No request changes what `tools/list` returns: a search puts the found definitions in its result,
and the model calls them through `call_tool`. What a conversation found lives behind an explicit
`context` handle (SEP-2567's pattern) in the session store, keyed by the caller, so another
caller's handle is simply unknown. A handle is optional: without one a search or call is
stateless.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import secrets
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import mcp_types as types

from .. import tracing
from .._errors import ToolSearchError
from ..providers import ToolCall
from ..session import Session, SessionManager
from ..stores import InMemorySessionStore
from ..stores.limits import Claim
from .caller import Caller
from .caps import contexts_refused
from .metatools import (
    CALL_TOOL,
    CONTEXT_ARGUMENT,
    call_tool_definition,
    call_tool_target,
    found_definition,
    found_text,
    modern_search_definition,
    schema_problems,
    with_text,
)
from .pinning import repinned_text
from .source import error_result, mcp_definition

if TYPE_CHECKING:
    from .gateway import Gateway

__all__ = ["ModernEra", "context_key", "LIST_TTL_MS"]

logger = logging.getLogger("toolsearch.mcp")

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
    new: bool = False


class ModernEra:
    """Serves `tools/list` and `tools/call` for requests that carry the 2026-07-28 envelope."""

    def __init__(self, gateway: Gateway, contexts: SessionManager) -> None:
        self.gateway = gateway
        self.contexts = contexts
        # Stateless requests run on a throw-away session in this process (no store round trip).
        self.scratch = SessionManager(gateway.index, store=InMemorySessionStore(max_sessions=10_000))
        self._listings: dict[tuple[str, frozenset[str] | None], types.ListToolsResult] = {}

    def rebind(self, contexts: SessionManager) -> None:
        """The index changed (an upstream's catalog did): new managers over it, listings recomputed."""
        self.contexts = contexts
        self.scratch = SessionManager(self.gateway.index, store=self.scratch.store)
        self._listings.clear()

    # --- the stable list ----------------------------------------------------------------------

    def listing(self, allowed: frozenset[str] | None) -> types.ListToolsResult:
        """tools/list: the same tools in the same order for every request with the same authorization."""
        gateway = self.gateway
        key = (gateway.index.catalog.hash, allowed)
        cached = self._listings.get(key)
        if cached is not None:
            return cached
        session = self._scratch(allowed)
        try:
            search = modern_search_definition(gateway.metatool.definition(session))
            pinned = session.pinned_tools()
        finally:
            self.scratch.close(session.id)
        tools = [
            types.Tool.model_validate(search.to_mcp()),
            types.Tool.model_validate(call_tool_definition(gateway.metatool, context=True).to_mcp()),
            *(mcp_definition(gateway.exposed(t)) for t in pinned),
        ]
        # With a policy the list varies by authorization: a client may not share it across callers.
        scope: Literal["public", "private"] = "private" if gateway.settings.policy is not None else "public"
        result = types.ListToolsResult(tools=tools, ttl_ms=LIST_TTL_MS, cache_scope=scope)
        if len(self._listings) > 256:
            self._listings.clear()
        self._listings[key] = result
        return result

    def fingerprint(self) -> str:
        """A digest of the unfiltered stable list: when it changes, subscribed clients are told."""
        listing = self.listing(None)
        return hashlib.sha256(listing.model_dump_json(by_alias=True, exclude_none=True).encode()).hexdigest()

    # --- contexts -----------------------------------------------------------------------------

    def _scratch(self, allowed: frozenset[str] | None) -> Session:
        gateway = self.gateway
        pins = [n for n in gateway.pinned if n in gateway.index.catalog and (allowed is None or n in allowed)]
        return self.scratch.create(f"scratch-{uuid.uuid4().hex}", allowed=allowed, pinned=pins)

    def open(
        self, caller: Caller, allowed: frozenset[str] | None, handle: object, owner: str | None = None
    ) -> _Opened | types.CallToolResult:
        """The session a request works on: its context's (one store read), or a scratch one."""
        if handle is None:
            return _Opened(self._scratch(allowed), None)
        if not isinstance(handle, str) or not handle.strip():
            return error_result(
                f'"{CONTEXT_ARGUMENT}" must be the string an earlier {self.gateway.metatool.name} returned; '
                "leave it out to start without one."
            )
        state = self.contexts.store.get(context_key(caller, handle.strip()))
        if state is None:
            return error_result(
                f"Unknown context {handle.strip()[:16]!r}: it expired, or was not issued to you. Call "
                f"{self.gateway.metatool.name} without a context to start a new one."
            )
        caps = self.gateway.caps.contexts
        if caps is not None and owner is not None:
            caps.keep(owner, state.id)
        return _Opened(Session(self.contexts, state, snapshot=True).view(), handle.strip())

    def _mint(self, caller: Caller, scratch: Session, owner: str | None) -> str | Claim:
        """Keep what a stateless search found under a new handle: one store write (and one claim of the
        owner's cap on handles, whose refusal is returned instead)."""
        handle = secrets.token_urlsafe(_HANDLE_BYTES)
        key = context_key(caller, handle)
        caps = self.gateway.caps.contexts if owner is not None else None  # over HTTP only
        if caps is not None:
            claim = caps.claim_now(owner or caller.key, key)
            if not claim.granted:
                return claim
        kept = dataclasses.replace(scratch.state().copy(), id=key, version=0)
        if not self.contexts.store.create(kept):  # 192 random bits: a collision is a broken store
            raise ToolSearchError("could not keep the search context (the store refused a new id)")
        return handle

    def _close(self, opened: _Opened) -> None:
        if opened.handle is None:
            self.scratch.close(opened.session.id)
        elif opened.session._pending:
            opened.session.commit()

    # --- tool_search --------------------------------------------------------------------------

    def search(
        self, caller: Caller, allowed: frozenset[str] | None, arguments: dict[str, Any], owner: str | None = None
    ) -> types.CallToolResult:
        """Search, and return each found tool's full definition (text and structuredContent); `owner`
        (over HTTP) is whom a new context handle counts against."""
        gateway = self.gateway
        opened = self.open(caller, allowed, arguments.pop(CONTEXT_ARGUMENT, None), owner)
        if isinstance(opened, types.CallToolResult):
            return opened
        session = opened.session
        try:
            outcome = gateway.metatool.run(session, arguments)
            if not outcome.ok:
                return error_result(outcome.text)
            found = list(outcome.tools)
            # What the conversation is shown now is what later calls are checked against (rug-pull pins):
            # the tools found now, and any found earlier whose definition changed (shown again, and named).
            names = {t.name for t in found}
            loaded = [t for t in session.visible_tools() if t.metadata.get("mcp") and t.name not in names]
            repinned = gateway.pins.refresh(session, [t for t in found if t.metadata.get("mcp")] + loaded)
            found += [r.tool for r in repinned if r.tool.name not in names]
            handle, refused = opened.handle, ""
            if handle is None and gateway.settings.contexts:
                minted = self._mint(caller, session, owner)
                handle = minted if isinstance(minted, str) else None
                if isinstance(minted, Claim) and gateway.caps.contexts is not None:
                    refused = contexts_refused(minted, gateway.caps.contexts.limit)
            usage_id = session.id if handle is None else context_key(caller, handle)
            tracing.gateway_session(usage_id)
            gateway.usage.catalog_changed(gateway.index.catalog.hash)
            shown = [t.name for t in outcome.tools] + list(outcome.already_loaded)  # the search's own hits
            gateway.usage.searched(usage_id, outcome.query, shown)
        finally:
            self._close(opened)
        entries = [found_definition(gateway.exposed(t)) for t in found]
        structured: dict[str, Any] = {"query": outcome.query, "tools": entries}
        if outcome.already_loaded:
            structured["alreadyFound"] = list(outcome.already_loaded)
        if repinned:
            structured["changed"] = [r.entry() for r in repinned]
        if handle is not None:
            structured[CONTEXT_ARGUMENT] = handle
        text = self._render(outcome.query or "", entries, outcome, handle, repinned_text(repinned))
        if refused:
            text += "\n" + refused
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=structured)

    def _render(
        self, query: str, entries: list[dict[str, Any]], outcome: Any, handle: str | None, changed: str = ""
    ) -> str:
        lines: list[str] = [changed] if changed else []
        if entries:
            lines.append(
                f"Found {len(entries)} tool(s) for {query!r}. Call one through {CALL_TOOL} with "
                '{"name": "<tool name>", "arguments": {...}} matching its input schema.'
            )
            lines += [found_text(e) for e in entries]
        else:
            lines.append(outcome.text)  # no new tools: the search's own advice (other words, already found)
        if outcome.already_loaded and entries:
            lines.append("Found earlier in this context, not repeated: " + ", ".join(outcome.already_loaded) + ".")
        if handle is not None:
            lines.append(f'Context: pass "{CONTEXT_ARGUMENT}": "{handle}" to later tool_search and {CALL_TOOL} calls.')
        return "\n".join(lines)

    # --- call_tool ----------------------------------------------------------------------------

    def admit(
        self,
        caller: Caller,
        allowed: frozenset[str] | None,
        name: str,
        arguments: dict[str, Any],
        owner: str | None = None,
    ) -> tuple[str, dict[str, Any], str, dict[str, Any] | None] | types.CallToolResult:
        """The rules before a proxied call; (tool, its own arguments, usage id, augmented values) when
        it may go, else the tool error."""
        gateway = self.gateway
        handle = arguments.pop(CONTEXT_ARGUMENT, None)
        if name == CALL_TOOL:
            target = call_tool_target(gateway.metatool, arguments)
            if isinstance(target, types.CallToolResult):
                return target
            name, arguments = target
        opened = self.open(caller, allowed, handle, owner)
        if isinstance(opened, types.CallToolResult):
            return opened
        session = opened.session
        try:
            if gateway.settings.require_discovery and name in gateway.index.catalog and not session.is_visible(name):
                hint = "" if opened.handle is not None else f' and pass the "{CONTEXT_ARGUMENT}" it returns'
                return error_result(
                    f"Tool {name!r} was not found by {gateway.metatool.name} in this context, and this gateway calls "
                    f"only found tools. Call {gateway.metatool.name} first{hint}, then call it again."
                )
            refused = gateway.rules.admit(session, ToolCall("", name, arguments))
            if refused is not None:
                return error_result(refused.content)
            tool = gateway.index.catalog.get(name)
            if tool is None:
                return error_result(
                    f"Tool {name!r} is no longer offered. Call {gateway.metatool.name} to find another."
                )
            held = gateway.held(tool)
            if held is not None:
                return held
            shown = tool
            if opened.handle is not None:
                pinned = gateway.pins.view(tool, gateway.pins.record(session, [tool]))
                if pinned.blocked:
                    return gateway.blocked(tool, pinned.shown)
                shown = pinned.shown
            split = gateway.split_augmented(session, name, arguments)
            if isinstance(split, types.CallToolResult):
                return split
            arguments, values = split
            problem = schema_problems(shown, arguments)  # "keep": the schema this context saw, never an unseen one
            if problem is not None:
                return problem
            session.touch([name])
            usage_id = session.id
        finally:
            self._close(opened)
        return name, arguments, usage_id, values

    async def call(
        self,
        caller: Caller,
        allowed: frozenset[str] | None,
        name: str,
        arguments: dict[str, Any],
        call_id: str = "",
        owner: str | None = None,
    ) -> Any:
        gateway = self.gateway
        admitted = await gateway.store_call(self.admit, caller, allowed, name, arguments, owner)
        if isinstance(admitted, types.CallToolResult):
            return admitted
        target, inner, usage_id, values = admitted
        gateway.consume_augmented(caller, target, values, call_id)
        result = await gateway.source.call_tool(
            target, inner, max_result_bytes=gateway.settings.options.max_result_bytes
        )
        gateway.usage.called(usage_id, target, not result.is_error)
        return with_text(result)
