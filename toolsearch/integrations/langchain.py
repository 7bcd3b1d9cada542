"""LangChain 1.x: a `create_agent` middleware that gives the model tool_search instead of every tool.

    from langchain.agents import create_agent
    from toolsearch.integrations.langchain import ToolSearchMiddleware

    agent = create_agent(model, middleware=[ToolSearchMiddleware(tools, pinned=["get_time"])],
                         checkpointer=InMemorySaver())

Each model call carries the pinned tools, `tool_search` and the tools this thread discovered;
the discovered names live in the agent state (key `toolsearch_discovered`), so a LangGraph
checkpointer keeps them per thread. A call to a catalog tool the thread has not discovered is
answered with an instructive error and never runs. Sync, async and streaming agents alike.

`max_discovered=` / `max_discovered_tokens=` cap the tools a thread has loaded, as they cap a session's
(`SessionManager`): each hook's scratch session is made under those caps and replays the thread's tools least
recently used first, so the session's own rule unloads the least recently used over a cap. The order in which
the tools were last used (found by a search, called) is kept in the state for that (`toolsearch_recent`);
`toolsearch_discovered` keeps every tool the thread found, in the order found, and a model call carries those
of them still loaded, in that order (a call keeps the tools array as it was, for the provider's prompt cache).

A catalog tool that a middleware listed before this one took out of `request.tools` (LangChain's way to
give each user their own tools) is neither sent nor offered by tool_search, and a call to it is refused:
the names it withheld at the last model call are kept in the agent state (`toolsearch_withheld`), where
the tool calls that follow find them.

`augment=` / `on_augment=` (see `toolsearch.augment`): LangChain derives a tool's schema from
its `args_schema`, which the tool also validates its input with, so the middleware sends each
catalog tool to the model as an OpenAI function definition (a dict in `request.tools`) carrying
the augmented fields, takes the values out of each call (`on_augment` gets them) and hands the
tool its own arguments only; the AI message in the thread keeps the model's call as it was made.
An async `on_augment` is awaited under `ainvoke` / `astream`; `invoke` / `stream` cannot await it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Annotated, Any, NotRequired

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
    )
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import BaseTool, StructuredTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - exercised in a subprocess, without the extra or with an old one
    from ._gate import unusable_framework

    # ExtendedModelResponse came with LangChain 1.5: an older one is installed, not missing, and needs `pip -U`
    raise unusable_framework(exc, "langchain") from exc

from .._errors import ArgumentTypeError, InvalidToolError
from ..augment import Augmentation, AugmentSpec, OnAugment
from ..executor import ResultStatus, ToolResult
from ..index import ToolIndex
from ..metatool import ToolSearchMetaTool
from ..session import Session, SessionManager, SessionState
from ..tools import Tool
from ._gate import (
    agate,
    agent_allowed,
    allowed,
    check_catalog,
    consumer_is_async,
    gate,
    record_call,
    record_search,
    scratch_session,
)

if TYPE_CHECKING:
    from ..usage import UsageRecorder

__all__ = ["STATE_KEY", "ToolSearchMiddleware", "ToolSearchState", "tool_from_langchain"]

STATE_KEY = "toolsearch_discovered"
# The catalog tools an earlier middleware took out of the last model request, for the tool calls after it.
WITHHELD_KEY = "toolsearch_withheld"
# Under a cap: the thread's discovered tools, least recently used first (a search's hits, then the calls).
RECENT_KEY = "toolsearch_recent"


def _merge_discovered(left: list[str] | None, right: list[str] | None) -> list[str]:
    # Parallel tool_search calls of one turn each report what they found: keep every name, in order.
    return list(dict.fromkeys([*(left or ()), *(right or ())]))


def _merge_recent(left: list[str] | None, right: list[str] | None) -> list[str]:
    # An update lists the tools it used, least recent first: they become the most recent, after all others.
    latest = set(right or ())
    return [*(n for n in left or () if n not in latest), *(right or ())]


class ToolSearchState(AgentState[Any]):
    """The agent state plus the names of the tools this thread discovered."""

    toolsearch_discovered: NotRequired[Annotated[list[str], _merge_discovered]]
    toolsearch_withheld: NotRequired[list[str]]


class _CappedState(ToolSearchState):
    """The state of an agent whose middleware caps its tools: with the order of their use (a state key of its own,
    so an agent without a cap gets none: LangGraph gives every declared list key an empty list)."""

    toolsearch_recent: NotRequired[Annotated[list[str], _merge_recent]]


def tool_from_langchain(tool: BaseTool) -> Tool:
    """A toolsearch Tool from a LangChain tool (name, description and argument schema)."""
    return Tool.from_openai(convert_to_openai_tool(tool))


def _state_value(state: Any, key: str) -> Any:
    """A key of the agent state, which LangGraph hands over as a mapping or as an object."""
    return state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)


def _discovered_in(state: Any) -> list[str]:
    return list(_state_value(state, STATE_KEY) or ())


def _withheld_in(state: Any) -> frozenset[str]:
    return frozenset(_state_value(state, WITHHELD_KEY) or ())


def _recent_in(state: Any) -> list[str]:
    return list(_state_value(state, RECENT_KEY) or ())


def _messages_in(state: Any) -> list[Any]:
    return list(_state_value(state, "messages") or ())


def _turn_calls(request: Any) -> list[Any]:
    """The tool calls of the model turn (the AI message) that made this request's call."""
    call_id = request.tool_call.get("id")
    if not call_id:
        return []
    for message in reversed(_messages_in(request.state)):
        calls = list(getattr(message, "tool_calls", None) or ())
        if any(c.get("id") == call_id for c in calls):
            return calls
    return []


