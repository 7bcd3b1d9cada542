"""Pydantic AI: toolsearch's retrieval as the search strategy of the `ToolSearch` capability.

    from pydantic_ai import Agent, Tool
    from toolsearch.integrations.pydantic_ai import tool_search

    agent = Agent(model, tools=[Tool(f, defer_loading=True) for f in functions], capabilities=[tool_search()])

Tools marked `defer_loading=True` stay hidden until the model's `search_tools` call finds them;
the finding is done by a toolsearch index (BM25 by default, any backend by name) instead of the
built-in keyword-overlap count. The index is built once per set of deferred tools and cached by
the catalog's content hash, so every run and every agent over the same tools shares it; a search
runs in a worker thread, so a build (seconds for a large set on the vector backends) never stalls
the event loop. `tool_search()` checks the backend and its options at once, before any run.
`tool_search(usage=recorder)` feeds a usage log: each search and the found tools then called
successfully, joined by the run's conversation id.

`augment_tools(Why, on_augment=...)` is a capability of its own (see `toolsearch.augment`):
Pydantic AI lets a capability extend each step's tool definitions (`prepare_tools`, deferred
tools included, so they carry the fields when a search loads them) and rewrite a call's raw
arguments before they are validated (`before_tool_validate`). The augmented values are taken
out there and handed to `on_augment`; a missing or bad one asks the model to retry the call
with the executor's invalid-arguments text; the tool validates and runs its own arguments only.
`search_tools` keeps its schema unless the augmentation asks for the search tool too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

try:
    from pydantic_ai import ModelRetry, RunContext
    from pydantic_ai.capabilities import AbstractCapability, ToolSearch
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.tools import ToolDefinition
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    from ._gate import unusable_framework

    # the extra's pin: a release that imports but lacks a name here is named with the upgrade, not called missing
    raise unusable_framework(exc, "pydantic-ai") from exc

from .._errors import InvalidArgumentError, InvalidQueryError, InvalidToolError
from ..augment import Augmentation, AugmentSpec, OnAugment
from ..catalog import Catalog
from ..executor import invalid_arguments_text
from ..index import ToolIndex
from ..tools import Tool
from ..usage import usage_not_recorded

if TYPE_CHECKING:
    from ..usage import UsageRecorder

__all__ = [
    "AugmentTools",
    "LearningToolSearch",
    "ToolSearchStrategy",
    "augment_tools",
    "tool_search",
    "tool_from_definition",
]

logger = logging.getLogger(__name__)

_RRF_K = 60  # reciprocal-rank fusion constant for several queries (the usual value from the RRF paper)


def tool_from_definition(definition: ToolDefinition) -> Tool:
    """A toolsearch Tool from a Pydantic AI tool definition."""
    return Tool(
        name=definition.name,
        description=definition.description or "",
        input_schema=definition.parameters_json_schema or {"type": "object", "properties": {}},
    )


def _searchable(tools: Sequence[ToolDefinition]) -> list[Tool]:
    """The tools toolsearch accepts; each one it refuses is left out with a warning naming it and why,
    so one odd definition (a zero-width character in an enum value, say) cannot break every search."""
    accepted = []
    for definition in tools:
        try:
            accepted.append(tool_from_definition(definition))
        except InvalidToolError as exc:
            logger.warning("tool_search leaves out the deferred tool %r: %s", definition.name, exc)
    return accepted


class ToolSearchStrategy:
    """A `ToolSearch(strategy=...)` search function backed by a toolsearch index.

    `backend` names the search backend ("bm25", "vector", "hybrid", "regex", "auto"); `options`
    go to its constructor. Several queries in one call are fused by reciprocal rank. Indexes are
    cached by catalog hash (at most `cache_size` tool sets, least recently used dropped). A tool
    toolsearch refuses is left out of the index (a warning says which and why, once per index).
    `usage` is told what each search showed (the calls that follow are told by LearningToolSearch).
    """

    def __init__(
        self,
        backend: str = "bm25",
        *,
        max_results: int = 10,
        cache_size: int = 8,
        usage: UsageRecorder | None = None,
        **options: Any,
    ) -> None:
        self.usage = usage
        if max_results < 1:
            raise InvalidArgumentError(f"max_results must be at least 1, got {max_results!r}")
        if cache_size < 1:
            raise InvalidArgumentError(f"cache_size must be at least 1, got {cache_size!r}")
        self.backend = backend
        self.max_results = max_results
        self.options = options
        # An unknown backend or option fails here, not at the model's first search (after a paid request). An
        # empty backend is cheap: the vector backends load their model only when something is embedded.
        ToolIndex.build((), backend, **options)
        self.cache_size = cache_size
        self._indexes: OrderedDict[str, ToolIndex] = OrderedDict()
        self._keys: dict[str, str] = {}  # JSON of the definitions -> catalog hash
        # Searches run in worker threads: runs that search the same new tool set together wait on its one build
        # (catalog hash -> the build under way) instead of each building it.
        self._building: dict[str, Future[ToolIndex]] = {}
        self._lock = threading.Lock()
        self.builds = 0  # how many indexes were built (a cache hit, or a wait on another thread's build, builds none)

    def index_for(self, tools: Sequence[ToolDefinition]) -> ToolIndex | None:
        """The index over these tools (those toolsearch accepts; None when it accepts none): cached by
        the catalog's content hash, built on a miss, once: a thread that needs a catalog another is building
        waits for that build and shares its index (or its error)."""
        # The search function gets the definitions on every call; one JSON dump of them finds a
        # known tool set without validating and hashing each tool again.
        seen = json.dumps(
            [[t.name, t.description, t.parameters_json_schema] for t in tools], sort_keys=True, default=str
        )
        with self._lock:
            key = self._keys.get(seen)
            index = self._indexes.get(key) if key is not None else None
            if index is not None and key is not None:
                self._indexes.move_to_end(key)
                return index
        accepted = _searchable(tools)
        if not accepted:
            return None
        catalog = Catalog(accepted)
        key = catalog.hash
        with self._lock:
            index = self._indexes.get(key)
            if index is not None:
                self._indexes.move_to_end(key)
                self._keys[seen] = key
                return index
            building = self._building.get(key)
            mine = building is None
            if building is None:
                building = self._building[key] = Future()
        if not mine:
            # The index comes from the build itself, not the cache: a cache of one tool set may have dropped it.
            index = building.result()
            with self._lock:
                if key in self._indexes:
                    self._keys[seen] = key
            return index
        try:
            index = ToolIndex.build(catalog, self.backend, **self.options)
        except BaseException as exc:
            # The waiters get the same error; the next search of this tool set tries the build again.
            with self._lock:
                del self._building[key]
            building.set_exception(exc)
            raise
        with self._lock:
            self.builds += 1
            self._indexes[key] = index
            self._keys[seen] = key
            while len(self._indexes) > self.cache_size:
                gone, _ = self._indexes.popitem(last=False)
                self._keys = {k: v for k, v in self._keys.items() if v != gone}
            # Cached before it stops being under way: a thread that missed the cache finds one or the other.
            del self._building[key]
        building.set_result(index)
        return index

    def search(self, queries: Sequence[str], tools: Sequence[ToolDefinition]) -> list[str]:
        """Tool names for the queries, best first (at most `max_results`).

        A query toolsearch refuses (too long, a control character) is skipped; InvalidQueryError,
        saying why, when every query was refused."""
        texts = [q.strip() for q in queries if isinstance(q, str) and q.strip()]
        if not texts or not tools:
            return []
        index = self.index_for(tools)
        if index is None:
            return []
        scores: dict[str, float] = {}
        refusals: list[str] = []
        for text in texts:
            try:
                result = index.search(text, self.max_results)
            except InvalidQueryError as exc:
                refusals.append(str(exc))
                continue  # one unparsable query must not lose the others' results
            for rank, name in enumerate(result.names):
                scores[name] = scores.get(name, 0.0) + 1.0 / (_RRF_K + rank + 1)
        if len(refusals) == len(texts):
            raise InvalidQueryError("; ".join(dict.fromkeys(refusals)))
        ranked = sorted(scores, key=lambda name: -scores[name])
        return ranked[: self.max_results]

    async def __call__(
        self, ctx: RunContext[Any], queries: Sequence[str], tools: Sequence[ToolDefinition]
    ) -> list[str]:
        # Pydantic AI awaits the strategy on its event loop: the search (an index build on a new tool set, the
        # query's embedding) runs in a worker thread, so other runs of the process go on meanwhile.
        try:
            names = await asyncio.to_thread(self.search, queries, tools)
        except InvalidQueryError as exc:
            # Not "no matching tools": the model is told why its search was refused and tries again.
            raise ModelRetry(f"The search was refused: {exc}") from exc
        if self.usage is not None:
            # One search of all its queries: the words of each may be what found the tool.
            text = "; ".join(q.strip() for q in queries if isinstance(q, str) and q.strip())
            try:
                self.usage.record_search(_conversation_of(ctx), text, names)
            except Exception as exc:  # a failing usage store costs learning, never the search
                usage_not_recorded(self.usage, exc, "a tool search")
        return names


def _conversation_of(ctx: RunContext[Any]) -> str:
    """The key joining a conversation's searches to its calls: Pydantic AI's conversation id (kept
    across runs that continue a message history), else the run's id."""
    return str(getattr(ctx, "conversation_id", None) or getattr(ctx, "run_id", None) or "pydantic-ai")


