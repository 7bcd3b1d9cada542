"""What every framework plug-in shares: scratch sessions seeded from framework state, the call gate, and the error
for a framework that is missing or too old.

The oldest release of each framework a plug-in works with is written once, in `EXTRAS`, a copy of the `>=` pins of
pyproject.toml's [project.optional-dependencies]; tests/integrations/test_integrations_extras.py fails when any of
them differs from pyproject's. The pins are not read from toolsearch's installed metadata when an import fails
because that metadata can be absent (a source tree on the path) or stale (an editable install keeps the pins of
the day it was installed, until it is installed again), and reading its markers needs `packaging`, which the core
does not require: a check that runs with the tests holds the copy to pyproject, and the error path reads no file.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .._errors import InvalidToolError, MissingDependencyError, Requirement, unusable_extra
from ..executor import ExecutorConfig, ResultStatus, ToolExecutor, ToolResult
from ..index import ToolIndex
from ..metatool import ToolSearchMetaTool
from ..providers._base import ToolCall
from ..providers.drive import is_async_callable
from ..session import Session, SessionManager, pinned_in
from ..usage import usage_not_recorded

if TYPE_CHECKING:
    from ..augment import Augmentation
    from ..usage import UsageRecorder

# Each plug-in's extra: the top-level modules it imports from the frameworks, each with how a message names it, its
# distribution (what pip installs) and the release the extra pins with `>=` in pyproject.toml (the test named in
# the module's docstring holds these to it). The first is the framework itself.
EXTRAS: dict[str, dict[str, Requirement]] = {
    "langchain": {"langchain": ("LangChain", "langchain", "1.5"), "langgraph": ("LangGraph", "langgraph", "1.0")},
    "pydantic-ai": {"pydantic_ai": ("Pydantic AI", "pydantic-ai-slim", "2.60")},
    "openai-agents": {"agents": ("the OpenAI Agents SDK", "openai-agents", "0.24")},
}


def unusable_framework(exc: ImportError, extra: str) -> MissingDependencyError:
    """The error for a plug-in whose framework failed to import (see `unusable_extra`), from its extra's `EXTRAS`
    entry; a failed module the entry does not name (one the framework imports itself) is asked for as the
    framework's pin brings it."""
    return unusable_extra(exc, extra, EXTRAS[extra])


# The executor decides whether a call may run; the framework runs it (its own error handling,
# interrupts and streaming stay intact), so the executor only ever "runs" this marker.
_ALLOWED = object()
# One call at a time, no worker thread: the gate must run in the framework's own thread/context.
GATE_CONFIG = ExecutorConfig(
    tool_timeout=None, undiscovered="instruct", parallel_tool_calls=False, provider_names=False
)


def check_catalog(
    index: ToolIndex, names: Collection[str], metatool: ToolSearchMetaTool, augment: Augmentation | None = None
) -> None:
    """The framework's tools must all be in the index, none may take the search tool's name, and
    none may have a parameter named like an augmented field (AugmentationError naming both)."""
    missing = sorted(set(names) - set(index.catalog.names))
    if missing:
        raise InvalidToolError(f"the index does not hold the tool(s) {missing}; build it from the same tools")
    metatool.check_clash(names.__contains__)  # the rule's one home, which the core entry points apply too
    if augment is not None:
        augment.check(index.catalog, catalog_key=index.catalog.hash)


def agent_allowed(names: Collection[str], allowed: Collection[str] | None = None) -> frozenset[str]:
    """The allowed subset for an agent's sessions: `allowed` (None: every tool) limited to the agent's
    own tools `names`, always: the index may be an application's shared one, and may gain tools the
    agent lacks at any time, so a search must never offer a tool the agent cannot call."""
    own = frozenset(names)
    return own if allowed is None else own & frozenset(allowed)


def in_index(index: ToolIndex, names: Collection[str]) -> frozenset[str]:
    """Those of `names` the index holds now: what a new session may be allowed (`create` refuses the
    others), while a tool an upstream removed is out of the index.

    A framework asks on every hook with the same names and, until the index changes, the same catalog:
    the last answer is kept (a walk over a 10,000-tool agent's names was 4 ms of each model call)."""
    catalog = index.catalog
    last = _LAST_IN_INDEX
    if last is not None and last[0] is catalog and last[1] is names:
        return last[2]
    live = frozenset(n for n in names if n in catalog)
    if isinstance(names, frozenset):  # only names that cannot change under the same object
        _remember_in_index((catalog, names, live))
    return live


# (catalog, names, answer) of the last `in_index`: one entry, replaced whole (a tuple assignment is atomic).
_LAST_IN_INDEX: tuple[object, Collection[str], frozenset[str]] | None = None


def _remember_in_index(entry: tuple[object, Collection[str], frozenset[str]]) -> None:
    global _LAST_IN_INDEX
    _LAST_IN_INDEX = entry