class _Turn:
    """The model turn that made a request's call. Its tool calls are looked up in the thread's messages on first
    use and kept: under a cap one call needs them twice (to settle or spare, then for its update or its answer)."""

    def __init__(self, request: Any) -> None:
        self._request = request

    @functools.cached_property
    def calls(self) -> list[Any]:
        return _turn_calls(self._request)


def _conversation(request: Any) -> str:
    """The key that joins a thread's searches to its calls in the usage log: the LangGraph thread id,
    else (no checkpointer) the id of the conversation's first message, which add_messages assigns."""
    runtime = getattr(request, "runtime", None)
    config = getattr(runtime, "config", None) or {}
    thread = (config.get("configurable") or {}).get("thread_id")
    if thread is not None:
        return f"thread:{thread}"
    messages = _messages_in(request.state)
    first = getattr(messages[0], "id", None) if messages else None
    return f"message:{first}" if first else "langchain"


def _succeeded(outcome: Any) -> bool:
    # A tool's exception comes back as a ToolMessage with status "error" (or is raised, see below).
    return not (isinstance(outcome, ToolMessage) and outcome.status == "error")


def _never_called(**_: Any) -> str:
    raise RuntimeError("tool_search runs inside ToolSearchMiddleware; add the middleware to create_agent")


class ToolSearchMiddleware(AgentMiddleware[ToolSearchState, Any, Any]):
    """Search-then-call for a LangChain agent: `tools` are the catalog, `pinned` always sent.

    The catalog's tools are registered with the agent by the middleware (pass them here, not
    also to `create_agent`); tools given to `create_agent` that are not in the catalog pass
    through untouched. `allowed` limits what the agent can find and call (None: every catalog
    tool); a pinned tool outside it is not sent. `max_discovered` / `max_discovered_tokens` cap each
    thread's loaded tools by the rule of `SessionManager`'s (the least recently used are unloaded).
    `backend` picks the search backend (or pass a
    built `index` holding the same tools; a search never offers one of its tools that is not in `tools`);
    `metatool` configures the tool_search tool (name, result count, description). `usage` feeds
    a usage log (see docs/learning.md): each search and the catalog tools then called successfully.
    """

    state_schema = ToolSearchState

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable[..., Any]],
        *,
        pinned: Collection[str] = (),
        allowed: Collection[str] | None = None,
        backend: str = "bm25",
        index: ToolIndex | None = None,
        metatool: ToolSearchMetaTool | None = None,
        usage: UsageRecorder | None = None,
        augment: AugmentSpec | None = None,
        on_augment: OnAugment | None = None,
        max_discovered: int | None = None,
        max_discovered_tokens: int | None = None,
    ) -> None:
        super().__init__()
        self.usage = usage
        self.augment = Augmentation.of(augment, on_augment=on_augment)
        from langchain_core.tools import tool as as_tool

        catalog_tools = [t if isinstance(t, BaseTool) else as_tool(t) for t in tools]
        self._by_name: dict[str, BaseTool] = {t.name: t for t in catalog_tools}
        # `is None`, not `or`: an index is falsy when empty
        if index is None:
            index = ToolIndex.build([tool_from_langchain(t) for t in catalog_tools], backend)
        self.index = index
        self.metatool = metatool or ToolSearchMetaTool()
        check_catalog(self.index, self._by_name.keys(), self.metatool, self.augment)
        self.pinned = tuple(dict.fromkeys(pinned))
        unknown = [n for n in self.pinned if n not in self._by_name]
        if unknown:
            raise InvalidToolError(f"pinned tool(s) {unknown} are not among the tools given; pin catalog tools only")
        # An index that holds more tools than `tools` (an application's, which may grow) must not offer what
        # this agent cannot call.
        self.allowed = agent_allowed(self._by_name.keys(), allowed)
        # sessions here are scratch views (created and closed per hook); the thread's state is the truth. The
        # caps are the manager's (checked there, applied by its sessions): one home for the rule.
        self.sessions = SessionManager(
            self.index, max_sessions=100_000, max_discovered=max_discovered, max_discovered_tokens=max_discovered_tokens
        )
        self._capped = max_discovered is not None or max_discovered_tokens is not None
        if self._capped:
            self.state_schema = _CappedState
        with scratch_session(self.sessions, self.pinned, (), self.allowed) as session:
            definition = self.metatool.definition(session)
        if self.augment is not None and self.augment.search:
            definition = self.augment.extend(definition)
        self.search_tool = StructuredTool.from_function(
            func=_never_called,
            name=definition.name,
            description=definition.description,
            args_schema=dict(definition.input_schema),
        )
        self.tools = [self.search_tool, *catalog_tools]

    # --- model calls ------------------------------------------------------------------------

    def _in_reach(self, withheld: frozenset[str]) -> frozenset[str]:
        """The tools this thread may find and call: `allowed`, less those an earlier middleware withheld."""
        return self.allowed - withheld if withheld else self.allowed  # the same object, whose answers are cached

    def _tools_for(self, request: ModelRequest[Any]) -> tuple[list[BaseTool | dict[str, Any]], frozenset[str]]:
        """Pinned (and non-catalog) tools, tool_search, then this thread's discovered tools: those the
        thread's session shows now (a tool removed from the index, or outside `allowed`, is not sent);
        and the catalog tools missing from `request.tools`, which an earlier middleware withheld and which
        are never sent back."""
        catalog = self._by_name
        offered = {t.name: t for t in request.tools if isinstance(t, BaseTool)}
        withheld = frozenset(n for n in catalog if n not in offered)
        passthrough = [
            t for t in request.tools
            if not (isinstance(t, BaseTool) and (t.name in catalog or t.name == self.search_tool.name))
        ]
        in_reach = self._in_reach(withheld)
        with self._thread_session(request.state, in_reach) as session:
            shown = [t.name for t in session.visible_tools() if t.name in offered]
            pins = set(session.pinned)
        pinned = [offered[n] for n in shown if n in pins]
        loaded = set(shown) - pins
        # in the order the thread found them (the scratch session was seeded in the order of use)
        discovered = [offered[n] for n in dict.fromkeys(_discovered_in(request.state)) if n in loaded]
        augment = self.augment
        if augment is None:
            return [*passthrough, *pinned, self.search_tool, *discovered], withheld

        def augmented(tool: BaseTool) -> dict[str, Any]:  # an OpenAI function dict: the model reads the schema
            return augment.extend(tool_from_langchain(tool)).to_openai()

        return [*passthrough, *map(augmented, pinned), self.search_tool, *map(augmented, discovered)], withheld

    @staticmethod
    def _answered(
        request: ModelRequest[Any], response: ModelResponse[Any], withheld: frozenset[str]
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        """The model's response, with the withheld names for the state when they changed (the tool calls of
        this turn are checked against them; unchanged, the checkpoint is spared the write)."""
        if withheld == _withheld_in(request.state):
            return response
        return ExtendedModelResponse(model_response=response, command=Command(update={WITHHELD_KEY: sorted(withheld)}))

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        tools, withheld = self._tools_for(request)
        return self._answered(request, handler(request.override(tools=tools)), withheld)

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        tools, withheld = self._tools_for(request)
        return self._answered(request, await handler(request.override(tools=tools)), withheld)

    # --- tool calls -------------------------------------------------------------------------

    def _gated(self, request: Any) -> bool:
        """Whether the gate answers this call: False for an agent's own tool outside the catalog. A name the
        agent does not know at all is refused by the gate too: ToolNode's own answer would list every
        registered tool, hidden ones included."""
        name = request.tool_call["name"]
        return name == self.search_tool.name or name in self._by_name or request.tool is None

    def _scratch(self, request: Any) -> AbstractContextManager[Session]:
        """The thread's scratch session for a tool call: its discoveries, within what it may reach (a tool an
        earlier middleware withheld from the last model request can be neither found nor called)."""
        return self._thread_session(request.state, self._in_reach(_withheld_in(request.state)))

    def _thread_session(self, state: Any, reach: frozenset[str]) -> AbstractContextManager[Session]:
        """A scratch session holding the thread's discovered tools. Under a cap they are given most recently
        used first (one discovery: its first name gets the newest use), so the session's own rule keeps
        those that fit and unloads the least recently used, as it does for a session that lives on."""
        found = _discovered_in(state)
        if not self._capped:
            return scratch_session(self.sessions, self.pinned, found, reach)
        recent = _recent_in(state)
        latest = set(recent)
        # tools found but never used since are older than any used: the later found, the more recent
        order = [*reversed(recent), *reversed([n for n in found if n not in latest])]
        return scratch_session(self.sessions, self.pinned, order, reach)

    def _check(self, request: Any, turn: _Turn) -> tuple[ToolResult, dict[str, Any]] | None:
        """None for an agent's own tool outside the catalog; else the gate's result (`allowed(result)`:
        the call may run, with `result.call.arguments`; otherwise its content is what to send back)
        and what a search writes to the thread's state (see `_update`)."""
        if not self._gated(request):
            return None
        call = request.tool_call
        name = call["name"]
        augment = self.augment
        if augment is not None and consumer_is_async(augment) and (name != self.search_tool.name or augment.search):
            raise ArgumentTypeError(
                "ToolSearchMiddleware's on_augment is async: run the agent with ainvoke / astream, which await it "
                "(invoke and stream cannot), or pass a sync on_augment"
            )
        with self._settled(request, turn) as session:
            before = session.state()
            result = gate(session, call.get("id") or "", name, call.get("args"), self.metatool, self.augment)
            update = self._update(turn, session, before, result)
        record_search(self.usage, _conversation(request), result)
        return result, update

    async def _acheck(self, request: Any, turn: _Turn) -> tuple[ToolResult, dict[str, Any]] | None:
        """`_check` for the async agent: an async `on_augment` is awaited."""
        if not self._gated(request):
            return None
        call = request.tool_call
        with self._settled(request, turn) as session:
            before = session.state()
            result = await agate(
                session, call.get("id") or "", call["name"], call.get("args"), self.metatool, self.augment
            )
            update = self._update(turn, session, before, result)
        record_search(self.usage, _conversation(request), result)
        return result, update

    def _update(self, turn: _Turn, session: Session, before: SessionState, result: ToolResult) -> dict[str, Any]:
        """What a search writes to the thread's state: the tools it found (and, under a cap, what it used).

        Under a cap the turn's calls come after its searches, as the core executor runs them: the tools they
        call that are still loaded are used once the search has run, and this update says so (a call of a
        searching turn writes nothing itself, whose update the graph may apply before or after this one)."""
        if result.status is not ResultStatus.SEARCH:
            return {}
        if not self._capped:
            return {STATE_KEY: list(session.discovered)}
        called = [c.get("name") for c in turn.calls]
        session.touch([n for n in called if n in self._by_name and n not in session.pinned])
        after = session.state()
        used = sorted((n for n, tick in after.last_used.items() if before.last_used.get(n) != tick),
                      key=after.last_used.__getitem__)
        return {STATE_KEY: [n for n in session.discovered if n not in before.last_used], RECENT_KEY: used}

    @contextmanager
    def _settled(self, request: Any, turn: _Turn) -> Iterator[Session]:
        """The call's scratch session, with its model turn's searches run first unless it is a search itself.

        A call of a tool the model request carried is let through however those searches change what is
        loaded (under a cap they may unload it), as the core executor lets it. Under a cap a search never
        unloads a loaded tool its turn calls: they are spared (`Session.spare`), as the core executor spares
        them, and the search's weaker hits go first."""
        with self._scratch(request) as session:
            name = request.tool_call["name"]
            if name == self.search_tool.name:
                if self._capped:
                    called = {c.get("name") for c in turn.calls}
                    session.spare(session.loaded_names().intersection(n for n in called if n in self._by_name))
            elif not session.is_visible(name):
                self._settle_searches(session, turn)
            yield session

    def _settle_searches(self, session: Session, turn: _Turn) -> None:
        """Run the tool_search calls of this call's model turn on its scratch session first.

        The core executor runs a turn's searches before its other calls; ToolNode runs each call
        against the state from before the turn, where what those searches find is not recorded
        yet. They run again here (each search's own call answers the model and updates the state),
        with their augmented values checked but not handed to `on_augment` a second time."""
        quiet = None if self.augment is None else dataclasses.replace(self.augment, on_augment=None)
        for call in turn.calls:
            if call.get("name") == self.search_tool.name:
                gate(session, call.get("id") or "", call["name"], call.get("args"), self.metatool, quiet)

    def _runnable(self, request: Any, checked: tuple[ToolResult, dict[str, Any]] | None) -> Any:
        """The request the tool runs with: its own arguments only when the call was augmented."""
        if checked is None or self.augment is None:
            return request
        return request.override(tool_call={**request.tool_call, "args": dict(checked[0].call.arguments)})

    def _ran(self, request: Any, ok: bool) -> None:
        name = request.tool_call["name"]
        if self.usage is not None and name in self._by_name:
            record_call(self.usage, _conversation(request), name, ok)

    def _used(self, request: Any, turn: _Turn, outcome: ToolMessage | Command[Any]) -> ToolMessage | Command[Any]:
        """A call's answer, telling the thread's state under a cap that the tool was just used (unless its turn
        searched: the searches' updates say it, after what they found). A tool's own Command is left as it is."""
        name = request.tool_call["name"]
        if (
            not self._capped
            or name not in self._by_name
            or name in self.pinned
            or not isinstance(outcome, ToolMessage)
            or any(c.get("name") == self.search_tool.name for c in turn.calls)
        ):
            return outcome
        return Command(update={RECENT_KEY: [name], "messages": [outcome]})

    def _answer(self, request: Any, checked: tuple[ToolResult, dict[str, Any]]) -> ToolMessage | Command[Any]:
        result, update = checked
        call = request.tool_call
        message = ToolMessage(
            content=result.content,
            tool_call_id=call.get("id") or "",
            name=call["name"],
            status="error" if result.is_error else "success",
        )
        if result.status is ResultStatus.SEARCH:
            return Command(update={**update, "messages": [message]})
        return message

    def wrap_tool_call(
        self, request: Any, handler: Callable[[Any], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        turn = _Turn(request)  # read from the thread's messages once, if at all, for every step below
        checked = self._check(request, turn)
        if checked is not None and not allowed(checked[0]):
            return self._answer(request, checked)
        try:
            outcome = handler(self._runnable(request, checked))
        except Exception:
            self._ran(request, False)
            raise
        self._ran(request, _succeeded(outcome))
        return self._used(request, turn, outcome) if checked is not None else outcome

    async def awrap_tool_call(
        self, request: Any, handler: Callable[[Any], Awaitable[ToolMessage | Command[Any]]]
    ) -> ToolMessage | Command[Any]:
        turn = _Turn(request)
        checked = await self._acheck(request, turn)
        if checked is not None and not allowed(checked[0]):
            return self._answer(request, checked)
        try:
            outcome = await handler(self._runnable(request, checked))
        except Exception:
            self._ran(request, False)
            raise
        self._ran(request, _succeeded(outcome))
        return self._used(request, turn, outcome) if checked is not None else outcome