@dataclass
class LearningToolSearch(ToolSearch[Any]):
    """`ToolSearch` that also tells a usage log which found tools were then called successfully.

    A call that raised (or asked the model to retry) never reaches `after_tool_execute`, so only
    calls that returned are credited, each to the latest search of its conversation that showed it.
    """

    usage: UsageRecorder | None = None

    async def after_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: Any, result: Any
    ) -> Any:
        if self.usage is not None:
            try:
                self.usage.record_call(_conversation_of(ctx), call.tool_name, True)
            except Exception as exc:  # the tool has run: its result stands
                usage_not_recorded(self.usage, exc, f"a call of {call.tool_name!r}")
        return result


# Pydantic AI's own `ToolSearch` settings (tools=, tool_description=, parameter_description=, id=): they go
# to the capability, never to the backend; read off the dataclass so a new one is passed through too.
_CAPABILITY_FIELDS = frozenset(
    f.name for f in dataclasses.fields(ToolSearch) if f.init and f.name not in ("strategy", "max_results")
)


def tool_search(
    backend: str = "bm25", *, max_results: int = 5, usage: UsageRecorder | None = None, **options: Any
) -> ToolSearch[Any]:
    """The `ToolSearch` capability with toolsearch retrieval: `Agent(..., capabilities=[tool_search()])`.

    `usage` feeds a usage log (see docs/learning.md) with each search and the calls it led to. The
    capability's own settings (`tools=`, `tool_description=`, `parameter_description=`, `id=`) go to
    `ToolSearch`; the other `options` go to the backend, and are checked now (BackendError).
    """
    settings = {k: options.pop(k) for k in _CAPABILITY_FIELDS & options.keys()}
    strategy = ToolSearchStrategy(backend, max_results=max_results, usage=usage, **options)
    if usage is None:
        return ToolSearch(strategy=strategy, max_results=max_results, **settings)
    return LearningToolSearch(strategy=strategy, max_results=max_results, usage=usage, **settings)