@contextmanager
def scratch_session(
    sessions: SessionManager,
    pinned: Collection[str],
    discovered: Sequence[str],
    allowed: Collection[str],
) -> Iterator[Session]:
    """A short-lived session holding a conversation's discovered tools, for frameworks that keep
    the discovered set in their own state (a LangGraph checkpoint, say); closed on exit.

    Allowed and pinned tools the index does not hold now (removed since the agent was built) and
    pins outside `allowed` are left out, so a change of the shared index never breaks a turn."""
    live = in_index(sessions.index, allowed)
    session = sessions.create(
        f"scratch-{uuid.uuid4().hex}", pinned=pinned_in(pinned, sessions.index, live), allowed=live
    )
    try:
        known = [n for n in discovered if session.is_allowed(n)]
        if known:
            session.discover(known)
        yield session
    finally:
        sessions.close(session.id)


def gate(
    session: Session,
    call_id: str,
    name: str,
    arguments: Mapping[str, Any] | str | None,
    metatool: ToolSearchMetaTool,
    augment: Augmentation | None = None,
) -> ToolResult:
    """Run a tool_search, or check a tool call: status OK means the framework may run the tool.

    Everything else (a search's result text, a refusal of an undiscovered or unknown tool, invalid
    arguments, a missing augmented field) is a ToolResult whose `content` goes back to the model
    as the tool's answer. With `augment`, a call let through has handed its augmented values to
    `augment.on_augment`, and `result.call.arguments` are the tool's own arguments: the ones the
    framework must run it with.
    """
    executor = ToolExecutor({name: lambda **_: _ALLOWED}, metatool=metatool, config=GATE_CONFIG, augment=augment)
    (result,) = executor.execute(session, [_call(call_id, name, arguments)])
    return result


async def agate(
    session: Session,
    call_id: str,
    name: str,
    arguments: Mapping[str, Any] | str | None,
    metatool: ToolSearchMetaTool,
    augment: Augmentation | None = None,
) -> ToolResult:
    """`gate` for a framework's async path (LangChain's `ainvoke`, the Agents SDK's tools): the executor's
    async driver, so an async `on_augment` is awaited, as toolsearch's own `arun` awaits it."""
    executor = ToolExecutor({name: _let_through}, metatool=metatool, config=GATE_CONFIG, augment=augment)
    (result,) = await executor.aexecute(session, [_call(call_id, name, arguments)])
    return result


async def _let_through(**_: Any) -> object:
    # async, so the async driver awaits the marker here instead of calling it in a worker thread
    return _ALLOWED


def _call(call_id: str, name: str, arguments: Mapping[str, Any] | str | None) -> ToolCall:
    if isinstance(arguments, str) or arguments is None:
        return ToolCall.from_json(call_id, name, arguments)
    return ToolCall(call_id, name, dict(arguments))


def consumer_is_async(augment: Augmentation | None) -> bool:
    """True when the augmentation's `on_augment` is a coroutine function: only a framework's async path can
    await it (its sync path would hand the executor an awaitable it must refuse)."""
    return augment is not None and augment.on_augment is not None and is_async_callable(augment.on_augment)


def admission(session: Session, call_id: str, name: str, metatool: ToolSearchMetaTool) -> ToolResult | None:
    """The refusal of a call by the allow and discover rules alone, or None when the tool is
    callable now; its arguments are not looked at (for a framework that reports a call without them)."""
    executor = ToolExecutor(metatool=metatool, config=GATE_CONFIG)
    return executor.admit(session, ToolCall(call_id, name, {}))


def allowed(result: ToolResult) -> bool:
    """True when the gate let the call through (the framework should run the tool now)."""
    return result.status is ResultStatus.OK and result.value is _ALLOWED


def record_search(usage: UsageRecorder | None, conversation: str, result: ToolResult) -> None:
    """Tell the usage log what a tool_search showed (nothing for a refused or failed search).

    Only the search is recorded here: the gate lets a call through before the framework runs it,
    so whether the call worked is known only afterwards (`record_call`)."""
    search = result.search
    if usage is not None and search is not None and search.error is None:
        try:
            usage.record_search(conversation, search.query, search.names, ranked=search.ranked)
        except Exception as exc:  # a failing usage store costs learning, never the search (as in the executor)
            usage_not_recorded(usage, exc, "a tool_search")


def record_call(usage: UsageRecorder | None, conversation: str, name: str, ok: bool) -> None:
    """Tell the usage log how a call the framework ran went; it is credited to the search that showed it."""
    if usage is not None:
        try:
            usage.record_call(conversation, name, ok)
        except Exception as exc:  # the tool has run: its result stands
            usage_not_recorded(usage, exc, f"a call of {name!r}")
