"""OpenAI Agents SDK: tool_search as a FunctionTool and the catalog's tools gated by a toolsearch session.

    from agents import Agent, Runner
    from toolsearch.integrations.openai_agents import AgentToolSearch

    search = AgentToolSearch([get_weather, send_email, ...], pinned=["get_time"])
    agent = Agent(name="assistant", model=model, tools=search.tools)
    Runner.run_sync(agent, "...", context=search.session("user-1"), run_config=search.run_config())

Each tool's `is_enabled` asks the run's session whether the tool is pinned or discovered, so the
model is sent the pinned tools, `tool_search` and what it found; the session (any SessionStore:
memory, Redis) remembers discoveries across runs. A turn reads the session once for all its tools.
A tool's own `is_enabled` (the SDK's per-caller rights) still holds: a tool it disables for the run
is neither sent, nor offered by `tool_search`, nor run. A call to a tool the session has not found is
answered with an instructive error (`run_config()` turns the SDK's "tool not found" into it) and
never runs. The run's `context` is the toolsearch Session, or any object with a
`toolsearch_session` attribute (pass `session_of` to find it elsewhere).

`augment=` / `on_augment=` (see `toolsearch.augment`) extend every catalog tool's
`params_json_schema` (and tool_search's, with `Augmentation.of(..., search=True)`); each call's
augmented values go to `on_augment` (awaited when it is async) and the tool's own invoke gets its
own arguments only. A strict tool (`strict_json_schema=True`, the SDK's default) has every property required by the
SDK's strict form, so there an optional augmented field is required too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
import weakref
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

try:
    from agents import FunctionTool, RunConfig, RunContextWrapper
    from agents.run_config import ToolErrorFormatter, ToolErrorFormatterArgs
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    from ._gate import unusable_framework

    raise unusable_framework(exc, "openai-agents") from exc

from .._errors import InvalidArgumentError, InvalidToolError, SessionRequiredError, UnknownSessionError
from ..augment import Augmentation, AugmentSpec, OnAugment
from ..index import ToolIndex
from ..metatool import ToolSearchMetaTool
from ..session import Session, SessionManager, check_session_settings, pinned_in
from ..tools import Tool
from ._gate import (
    admission,
    agate,
    agent_allowed,
    allowed,
    check_catalog,
    in_index,
    record_call,
    record_search,
    scratch_session,
)

if TYPE_CHECKING:
    from ..usage import UsageRecorder

__all__ = ["AgentToolSearch", "tool_from_function_tool"]

SessionOf = Callable[[RunContextWrapper[Any]], Session]
T = TypeVar("T")
# A FunctionTool's own `is_enabled`: a bool, or a callable (run context, agent) -> bool, sync or async.
OwnCheck = bool | Callable[[RunContextWrapper[Any], Any], Any]

# Set on the tool context by the SDK when its default failure handler turned a tool's exception into
# the error text the model gets (read, not consumed: the SDK reads it after us). A custom
# failure_error_function leaves no such mark, so those failures count as calls that worked.
_SDK_HANDLED_FAILURE = "_function_tool_default_failure_handled"


def tool_from_function_tool(tool: FunctionTool) -> Tool:
    """A toolsearch Tool from an Agents SDK FunctionTool."""
    return Tool(name=tool.name, description=tool.description or "", input_schema=tool.params_json_schema)


def _context_session(ctx: RunContextWrapper[Any]) -> Session:
    context = ctx.context
    session = context if isinstance(context, Session) else getattr(context, "toolsearch_session", None)
    if not isinstance(session, Session):
        raise SessionRequiredError(
            "the run has no toolsearch session: pass context=search.session('<conversation id>') to Runner.run "
            "(or a context object with a `toolsearch_session` attribute)"
        )
    return session


class AgentToolSearch:
    """tool_search plus the catalog's FunctionTools, each enabled only once the run's session found it.

    `sessions` shares a SessionManager (and its store) with the rest of the application; by
    default one is made over an index of `tools` (`backend`, or a built `index`). `usage` feeds a
    usage log (see docs/learning.md): each search and the tools then called successfully, joined
    by session id.
    """

    def __init__(
        self,
        tools: Sequence[FunctionTool],
        *,
        pinned: Collection[str] = (),
        backend: str = "bm25",
        index: ToolIndex | None = None,
        sessions: SessionManager | None = None,
        metatool: ToolSearchMetaTool | None = None,
        session_of: SessionOf | None = None,
        usage: UsageRecorder | None = None,
        augment: AugmentSpec | None = None,
        on_augment: OnAugment | None = None,
    ) -> None:
        self.usage = usage
        if sessions is not None:
            index = sessions.index
        # `is None`, not `or`: an empty index or manager (no session yet) is falsy, and is still the caller's
        if index is None:
            index = ToolIndex.build([tool_from_function_tool(t) for t in tools], backend)
        self.index = index
        self.metatool = metatool or ToolSearchMetaTool()
        self.augment = Augmentation.of(augment, on_augment=on_augment)
        by_name = {t.name: t for t in tools}
        check_catalog(self.index, by_name.keys(), self.metatool, self.augment)
        self.sessions = sessions if sessions is not None else SessionManager(self.index)
        self.pinned = tuple(dict.fromkeys(pinned))
        self.session_of: SessionOf = session_of or _context_session
        self._names = frozenset(by_name)
        # Each tool's own is_enabled, ANDed into the session's answer and asked before a search or a call.
        self._own: dict[str, OwnCheck] = {t.name: t.is_enabled for t in tools if t.is_enabled is not True}
        # What each session handle shows, read once for the SDK's is_enabled round of a turn (see `_loaded_now`).
        self._turn_views: dict[Session, tuple[asyncio.AbstractEventLoop, frozenset[str]]] = {}
        # The agent each run context was last asked about, for the own checks of `format_error` (which has none).
        self._agents: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        unknown = [n for n in self.pinned if n not in by_name]
        if unknown:
            raise InvalidToolError(f"pinned tool(s) {unknown} are not among the tools given")
        first = [self._gated(by_name[n]) for n in self.pinned]
        rest = [self._gated(t) for t in tools if t.name not in self.pinned]
        self.tools: list[FunctionTool] = [*first, self._search_tool(), *rest]

    def session(self, session_id: str, *, allowed: Collection[str] | None = None) -> Session:
        """The session for a conversation. It can find and call only this agent's tools, within `allowed`.

        A new one is created with the agent's pinned tools (those the index holds and `allowed` permits).
        An existing one keeps the allowed tools it was created with: passing others raises SessionError
        (close the session to start it again with new ones), as the loop's `session_id=` does;
        `allowed=None` takes the stored ones as they are. The agent's pins are given to a new session
        only (one the conversation unpinned stays so).
        """
        wanted = agent_allowed(self._names, allowed)
        fresh = in_index(self.sessions.index, wanted)
        session = self.sessions.get_or_create(
            session_id, allowed=fresh, pinned=pinned_in(self.pinned, self.sessions.index, fresh)
        )
        stored = session.allowed
        asked = None
        if allowed is not None:
            # A tool the index does not hold now is not asked for, unless the stored session has it (the
            # tool was removed after the session was created): a change of the index is no change of rights.
            catalog = self.sessions.index.catalog
            asked = frozenset(n for n in wanted if n in catalog or (stored is not None and n in stored))
        # the agent's pins are given to a new session only: one the conversation unpinned stays unpinned
        check_session_settings(session, asked, ())
        return session.within(self._names)

    def run_config(self, *, tool_error_formatter: ToolErrorFormatter | None = None, **options: Any) -> RunConfig:
        """A RunConfig whose "tool not found" answers say how to find the tool (`options` go to RunConfig).

        A `tool_error_formatter` of the caller's answers every error that `format_error` leaves to the SDK.
        """
        formatter: ToolErrorFormatter = self.format_error
        if tool_error_formatter is not None:
            theirs = tool_error_formatter

            def formatter(args: ToolErrorFormatterArgs[Any]) -> Awaitable[str | None] | str | None:
                """Ours first (only the "tool not found" answers), then the caller's."""
                ours = self.format_error(args)
                return ours if ours is not None else theirs(args)

        behavior = options.pop("tool_not_found_behavior", "return_error_to_model")
        if behavior != "return_error_to_model":  # the instructive answers are what this RunConfig is for
            raise InvalidArgumentError(
                f"run_config(tool_not_found_behavior={behavior!r}): a call of a tool the session has not found "
                "must reach the model as an answer saying how to find it, which needs 'return_error_to_model'; "
                "leave the option out (that is the value run_config sets)"
            )
        return RunConfig(tool_not_found_behavior=behavior, tool_error_formatter=formatter, **options)

    def format_error(self, args: ToolErrorFormatterArgs[Any]) -> Awaitable[str] | str | None:
        """The instructive answer to a call of a tool the session does not expose (the SDK's text otherwise).

        The SDK builds these answers after the turn's tools ran and without the call's arguments, so
        only admission is checked: a tool this turn's tool_search just made visible is told to be
        called again (the SDK had left it out of the turn's tools), one its own `is_enabled` disables
        for this run is not available. An awaitable when that `is_enabled` is async."""
        if args.kind != "tool_not_found":
            return None
        name = args.tool_name
        ctx = args.run_context
        session = self.session_of(ctx)

        def answer(own_allows: bool) -> str:
            refused = self._revived(
                session,
                lambda live: admission(self._narrowed(live, name, own_allows), args.call_id, name, self.metatool),
            )
            if refused is not None:
                return refused.content
            return f"Tool {name!r} was just loaded by {self.metatool.name}: call it again now."

        own = self._own_allows(name, ctx, self._agent_of(ctx))
        if not inspect.isawaitable(own):
            return answer(own)

        async def later(pending: Awaitable[bool]) -> str:
            return answer(await pending)

        return later(own)

    # --- the tools' own is_enabled ------------------------------------------------------------

    def _agent_of(self, ctx: Any) -> Any:
        agent = getattr(ctx, "agent", None)  # a ToolContext knows its agent; the run's own context does not
        if agent is None:
            with _suppress_type_error():
                agent = self._agents.get(ctx)
        return agent

    def _own_allows(self, name: str, ctx: Any, agent: Any) -> bool | Awaitable[bool]:
        """The tool's own `is_enabled` for this run: a bool, or an awaitable of one when it is async. One that
        cannot answer without the agent (none known here) counts as disabled: refusing is the safe side."""
        own = self._own.get(name, True)
        if isinstance(own, bool):
            return own
        try:
            answer = own(ctx, agent)
        except Exception:
            if agent is not None:
                raise  # the application's check failed as the SDK would have seen it fail
            return False
        if inspect.isawaitable(answer):
            return _as_bool(answer)
        return bool(answer)

    async def _own_enabled(self, ctx: Any, agent: Any) -> frozenset[str]:
        """This agent's tools that their own `is_enabled` allows in this run (all of them when none has one)."""
        if not self._own:
            return self._names  # the same object each time: `within` answers it from its cache
        disabled = set()
        pending: dict[str, Awaitable[bool]] = {}
        for name in self._own:
            try:
                own = self._own_allows(name, ctx, agent)
            except Exception:
                # the async checks already asked are awaited, not dropped unawaited; the failure is the search's
                await asyncio.gather(*pending.values(), return_exceptions=True)
                raise
            if inspect.isawaitable(own):
                pending[name] = own
            elif not own:
                disabled.add(name)
        if pending:
            # Asked together, as the SDK asks them before each model call: an async check is often a round trip (a
            # rights service), and one after another made each search cost the sum of them all. One that fails
            # fails the search, as the SDK's own round would.
            answers = await asyncio.gather(*pending.values())
            disabled.update(name for name, allows in zip(pending, answers, strict=True) if not allows)
        return self._names - disabled if disabled else self._names

    def _narrowed(self, live: Session, name: str, own_allows: bool) -> Session:
        """`live`, without `name` when the tool's own is_enabled disables it: refused as outside the rights."""
        return live if own_allows else live.within(self._names - {name})

    def _loaded_now(self, ctx: RunContextWrapper[Any]) -> frozenset[str]:
        """The tools the run's session shows now (pinned or discovered, this agent's).

        The SDK asks every tool's `is_enabled` before each model call, all at once in one event-loop pass
        (one task per tool, started together); a read of the session per tool was a store round trip per tool
        (500 Redis reads a turn for 500 tools). The first asks the store and the answer serves the others of
        that pass only: it is dropped at the loop's next pass, so the next turn (after tool_search ran) reads
        the session anew. Outside a running loop nothing marks the pass's end: each call reads the store."""
        session = self.session_of(ctx)
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        kept = self._turn_views.get(session)  # a handle hashes by identity
        if kept is not None and kept[0] is loop:  # a loop closed before its pass ended: not it
            return kept[1]
        loaded = self._revived(session, lambda live: live.loaded_names())
        if loop is not None:
            self._turn_views[session] = (loop, loaded)
            loop.call_soon(self._turn_views.pop, session, None)
        return loaded

    def _revived(self, session: Session, action: Callable[[Session], T]) -> T:
        """`action` on the run's session, limited to this agent's tools (the session may be one stored
        with wider rights, or before the index gained tools the agent lacks).

        When the store dropped the session (evicted by newer sessions, or expired), it is created again
        with its allowed and pinned tools (its discoveries are lost) and `action` runs on a handle of
        that; a session of this id created meanwhile is used as it is. A session the application closed
        stays closed: its UnknownSessionError is raised, as a loop turn on it raises it."""
        try:
            return action(session.within(self._names))
        except UnknownSessionError as exc:
            return action(self._recreated(session, exc).within(self._names))

    async def _arevived(self, session: Session, action: Callable[[Session], Awaitable[T]]) -> T:
        """`_revived` for an async action."""
        try:
            return await action(session.within(self._names))
        except UnknownSessionError as exc:
            return await action(self._recreated(session, exc).within(self._names))

    def _recreated(self, session: Session, error: UnknownSessionError) -> Session:
        """The session of a handle whose session the store dropped, created again (see `_revived`); `error`
        is raised again for one the application closed."""
        manager = session.manager
        if manager.was_closed(session):
            raise error
        fresh = in_index(manager.index, agent_allowed(self._names, session.allowed))
        return manager.get_or_create(session.id, allowed=fresh, pinned=pinned_in(self.pinned, manager.index, fresh))

    # --- tools ------------------------------------------------------------------------------

    def _search_tool(self) -> FunctionTool:
        # Rendered in a private manager: a probe session in a shared one could evict a live conversation.
        probe_sessions = SessionManager(self.index, max_sessions=1)
        with scratch_session(probe_sessions, self.pinned, (), agent_allowed(self._names)) as probe:
            definition = self.metatool.definition(probe)
        if self.augment is not None and self.augment.search:
            definition = self.augment.extend(definition)

        async def invoke(ctx: Any, arguments: str) -> str:
            session = self.session_of(ctx)
            # a tool its own is_enabled disables for this run is never offered (nor made visible)
            reach = await self._own_enabled(ctx, self._agent_of(ctx))
            result = await self._arevived(
                session,
                lambda live: agate(
                    live.within(reach), ctx.tool_call_id, definition.name, arguments, self.metatool, self.augment
                ),
            )
            record_search(self.usage, session.id, result)
            return result.content

        return FunctionTool(
            name=definition.name,
            description=definition.description,
            params_json_schema=dict(definition.input_schema),
            on_invoke_tool=invoke,
            strict_json_schema=False,  # max_results and namespace are optional
        )

    def _gated(self, tool: FunctionTool) -> FunctionTool:
        name = tool.name
        run = tool.on_invoke_tool
        augment = self.augment

        def is_enabled(ctx: RunContextWrapper[Any], agent: Any) -> bool | Awaitable[bool]:
            # Both must allow: the session (found or pinned) and the tool's own check (the caller's rights).
            if name in self._own:
                with _suppress_type_error():
                    self._agents[ctx] = agent
            if name not in self._loaded_now(ctx):
                return False
            return self._own_allows(name, ctx, agent)

        async def invoke(ctx: Any, arguments: str) -> Any:
            session = self.session_of(ctx)
            allows = self._own_allows(name, ctx, self._agent_of(ctx))
            own_allows = await allows if inspect.isawaitable(allows) else allows
            result = await self._arevived(
                session,
                lambda live: agate(
                    self._narrowed(live, name, own_allows), ctx.tool_call_id, name, arguments, self.metatool, augment
                ),
            )
            if not allowed(result):
                return result.content
            if augment is not None:  # the tool's own invoke parses its own arguments only
                arguments = json.dumps(dict(result.call.arguments), ensure_ascii=False)
            try:
                output = await run(ctx, arguments)
            except Exception:
                record_call(self.usage, session.id, name, False)
                raise
            record_call(self.usage, session.id, name, not getattr(ctx, _SDK_HANDLED_FAILURE, False))
            return output

        if augment is None:
            return dataclasses.replace(tool, is_enabled=is_enabled, on_invoke_tool=invoke)
        schema = dict(augment.extend(tool_from_function_tool(tool)).input_schema)
        return dataclasses.replace(tool, is_enabled=is_enabled, on_invoke_tool=invoke, params_json_schema=schema)


async def _as_bool(answer: Awaitable[Any]) -> bool:
    return bool(await answer)


def _suppress_type_error() -> contextlib.AbstractContextManager[None]:
    # a custom run context may be unhashable or refuse weak references: its agent is then not remembered
    return contextlib.suppress(TypeError)