@dataclass
class AugmentTools(AbstractCapability[Any]):
    """Adds an augmentation's fields to every function tool and takes their values out of each call."""

    augment: Augmentation

    def _applies(self, name: str) -> bool:
        return self.augment.search or name != ToolSearch.function_tool_name

    async def prepare_tools(self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]) -> list[ToolDefinition]:
        out = []
        for definition in tool_defs:
            if self._applies(definition.name):
                schema = dict(self.augment.extend(tool_from_definition(definition)).input_schema)
                definition = replace(definition, parameters_json_schema=schema)
            out.append(definition)
        return out

    async def before_tool_validate(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: str | dict[str, Any]
    ) -> str | dict[str, Any]:
        if not self._applies(call.tool_name):
            return args
        try:
            parsed = json.loads(args) if isinstance(args, str) else dict(args)
        except ValueError:
            return args  # not JSON: the tool's own validation explains that to the model
        if not isinstance(parsed, dict):
            return args
        own, values = self.augment.split(parsed)
        problems = self.augment.problems(values)
        if problems:
            raise ModelRetry(invalid_arguments_text(call.tool_name, problems))
        if self.augment.on_augment is not None:
            outcome = self.augment.on_augment(call.tool_name, values, call.tool_call_id)
            if inspect.isawaitable(outcome):
                await outcome
        return own


def augment_tools(augment: AugmentSpec, *, on_augment: OnAugment | None = None) -> AugmentTools:
    """The augmentation capability: `Agent(..., capabilities=[tool_search(), augment_tools(Why, on_augment=f)])`."""
    augmentation = Augmentation.of(augment, on_augment=on_augment)
    if augmentation is None:
        raise InvalidArgumentError("augment_tools needs the fields to add: a pydantic model or a JSON schema")
    return AugmentTools(augmentation)
