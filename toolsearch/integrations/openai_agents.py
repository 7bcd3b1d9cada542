"""OpenAI Agents SDK: tool_search as a FunctionTool and the catalog's tools gated by a toolsearch session.

    from agents import Agent, Runner
    from toolsearch.integrations.openai_agents import AgentToolSearch

    search = AgentToolSearch([get_weather, send_email, ...], pinned=["get_time"])
    agent = Agent(name="assistant", model=model, tools=search.tools)
    Runner.run_sync(agent, "...", context=search.session("user-1"), run_config=search.run_config())

Each tool's `is_enabled` asks the run's session whether the tool is pinned or discovered, so the
model is sent the pinned tools, `tool_search` and what it found; the session (any SessionStore:
memory, Redis) remembers discoveries across runs. A call to a tool the session has not found is
answered with an instructive error (`run_config()` turns the SDK's "tool not found" into it) and
never runs. The run's `context` is the toolsearch Session, or any object with a
`toolsearch_session` attribute (pass `session_of` to find it elsewhere).

`augment=` / `on_augment=` (see `toolsearch.augment`) extend every catalog tool's
`params_json_schema` (and tool_search's, with `Augmentation.of(..., search=True)`); each call's
augmented values go to `on_augment` and the tool's own invoke gets its own arguments only. A
strict tool (`strict_json_schema=True`, the SDK's default) has every property required by the
SDK's strict form, so there an optional augmented field is required too.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

try:
    from agents import FunctionTool, RunConfig, RunContextWrapper
    from agents.run_config import ToolErrorFormatter, ToolErrorFormatterArgs
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    from .._errors import missing_dependency

    raise missing_dependency("agents", "openai-agents") from exc

from .._errors import InvalidToolError, SessionRequiredError, UnknownSessionError
from ..augment import Augmentation, AugmentSpec, OnAugment
from ..index import ToolIndex
from ..metatool import ToolSearchMetaTool
from ..session import Session, SessionManager, check_session_settings, pinned_in
from ..tools import Tool
from ._gate import (
    admission,
    agent_allowed,
    allowed,
    check_catalog,
    gate,
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

        return RunConfig(tool_not_found_behavior="return_error_to_model", tool_error_formatter=formatter, **options)

    def format_error(self, args: ToolErrorFormatterArgs[Any]) -> str | None:
        """The instructive answer to a call of a tool the session does not expose (the SDK's text otherwise).

        The SDK builds these answers after the turn's tools ran and without the call's arguments, so
        only admission is checked: a tool this turn's tool_search just made visible is told to be
        called again (the SDK had left it out of the turn's tools)."""
        if args.kind != "tool_not_found":
            return None
        session = self.session_of(args.run_context)
        refused = self._revived(session, lambda live: admission(live, args.call_id, args.tool_name, self.metatool))
        if refused is not None:
            return refused.content
        return f"Tool {args.tool_name!r} was just loaded by {self.metatool.name}: call it again now."

    def _revived(self, session: Session, action: Callable[[Session], T]) -> T:
        """`action` on the run's session, limited to this agent's tools (the session may be one stored
        with wider rights, or before the index gained tools the agent lacks).

        When the store dropped the session (evicted by newer sessions, or expired), it is created again
        with its allowed and pinned tools (its discoveries are lost) and `action` runs on a handle of
        that; a session of this id created meanwhile is used as it is. A session the application closed
        stays closed: its UnknownSessionError is raised, as a loop turn on it raises it."""
        try:
            return action(session.within(self._names))
        except UnknownSessionError:
            manager = session.manager
            if manager.was_closed(session):
                raise
            fresh = in_index(manager.index, agent_allowed(self._names, session.allowed))
            live = manager.get_or_create(session.id, allowed=fresh, pinned=pinned_in(self.pinned, manager.index, fresh))
            return action(live.within(self._names))

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
            result = self._revived(
                session,
                lambda live: gate(live, ctx.tool_call_id, definition.name, arguments, self.metatool, self.augment),
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

        def is_enabled(ctx: RunContextWrapper[Any], agent: Any) -> bool:
            session = self.session_of(ctx)
            return self._revived(session, lambda live: live.is_visible(name))

        async def invoke(ctx: Any, arguments: str) -> Any:
            session = self.session_of(ctx)
            result = self._revived(
                session, lambda live: gate(live, ctx.tool_call_id, name, arguments, self.metatool, augment)
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
