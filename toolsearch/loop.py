"""The agent loop that replaces a plain tool-calling loop: search, expose what was found, call, repeat.

    sessions = SessionManager(ToolIndex.build(tools, backend="bm25"))
    result = run(model, "What's the weather in Paris?", session=sessions.create("user-1"),
                 functions={"get_weather": get_weather})
    result.output, result.outcome, result.searches, result.requests

Each request carries pinned + tool_search + discovered tools. Every tool_search call of a turn is
run (before the turn's other calls, so a tool found in a turn is callable in that same turn); the
other calls are validated against the tool's JSON schema and run (concurrently; sync callables in
threads, async ones awaited) with a timeout. Errors, timeouts and bad arguments go back to the model
as tool results; a tool outside the session never runs.

Streaming: `run(..., on_text=print_piece)` (or `on_event=`, or `stream=True`) streams each model
turn; text deltas reach the handler as they arrive, and the streamed turn is assembled into the
same ModelTurn, so searches, tools and history behave exactly as without streaming.
"""

from __future__ import annotations

import asyncio
import difflib
import enum
import json
import sys
import threading
import time
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Collection, Coroutine, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, ParamSpec, cast

from . import tracing
from ._errors import ArgumentTypeError, InvalidArgumentError, PriceTableError, wrong_type
from ._signatures import presented
from .augment import Augmentation, AugmentSpec, OnAugment
from .cost import CacheUse, PromptCache
from .executor import ResultStatus, SearchRecord, ToolExecutor, ToolFunctions, ToolResult, _ms, check_execution_settings
from .metatool import ToolSearchMetaTool, system_prompt_suffix
from .providers._base import (
    ChatModel,
    ChatRequest,
    EventHandler,
    Message,
    ModelTurn,
    StreamEvent,
    StreamingChatModel,
    ToolCall,
    ToolSearchMode,
    Usage,
)
from .providers.drive import adeliver_event, adrive, asettle, deliver_event, drive, is_async_callable, replay, settle
from .providers.registry import augment_request, augment_tools
from .session import Session, SessionManager, check_session_settings, quoted_names
from .stores._state import shown_session_id
from .tokens import RequestTokens, request_tokens, tool_tokens
from .tools import Tool

if TYPE_CHECKING:
    from types import FrameType

    from .usage import UsageRecorder

__all__ = [
    "LoopConfig",
    "LoopOutcome",
    "LoopResult",
    "ResultStatus",
    "ToolResult",
    "SearchRecord",
    "RequestRecord",
    "ToolExecutor",
    "ToolSearchLoop",
    "ToolFunctions",
    "TextHandler",
    "EventHandler",
    "StreamEvent",
    "run",
    "arun",
    "allowed_tools",
    "session_tool_tokens",
    "DIRECT_MAX_TOKENS",
]

# tool_search="auto" sends every tool while their definitions total at most this many tokens. In the
# token benchmark, searching starts to pay at catalogs of ~1,100 (metatool), ~1,900 (bfcl) and ~2,900
# (seal_tools) definition tokens: catalogs of many small tools break even sooner.
DIRECT_MAX_TOKENS = 2_000
_MIN_TOOL_TOKENS = 10  # the smallest possible function definition costs more than this

Prompt = str | Message | Mapping[str, Any] | Sequence[Message | Mapping[str, Any] | str]
# Gets each text delta as it arrives; an async one (awaited) only under arun.
TextHandler = Callable[[str], object]
P = ParamSpec("P")
_HANDLERS = ("on_event", "on_text", "on_augment")  # the keyword arguments run() refuses async callables for
# Statuses of a call that ran (the tool or the search was invoked), for the note on a failed run.
_RAN = frozenset({ResultStatus.OK, ResultStatus.SEARCH, ResultStatus.ERROR, ResultStatus.TIMEOUT})
# What a run catches to attach the run so far before it re-raises: every error, and the two ways a run is stopped
# from outside (Ctrl-C, a cancelled task), which are BaseExceptions; a caller that catches them must still see which
# tool calls ran. Others (SystemExit, GeneratorExit) pass untouched.
_ATTACHED = (Exception, KeyboardInterrupt, asyncio.CancelledError)


class LoopOutcome(enum.StrEnum):
    """Why a run stopped."""

    COMPLETED = "completed"  # the model answered without tool calls
    # The two below: a reply that held tool calls runs none of them (their arguments may be cut); each gets a SKIPPED
    # result, and output is a sentence saying so instead of the text.
    TRUNCATED = "truncated"  # the answer was cut at the provider's output token limit; output is the text so far
    REFUSED = "refused"  # the model declined, or the provider's safety filter withheld the answer; output is any text
    RETURN_DIRECT = "return_direct"  # a return_direct tool ran; its output is the answer
    MAX_ITERATIONS = "max_iterations"  # the request limit was reached while the model still called tools
    REPEATED_CALL = "repeated_call"  # the model repeated an identical call too often
    ERROR = "error"  # the run raised; only on the exception's `partial` record (see LoopResult)


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """Loop settings.

    - `max_iterations`: model requests per run.
    - `tool_timeout`: seconds per tool call (None: no limit). A timed-out sync tool keeps running
      in its worker thread; its result is discarded. At exit the program waits for a sync tool still
      running until its timeout runs out and no longer (without one, until it ends, as for any
      thread): a run stopped by Ctrl-C lets a running tool finish its work, and a tool past its
      timeout (stuck on a dead socket) never holds up the exit.
    - `undiscovered`: a call to an allowed tool no search has found yet: "instruct" answers with how
      to find it; "execute" runs it (and makes it visible).
    - `return_direct`: tool names whose output ends the run as the answer (a tool whose
      `metadata["return_direct"]` is true counts too).
    - `max_identical_calls`: the same tool with the same arguments this many times in one run is
      allowed; one more stops the run with `REPEATED_CALL`.
    - `tool_search_mode`: "schema" (default, works everywhere) or "native" (see ChatRequest).
    - `tool_search`: "on" (default) offers tool_search and the discovered tools; "off" sends every
      tool the session allows on every request, without tool_search (a plain tool-calling loop,
      with the same executor and accounting); "auto" is "off" while the allowed tools' definitions
      total at most `direct_max_tokens` tokens and "on" above. Below that size searching costs
      more tokens than it saves (see benchmarks/results/tokens.md for the measured break-even).
    - `system_suffix`: add `system_prompt_suffix` to the system prompt; `list_namespaces` in it.
    - `count_tokens` / `encoding`: exact token accounting of each request payload.
    - `parallel_tool_calls`: run a turn's calls concurrently (else one after another, in order).
    - `provider_names`: name tools in result texts by their provider-safe alias (what the model
      sees in its tools array, e.g. `math_factorial_<hash>` for `math.factorial`).
    - `stream`: stream every model turn (`model.stream` / `astream`). Giving `on_event` or
      `on_text` to a run streams too; `stream=True` alone is for long turns behind proxies
      that cut idle connections. A model without streaming methods is asked with `complete`
      and its turn is replayed to the handlers in one piece.
    - `max_result_bytes`: the largest tool result (UTF-8 bytes) passed on to the model (None: no
      limit); a larger one becomes an ERROR result telling the model to ask for less.
    """

    max_iterations: int = 10
    tool_timeout: float | None = 60.0
    undiscovered: Literal["instruct", "execute"] = "instruct"
    return_direct: frozenset[str] = frozenset()
    max_identical_calls: int = 3
    validate_arguments: bool = True
    tool_search_mode: ToolSearchMode = "schema"
    tool_search: Literal["on", "auto", "off"] = "on"
    direct_max_tokens: int = DIRECT_MAX_TOKENS
    system_suffix: bool = True
    list_namespaces: bool = True
    count_tokens: bool = True
    encoding: str = "o200k_base"
    parallel_tool_calls: bool = True
    provider_names: bool = True
    stream: bool = False
    max_result_bytes: int | None = 1_000_000

    def __post_init__(self) -> None:
        for name, kinds, expected in _CONFIG_KINDS:  # before any comparison: `"3" < 1` is a bare TypeError
            value = getattr(self, name)
            if isinstance(value, bool) is not (kinds == (bool,)) or not isinstance(value, kinds):
                raise wrong_type(f"LoopConfig {name}", value, expected)
        if self.max_iterations < 1:
            raise InvalidArgumentError(f"max_iterations must be at least 1, got {self.max_iterations!r}")
        check_execution_settings(self)
        if self.max_identical_calls < 1:
            raise InvalidArgumentError(f"max_identical_calls must be at least 1, got {self.max_identical_calls!r}")
        if self.tool_search_mode not in ("schema", "native"):
            raise InvalidArgumentError(f"tool_search_mode must be 'schema' or 'native', got {self.tool_search_mode!r}")
        if self.tool_search not in ("on", "auto", "off"):
            raise InvalidArgumentError(f"tool_search must be 'on', 'auto' or 'off', got {self.tool_search!r}")
        if self.direct_max_tokens < 0:
            raise InvalidArgumentError(f"direct_max_tokens must be zero or more, got {self.direct_max_tokens!r}")


# Every int and bool setting is checked by kind before any comparison (`"3" < 1` is a bare TypeError);
# derived from the fields' own annotations, so a new setting is checked without a list to keep.
_KINDS = {"int": ((int,), "an integer"), "bool": ((bool,), "True or False")}
_CONFIG_KINDS: tuple[tuple[str, tuple[type, ...], str], ...] = tuple(
    (f.name, *_KINDS[str(f.type)]) for f in fields(LoopConfig) if str(f.type) in _KINDS
)
_CONFIG_FIELDS = frozenset(LoopConfig.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One model request: which tools it carried, its exact token counts, the provider's usage."""

    iteration: int
    tool_names: tuple[str, ...]
    tokens: RequestTokens | None
    usage: Usage | None
    latency_ms: float
    stop_reason: str | None = None
    cache: CacheUse | None = None  # fresh / cache-write / cache-read tokens and price (toolsearch.cost)

    def to_dict(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "tools": list(self.tool_names),
            "tokens": self.tokens.to_dict() if self.tokens else None,
            "usage": self.usage.to_dict() if self.usage else None,
            "latency_ms": self.latency_ms,
            "stop_reason": self.stop_reason,
            "cache": self.cache.to_dict() if self.cache else None,
        }


@dataclass(frozen=True, slots=True)
class LoopResult:
    """A finished run: the answer, why it stopped, the whole history, every search and request.

    A run that raises (a provider error, a failing session store or handler) raises the original
    exception with the run so far attached as `exc.partial`, a LoopResult whose outcome is `ERROR`
    (its messages, tool_results, searches and requests up to the failure), and a note saying
    which tool calls had already run. A run interrupted by KeyboardInterrupt or cancelled
    (asyncio.CancelledError) re-raises that same exception with the same record attached.

    Prices (`cache`, `price_usd` and the cache token counts) are None when the run was not priced:
    `unpriced` says why (`count_tokens=False`, a wire format the price table has no rules for, a
    price file that fails its checks, a request the table could not price). `cache_state` is the
    conversation's prompt cache after the run, as plain JSON data (prefix digests, token counts and
    lifetimes; no prompt text): pass it to the run that continues the conversation,
    `run(model, [*result.messages, "next question"], ..., cache_state=result.cache_state)`, and its
    first request is priced against what this run left in the cache instead of a cold one.
    """

    output: str
    outcome: LoopOutcome
    messages: tuple[Message, ...]
    searches: tuple[SearchRecord, ...]
    requests: tuple[RequestRecord, ...]
    tool_results: tuple[ToolResult, ...]
    session_id: str
    system: str | None = None
    tool_search: bool = True  # False: the run sent every allowed tool instead (tool_search "off", or "auto" below)
    unpriced: str | None = None  # why the run has no price; None when it has one
    cache_state: Mapping[str, Any] | None = None  # the prompt cache after the run (PromptCache.state), JSON-able

    @property
    def iterations(self) -> int:
        return len(self.requests)

    @property
    def tool_tokens(self) -> list[int]:
        """Tool-definition tokens of each request (0 for each when the run counted none: `count_tokens=False`)."""
        return [r.tokens.tools if r.tokens else 0 for r in self.requests]

    @property
    def total_tokens(self) -> int:
        """Input tokens summed over all requests (the counted payloads, not the provider's bill; 0 when the run
        counted none: `count_tokens=False`, where `cache` is None and `unpriced` says so)."""
        return sum(r.tokens.total for r in self.requests if r.tokens)

    @property
    def cache(self) -> CacheUse | None:
        """Input tokens of the run by billing class under prompt caching, with their price (`toolsearch.cost`);
        None when a request of the run was not priced (`unpriced` says why): a partial sum would read as the
        run's price."""
        if self.unpriced is not None or any(r.cache is None for r in self.requests):
            return None
        return sum((r.cache for r in self.requests if r.cache), CacheUse())

    @property
    def fresh_tokens(self) -> int | None:
        cache = self.cache
        return cache.fresh if cache is not None else None

    @property
    def cache_write_tokens(self) -> int | None:
        cache = self.cache
        return cache.cache_write if cache is not None else None

    @property
    def cache_read_tokens(self) -> int | None:
        cache = self.cache
        return cache.cache_read if cache is not None else None

    @property
    def price_usd(self) -> float | None:
        """Input price of the run in USD with prompt caching (model: the provider's, else the table's default);
        None when the run was not priced (`unpriced` says why), never a 0.0 that would read as free."""
        cache = self.cache
        return cache.price_usd if cache is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "output": self.output,
            "outcome": self.outcome.value,
            "session_id": self.session_id,
            "messages": [m.to_dict() for m in self.messages],
            "searches": [s.to_dict() for s in self.searches],
            "requests": [r.to_dict() for r in self.requests],
            "tool_results": [
                {"call": r.call.to_dict(), "status": r.status.value, "content": r.content, "elapsed_ms": r.elapsed_ms}
                for r in self.tool_results
            ],
        }


# A turn that stopped for one of these reasons (ModelTurn.stop_kind) is not a complete answer; one that held tool
# calls ends the run too, none of them run (`_Run.cut`).
_STOP_OUTCOMES: Mapping[str | None, LoopOutcome] = {
    "truncated": LoopOutcome.TRUNCATED,
    "refused": LoopOutcome.REFUSED,
}


def _malformed_call_note(reason: str | None) -> str:
    """The user-role note that answers a turn whose tool call the provider could not read (nothing ran)."""
    return (
        f"[toolsearch] Your last reply held a tool call the API could not read ({reason or 'malformed call'}), "
        "so no tool ran. Call the tool again with its exact name from the tools list and its arguments as one "
        "valid JSON object matching its schema, or answer in text."
    )


def _call_key(call: ToolCall) -> str:
    return call.name + "\0" + json.dumps(dict(call.arguments), sort_keys=True, default=str)


# --- the loop ------------------------------------------------------------------------------


def _initial_messages(prompt: Prompt, tools: Callable[[str], Tool | None] | None = None) -> list[Message]:
    """The run's first messages; `tools` looks up the tools a resumed search result names (see Message.coerce)."""
    if isinstance(prompt, str) and not prompt.strip():
        raise InvalidArgumentError(
            f"the prompt is {'an empty' if not prompt else 'a blank'} string; pass the user's request as text, "
            "e.g. run(model, \"What's the weather in Paris?\", ...)"
        )
    if isinstance(prompt, (str, Message, Mapping)):
        messages = [Message.coerce(prompt, tools=tools)]
    elif not isinstance(prompt, Iterable):
        raise wrong_type("the prompt", prompt, "a str, a Message, a {'role', 'content'} mapping or a list of them")
    else:
        messages = [Message.coerce(m, tools=tools, where=f"the prompt's message {i}") for i, m in enumerate(prompt)]
    messages = _named_results(messages)
    if not messages:
        raise InvalidArgumentError(
            "the prompt is an empty list of messages; pass the user's request as a str, or a list of messages "
            "that holds at least one user message"
        )
    if not any(m.role == "user" for m in messages):
        roles = ", ".join(dict.fromkeys(m.role for m in messages))
        raise InvalidArgumentError(
            f"the prompt's {len(messages)} message(s) hold no user message (roles: {roles}), so the model has no "
            "request to answer; add the user's request to the list, as a str or {'role': 'user', 'content': ...}"
        )
    _check_results_answer_calls(messages)
    return messages


def _check_results_answer_calls(messages: Sequence[Message]) -> None:
    """InvalidArgumentError for a tool result that answers no earlier assistant message's call: by its
    `tool_call_id`, or, for a result without one, by its tool's name (Gemini matches results by name, and a
    Gemini-shaped history carries none); and for a call that no later tool result answers. Providers refuse
    either history (HTTP 400), so it is refused here, before any request, naming the message."""
    ids: set[str] = set()
    names: set[str] = set()
    unanswered: list[tuple[int, ToolCall]] = []  # the calls no result answered yet, with their message's number
    for i, m in enumerate(messages):
        ids.update(c.id for c in m.tool_calls)
        names.update(c.name for c in m.tool_calls)
        unanswered.extend((i, c) for c in m.tool_calls)
        if m.role != "tool":
            continue
        answered = m.tool_call_id in ids if m.tool_call_id else bool(m.name) and m.name in names
        if not answered:
            said = f"call id {m.tool_call_id!r}" if m.tool_call_id else f"tool {m.name!r} (no call id)"
            raise InvalidArgumentError(
                f"the prompt's message {i} is a tool result for {said}, which no earlier message's tool_calls "
                "holds; providers refuse a result that answers no call. Put the assistant message that made the call "
                "(with its tool_calls) before its result, or leave the result out (a history cut to its last "
                "messages may have lost the call: cut it at a user message instead)"
            )
        mine = next(
            (k for k, (_, c) in enumerate(unanswered)
             if (c.id == m.tool_call_id if m.tool_call_id else c.name == m.name)),
            None,
        )
        if mine is not None:
            del unanswered[mine]
    if unanswered:
        i, call = unanswered[0]
        more = f" (and {len(unanswered) - 1} more call(s))" if len(unanswered) > 1 else ""
        raise InvalidArgumentError(
            f"the prompt's message {i} holds a call of tool {call.name!r} (call id {call.id!r}){more} that no later "
            "tool result answers; providers refuse a call without its result. Add a tool message answering each "
            "call ({'role': 'tool', 'tool_call_id': ..., 'content': ...}) after it, or cut the history before that "
            "message (a run interrupted while its tools ran leaves its calls answered in exc.partial.messages)"
        )


def _references_allowed(messages: list[Message], session: Session, native: bool) -> list[Message]:
    """The messages with each search result's found tools as the session may see them now.

    A native search result sends its tools' definitions on every request (an Anthropic `tool_reference`, a
    Responses `tool_search_output`), so a saved one would show the model, in full, a tool the session may no longer
    use (its rights shrank since), one the index no longer holds, or an outdated schema. Each definition is taken
    from the current catalog, and a tool the session may not use is left out, with a warning. A native result left
    with none of its tools says so instead of its text, which names them and was never sent.
    """
    catalog = session.index.catalog
    left_out: list[str] = []
    out: list[Message] = []
    for m in messages:
        if not m.tool_references:
            out.append(m)
            continue
        current = [catalog.get(t.name) if session.is_allowed(t.name) else None for t in m.tool_references]
        left_out.extend(t.name for t, now in zip(m.tool_references, current, strict=True) if now is None)
        kept = tuple(t for t in current if t is not None)
        if kept == m.tool_references:
            out.append(m)
        elif kept or not native:
            out.append(replace(m, tool_references=kept))
        else:
            gone = "None of the tools this search found is available any more; search again if you need one."
            out.append(replace(m, tool_references=(), content=gone))
    if left_out:
        warnings.warn(
            f"the prompt's saved search results name {len(left_out)} tool(s) this session may not use or the index "
            f"no longer holds ({quoted_names(set(left_out))}); they are left out of the resumed history, so the model "
            "is not shown them",
            UserWarning,
            stacklevel=_outside_toolsearch(),
        )
    return out


def _outside_toolsearch() -> int:
    """The `stacklevel` of a warning raised by its caller that points at the first frame outside toolsearch."""
    level, frame = 1, cast("FrameType | None", sys._getframe(1))  # 1: the caller, which warns
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "toolsearch":
        level, frame = level + 1, frame.f_back
    return level


def _named_results(messages: list[Message]) -> list[Message]:
    """The messages with each tool result that names no tool (an OpenAI Chat Completions history's
    `{"role": "tool", "tool_call_id", "content"}`) named after the call it answers: Gemini matches
    a result to its call by name."""
    names: dict[str, str] = {}
    out: list[Message] = []
    for m in messages:
        names.update((c.id, c.name) for c in m.tool_calls)
        answered = names.get(m.tool_call_id or "") if m.role == "tool" and not m.name else None
        out.append(replace(m, name=answered) if answered else m)
    return out


def _synchronous(start: Callable[P, _Run]) -> Callable[P, LoopResult]:
    """`run`: the run `start` prepares, driven from sync code (its parameters and docstring)."""

    def run(*args: P.args, **kwargs: P.kwargs) -> LoopResult:
        _check_sync_handlers(*(kwargs.get(name) for name in _HANDLERS))  # before anything is created or sent
        return start(*args, **kwargs).sync()

    return presented(run, start, "LoopResult")


def _asynchronous(start: Callable[P, _Run]) -> Callable[P, Coroutine[Any, Any, LoopResult]]:
    """`arun`: the run `start` prepares, driven from asyncio (its parameters and docstring)."""

    async def arun(*args: P.args, **kwargs: P.kwargs) -> LoopResult:
        return await start(*args, **kwargs).asynchronous()

    return presented(arun, start, "LoopResult")


class ToolSearchLoop:
    """A reusable loop: one model, one session manager, one set of tool implementations.

    `run(prompt, session_id=...)` / `arun(...)` get or create the session (creating it with
    `allowed` / `pinned` when new) and drive the model until it answers or a guard stops it.

    `augment` (a pydantic model class or a JSON schema object) adds fields to every exposed
    tool's schema; `on_augment(tool_name, values, call_id)` gets their values for each call that
    runs, and the tool gets its own arguments only (see `toolsearch.augment`). A field named like
    a catalog tool's parameter is refused here with an AugmentationError.
    """

    def __init__(
        self,
        model: ChatModel,
        sessions: SessionManager,
        functions: ToolFunctions | None = None,
        *,
        system: str | None = None,
        metatool: ToolSearchMetaTool | None = None,
        config: LoopConfig | None = None,
        usage: UsageRecorder | None = None,
        augment: AugmentSpec | None = None,
        on_augment: OnAugment | None = None,
        **settings: Any,
    ) -> None:
        if not isinstance(sessions, SessionManager):
            raise wrong_type("ToolSearchLoop's sessions", sessions, "a SessionManager (SessionManager(index))")
        unknown = sorted(set(settings) - _CONFIG_FIELDS)
        if unknown:
            raise InvalidArgumentError(
                f"unknown loop setting(s) {', '.join(map(repr, unknown))}; settings are LoopConfig's fields: "
                f"{', '.join(sorted(_CONFIG_FIELDS))}"
            )
        self.model = model
        self.sessions = sessions
        self.system = system
        self.metatool = metatool or ToolSearchMetaTool()
        base = config or LoopConfig()
        self.config = replace(base, **settings) if settings else base
        self.augment: Augmentation | None = Augmentation.of(augment, on_augment=on_augment)
        if self.augment is not None:
            catalog = sessions.index.catalog
            self.augment.check(catalog, catalog_key=catalog.hash)
        self.executor = ToolExecutor(
            functions, metatool=self.metatool, config=self.config, usage=usage, augment=self.augment
        )
        # Without tool_search every allowed tool is on the request, so any allowed call may run.
        self.direct_executor = ToolExecutor(
            functions,
            metatool=self.metatool,
            config=replace(self.config, undiscovered="execute"),
            usage=usage,
            augment=self.augment,
            searches=False,  # no search tool is sent: a catalog tool named like it is called as itself
        )
        _warn_unknown_functions(self.executor.functions, sessions)

    def session(
        self, session_id: str, *, allowed: Collection[str] | None = None, pinned: Collection[str] = ()
    ) -> Session:
        """The session `session_id`, created with `allowed` / `pinned` when new.

        An existing session keeps the allowed and pinned tools it was created with: passing others
        raises SessionError (close the session to start it again with new ones); the defaults,
        `allowed=None` and `pinned=()`, take the stored ones as they are.
        """
        session = self.sessions.get_or_create(session_id, allowed=allowed, pinned=pinned)
        check_session_settings(session, allowed, pinned)
        return session

    def _start(
        self,
        prompt: Prompt,
        *,
        session_id: str,
        allowed: Collection[str] | None = None,
        pinned: Collection[str] = (),
        on_event: EventHandler | None = None,
        on_text: TextHandler | None = None,
        cache_state: Mapping[str, Any] | None = None,
    ) -> _Run:
        """Drive the model for one session; `on_text` / `on_event` stream each turn.

        `run` calls its handlers directly (an async one is refused); under `arun` they may be sync or
        async (awaited), and run on the event loop. `cache_state`: the `LoopResult.cache_state` of the
        run this one continues, to price its requests against the prompt cache that run left.
        """
        session = self.session(session_id, allowed=allowed, pinned=pinned)
        return _Run(self, session, prompt, on_event, on_text, cache_state)

    run = _synchronous(_start)
    arun = _asynchronous(_start)

    def direct_tools(self, session: Session) -> tuple[Tool, ...] | None:
        """Every allowed tool when a run for `session` sends them all instead of tool_search, else None."""
        mode = self.config.tool_search
        if mode == "on":
            return None
        if mode == "auto":
            limit = self.config.direct_max_tokens
            count = len(session.allowed) if session.allowed is not None else len(session.index.catalog)
            # Every definition costs at least _MIN_TOOL_TOKENS: a large subset is over the limit uncounted.
            if count * _MIN_TOOL_TOKENS > limit:
                return None
            tools = allowed_tools(session)
            sent = augment_tools(tools, self.augment, "")  # what a request would carry (no search tool in it)
            return tools if _definitions_tokens(sent, self.config.encoding) <= limit else None
        return allowed_tools(session)

    def system_prompt(self, session: Session, *, direct: bool = False) -> str | None:
        parts = [self.system] if self.system else []
        if self.config.system_suffix and not direct:
            parts.append(
                system_prompt_suffix(session, list_namespaces=self.config.list_namespaces, metatool=self.metatool)
            )
        return "\n\n".join(parts) or None


_WARNED_FUNCTIONS: weakref.WeakKeyDictionary[Any, set[tuple[str, tuple[str, ...]]]] = weakref.WeakKeyDictionary()
_WARNED_LOCK = threading.Lock()


def _warn_unknown_functions(functions: Mapping[str, Callable[..., Any]], sessions: SessionManager) -> None:
    """Warn about `functions` keys that name no catalog tool (a typo, most likely).

    A warning, not an error: every index takes new tools after it is built (`upsert`, `sync`, a shared
    Postgres catalog another worker writes), so a name unknown now may be a tool added later.
    """
    catalog = sessions.index.catalog
    unknown = sorted(name for name in functions if name not in catalog)
    if not unknown:
        return
    # once per index, catalog and names: `run()` builds a loop per call, and the close-name search reads every name
    key = (catalog.hash, tuple(unknown))
    with _WARNED_LOCK:
        try:
            seen = _WARNED_FUNCTIONS.setdefault(sessions.index, set())
        except TypeError:  # an index of a plug-in's class that takes no weak reference: warned each time
            seen = set()
        if key in seen:
            return
        seen.add(key)
    names = catalog.names
    hints = []
    for name in unknown[:5]:
        # difflib reads every name (about 40 ms per 1,000): in a large catalog only those sharing the first letters
        pool = names if len(names) <= 5_000 else [n for n in names if n[:2].lower() == name[:2].lower()]
        close = difflib.get_close_matches(name, pool, n=3)
        hints.append(f"{name!r} (did you mean {' or '.join(map(repr, close))}?)" if close else repr(name))
    more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
    level = _outside_toolsearch()  # points at the first caller outside toolsearch
    warnings.warn(
        f"functions names {len(unknown)} tool(s) the index does not hold: {', '.join(hints)}{more}; "
        "a call can reach a function only under its tool's catalog name: fix the name, or add the tool "
        "to the index (index.upsert) before the model needs it",
        UserWarning,
        stacklevel=level,
    )


class _Run:
    """The state of one run (shared by the sync and async drivers)."""

    def __init__(
        self,
        loop: ToolSearchLoop,
        session: Session,
        prompt: Prompt,
        on_event: EventHandler | None = None,
        on_text: TextHandler | None = None,
        cache_state: Mapping[str, Any] | None = None,
    ) -> None:
        self.loop = loop
        self.on_event = on_event
        self.on_text = on_text
        self.streaming = loop.config.stream or on_event is not None or on_text is not None
        model = loop.model
        # The model the run asks: `stream` / `astream` when streaming (a model without them has its
        # whole turn replayed to the handlers), else `complete` / `acomplete`.
        replayed = self.streaming and not isinstance(model, StreamingChatModel)
        self.model = cast(StreamingChatModel, _Replayed(model) if replayed else model)
        self.session = session
        self.config = loop.config
        self.all_tools = loop.direct_tools(session)  # None: the run searches
        self.direct = self.all_tools is not None
        self.executor = loop.direct_executor if self.direct else loop.executor
        self.search_name = "" if self.direct else loop.metatool.name  # calls of this name search
        native = self.all_tools is None and self.config.tool_search_mode == "native"
        self.messages = _references_allowed(_initial_messages(prompt, session.index.catalog.get), session, native)
        self.system = loop.system_prompt(session, direct=self.direct)
        self.searches: list[SearchRecord] = []
        self.requests: list[RequestRecord] = []
        self.results: list[ToolResult] = []
        self.seen: Counter[str] = Counter()
        self.in_flight: Sequence[ToolCall] = ()  # the calls being run, while they are
        self.in_flight_iteration = 0
        self.cache_use: CacheUse | None = None
        self.started = time.perf_counter()  # request times for the cache lifetime (a slow tool can outlast it)
        self.wall_started = time.time()  # the same moment on the wall clock, which a cache_state carries to a later run
        self.prompt_cache: PromptCache | None = None
        self.unpriced: str | None = "count_tokens=False: the run counted no tokens, so it priced none"
        if self.config.count_tokens:
            self.prompt_cache, self.unpriced = _prompt_cache(loop.model, self.config.encoding)
        if self.prompt_cache is not None and cache_state is not None:
            self.prompt_cache.resume(cache_state, started=self.wall_started)

    def request(self) -> ChatRequest:
        if self.all_tools is not None:
            request = ChatRequest(messages=tuple(self.messages), system=self.system, pinned=self.all_tools)
        else:
            # one read of the session, checked before the request (providers refuse two tools of one name)
            pinned, search, discovered = self.loop.metatool.turn_tools(self.session.view())
            request = ChatRequest(
                messages=tuple(self.messages),
                system=self.system,
                pinned=pinned,
                search_tool=search,
                discovered=discovered,
                tool_search_mode=self.config.tool_search_mode,
            )
        return augment_request(request, self.loop.augment)

    def count(self, request: ChatRequest) -> RequestTokens | None:
        if not self.config.count_tokens:
            return None
        payload = self.loop.model.payload(request)
        self.cache_use = None
        if self.prompt_cache is not None:
            try:
                self.cache_use = self.prompt_cache.request(payload, at=time.perf_counter() - self.started)
            except PriceTableError as exc:  # the price is a measurement: the run goes on without one
                self.unpriced = f"request {len(self.requests) + 1} could not be priced: {exc}"
                self.prompt_cache = None
                warnings.warn(f"toolsearch: the run has no price: {self.unpriced}", UserWarning, stacklevel=2)
        return request_tokens(payload, self.config.encoding)

    def record(
        self, iteration: int, request: ChatRequest, tokens: RequestTokens | None, turn: Any, started: float
    ) -> None:
        self.requests.append(
            RequestRecord(
                iteration,
                tuple(t.name for t in request.tools),
                tokens,
                turn.usage,
                _ms(started),
                turn.stop_reason,
                self.cache_use,
            )
        )
        self.messages.append(turn.message)
        tracing.model_request(self.loop.model, iteration, len(request.tools), turn, started)

    def guard(self, calls: Sequence[ToolCall]) -> bool:
        """Count identical calls; True when this turn repeats one too often (results are filled in)."""
        augment = self.loop.augment
        # The tool's own arguments decide what repeats: a new reason for the same call is still the same call.
        keys = [_call_key(replace(c, arguments=augment.split(c.arguments)[0]) if augment else c) for c in calls]
        self.seen.update(keys)
        repeated = [c for c, k in zip(calls, keys, strict=True) if self.seen[k] > self.config.max_identical_calls]
        if not repeated:
            return False
        names = ", ".join(sorted({c.name for c in repeated}))
        for call in calls:
            self.add(
                ToolResult(
                    call,
                    f"Not run: the loop stopped because {names} was called with identical arguments more than "
                    f"{self.config.max_identical_calls} times.",
                    ResultStatus.SKIPPED,
                )
            )
        return True

    def add(self, result: ToolResult) -> None:
        self.results.append(result)
        if result.search is not None:
            self.searches.append(result.search)
        self.messages.append(result.to_message())

    def direct_output(self, batch: Sequence[ToolResult]) -> str | None:
        direct = [
            r
            for r in batch
            if r.status is ResultStatus.OK and self.executor.is_return_direct(self.session, r.call.name)
        ]
        return "\n".join(r.content for r in direct) if direct else None

    def finish(self, output: str, outcome: LoopOutcome, *, traced: bool = True) -> LoopResult:
        if traced:
            tracing.run_finished(self.searches, self.results, self.session.index.catalog.__contains__)
        return LoopResult(
            output=output,
            outcome=outcome,
            messages=tuple(self.messages),
            searches=tuple(self.searches),
            requests=tuple(self.requests),
            tool_results=tuple(self.results),
            session_id=self.session.id,
            system=self.system,
            tool_search=not self.direct,
            unpriced=self.unpriced,
            cache_state=self.prompt_cache.state(started=self.wall_started) if self.prompt_cache is not None else None,
        )

    def stamp(self, event: StreamEvent, iteration: int) -> StreamEvent:
        """The event with its request number and, for a call, the catalog name where it is known yet.

        The provider maps the request's own tools back; an alias the session learned earlier is
        mapped here. A dotted tool found by a search of this same turn keeps its alias: that
        search runs after the turn (the executor maps the call then).
        """
        name = event.name
        if event.type == "tool_call_start" and event.kind == "function" and name and name != self.search_name:
            name = self.session.resolve_name(name)
        return replace(event, iteration=iteration, name=name)

    def deliveries(self, event: StreamEvent, iteration: int) -> Generator[object, None, None]:
        """`event` of request `iteration` handed to each of the run's handlers in turn; yields what
        each returned, for the driver to settle (refuse or await an awaitable) before the next runs."""
        if self.on_event is not None:
            yield self.on_event(self.stamp(event, iteration))
        if self.on_text is not None and event.type == "text_delta":
            yield self.on_text(event.text)

    def cut(self, turn: ModelTurn) -> LoopResult:
        """End the run at a reply that stopped early (truncated, refused) while it held tool calls.

        A call's arguments may be cut (a `send_email` without the end of its body, a `delete` without its
        filter), so none of the calls runs, tool_search included: each gets a SKIPPED result saying why,
        which also keeps the history whole (every call answered) for a run resumed from `result.messages`.
        """
        calls = turn.message.tool_calls
        stopped = f"stopped with {turn.stop_reason!r}" if turn.stop_reason else "stopped early"
        if turn.stop_kind == "truncated":
            why, todo = "cut at the output token limit", ": raise the model's output token limit and resume"
        else:
            why, todo = "withheld by the provider", ""
        for call in calls:
            self.add(
                ToolResult(
                    call,
                    f"Not run: your reply {stopped}, {why}, while it held this call, so its arguments may be "
                    "incomplete.",
                    ResultStatus.SKIPPED,
                )
            )
        names = quoted_names({c.name for c in calls})
        held = f"its reply {stopped}, {why}, while it held tool call(s) {names}, which did not run{todo}"
        return self.finish(self.stopped_text(held), _STOP_OUTCOMES[turn.stop_kind])

    def stopped_text(self, why: str) -> str:
        """The output of a run a guard stopped: the model's text of those turns was interim, never an answer."""
        return f"The run stopped after {len(self.requests)} model request(s), before the model gave an answer ({why})."

    def attach(self, exc: BaseException) -> None:
        """Give `exc` the run so far (`exc.partial`, outcome ERROR) and a note on the tool calls that had run.

        The calls that were running get a SKIPPED result saying whether they ran is unknown, as `cut` answers the
        calls it does not run: every call answered, `exc.partial.messages` resumes as a prompt (a provider refuses
        a call without its result)."""
        ran = [r.call.name for r in self.results if r.status in _RAN]
        names = f" ({quoted_names(set(ran))})" if ran else ""
        ended = "failed" if isinstance(exc, Exception) else f"was interrupted ({type(exc).__name__})"
        note = (
            f"toolsearch: the run of session {shown_session_id(self.session.id)} {ended} after {len(self.requests)} "
            f"answered model request(s); {len(ran)} tool call(s) had run before it{names}"
        )
        if self.in_flight:
            note += (
                f", and the {len(self.in_flight)} call(s) of request {self.in_flight_iteration} "
                f"({quoted_names({c.name for c in self.in_flight})}) were running: whether they ran is unknown"
            )
        how = "failed with" if isinstance(exc, Exception) else "was interrupted by"
        for call in self.in_flight:
            self.add(
                ToolResult(
                    call,
                    f"Unknown whether this call ran: the run {ended} while it was running. Check its effect "
                    "before calling it again.",
                    ResultStatus.SKIPPED,
                )
            )
        message = str(exc)
        said = f": {message}" if message else ""  # a KeyboardInterrupt() or a TimeoutError() says nothing
        partial = self.finish(
            f"The run {how} {type(exc).__name__} after {len(self.requests)} model request(s){said}",
            LoopOutcome.ERROR,
            traced=False,
        )
        try:
            exc.partial = partial  # type: ignore[attr-defined]
        except (AttributeError, TypeError):  # an exception type that takes no attributes: the note still says it
            note += "; this exception type cannot hold the run, so it is lost"
        else:
            note += "; exc.partial holds the run so far (messages, tool_results, searches, requests)"
        exc.add_note(note)

    def turns(self) -> Generator[_Ask | _Execute, Any, LoopResult]:
        """The run, written once: yields each model request and each batch of calls, and is sent
        the turn or the results by `sync` or `asynchronous` (which ask the model and run the calls)."""
        for iteration in range(1, self.config.max_iterations + 1):
            request = self.request()
            tokens = self.count(request)
            started = time.perf_counter()
            turn: ModelTurn = yield _Ask(request, iteration)
            self.record(iteration, request, tokens, turn, started)
            calls = turn.message.tool_calls
            if calls and turn.stop_kind in _STOP_OUTCOMES:  # cut or withheld while it wrote calls: none runs
                return self.cut(turn)
            if not calls:
                if turn.stop_kind == "malformed_call":  # nothing ran: say so, and let the model try again
                    self.messages.append(Message.user(_malformed_call_note(turn.stop_reason)))
                    continue
                return self.finish(turn.message.content, _STOP_OUTCOMES.get(turn.stop_kind, LoopOutcome.COMPLETED))
            if self.guard(calls):
                limit = self.config.max_identical_calls
                why = f"it repeated an identical tool call more than max_identical_calls={limit} times"
                return self.finish(self.stopped_text(why), LoopOutcome.REPEATED_CALL)
            self.in_flight, self.in_flight_iteration = calls, iteration
            batch: list[ToolResult] = yield _Execute(calls, iteration)
            self.in_flight = ()
            for result in batch:
                self.add(result)
            direct = self.direct_output(batch)
            if direct is not None:
                return self.finish(direct, LoopOutcome.RETURN_DIRECT)
        why = f"max_iterations={self.config.max_iterations} reached while it still called tools"
        return self.finish(self.stopped_text(why), LoopOutcome.MAX_ITERATIONS)

    def sync(self) -> LoopResult:
        augment = self.loop.augment
        _check_sync_handlers(self.on_event, self.on_text, augment.on_augment if augment else None)
        try:
            with tracing.agent_run(self.session.id) as traced:  # the parent span of the run's requests, searches, calls
                return traced.finished(drive(self.turns(), self.answer))
        except _ATTACHED as exc:
            self.attach(exc)
            raise

    async def asynchronous(self) -> LoopResult:
        try:
            with tracing.agent_run(self.session.id) as traced:
                return traced.finished(await adrive(self.turns(), self.aanswer))
        except _ATTACHED as exc:
            self.attach(exc)
            raise

    def answer(self, step: _Ask | _Execute) -> Any:
        """A step of `turns` done from sync code: handlers are called directly."""
        started = time.perf_counter()
        try:
            if isinstance(step, _Execute):
                return self.executor.execute(self.session, step.calls, iteration=step.iteration)
            if not self.streaming:
                return self.model.complete(step.request)
            return self.model.stream(step.request, lambda event: drive(self.deliveries(event, step.iteration), settle))
        except BaseException as exc:
            self.trace_failed(step, started, exc)
            raise

    async def aanswer(self, step: _Ask | _Execute) -> Any:
        """A step of `turns` done from asyncio: async tools and handlers are awaited."""
        started = time.perf_counter()
        try:
            if isinstance(step, _Execute):
                return await self.executor.aexecute(self.session, step.calls, iteration=step.iteration)
            if not self.streaming:
                return await self.model.acomplete(step.request)
            return await self.model.astream(
                step.request, lambda event: adrive(self.deliveries(event, step.iteration), asettle)
            )
        except BaseException as exc:
            self.trace_failed(step, started, exc)
            raise

    def trace_failed(self, step: _Ask | _Execute, started: float, exc: BaseException) -> None:
        """Spans for a step that raised (or was cancelled) from perf_counter `started`: a request's `chat` span and
        the unsettled calls' `execute_tool` spans are otherwise recorded only from what a step returns."""
        if isinstance(exc, GeneratorExit):
            return
        if isinstance(step, _Ask):
            tracing.model_request(self.loop.model, step.iteration, len(step.request.tools), None, started, exc)
            return
        search = self.search_name
        calls = [c for c in step.calls if c.kind == "function" and c.name != search]
        tracing.unsettled_calls(calls, started, exc, self.session.index.catalog.__contains__)


class _Ask(NamedTuple):
    """A step of a run: the model's turn for `request`, the run's request number `iteration`."""

    request: ChatRequest
    iteration: int


class _Execute(NamedTuple):
    """A step of a run: run the tool calls of request `iteration`'s turn; answered with their results."""

    calls: Sequence[ToolCall]
    iteration: int


class _Replayed:
    """A model without streaming methods, as a streaming run asks it (`stream` / `astream` only):
    its whole turn is handed to the handler once it is in."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model

    def stream(self, request: ChatRequest, on_event: EventHandler | None = None) -> ModelTurn:
        return drive(replay(self.model.complete(request)), lambda event: deliver_event(on_event, event))

    async def astream(self, request: ChatRequest, on_event: EventHandler | None = None) -> ModelTurn:
        turn = await self.model.acomplete(request)
        return await adrive(replay(turn), lambda event: adeliver_event(on_event, event))


def _one_off(
    model: ChatModel,
    prompt: Prompt,
    *,
    session: Session,
    functions: ToolFunctions | None = None,
    system: str | None = None,
    metatool: ToolSearchMetaTool | None = None,
    config: LoopConfig | None = None,
    on_event: EventHandler | None = None,
    on_text: TextHandler | None = None,
    augment: AugmentSpec | None = None,
    on_augment: OnAugment | None = None,
    cache_state: Mapping[str, Any] | None = None,
    **settings: Any,
) -> _Run:
    """Run the loop once for `session` (settings: any LoopConfig field, e.g. max_iterations=5).

    `usage=UsageRecorder(...)` feeds the usage log (see docs/learning.md) with the run's searches and calls.

    `on_text(piece)` gets the model's text as it streams; `on_event(event)` every StreamEvent
    (text deltas and tool-call starts, with the request number). Either one turns streaming on.
    `run` calls them directly (an async one is refused); under `arun`, `on_event` / `on_text` /
    `on_augment` may be sync or async (awaited on the event loop).

    `augment` / `on_augment`: fields added to every exposed tool and the consumer of their values
    (see `ToolSearchLoop` and `toolsearch.augment`).

    `cache_state`: the `cache_state` of the run this one continues (its messages are this prompt's
    history): the run's requests are priced against the prompt cache that run left, not a cold one.
    """
    if not isinstance(session, Session):
        raise wrong_type("run's session", session, "a Session (SessionManager(index).create(id))")
    settings.update(augment=augment, on_augment=on_augment)
    loop = ToolSearchLoop(
        model, session.manager, functions, system=system, metatool=metatool, config=config, **settings
    )
    return _Run(loop, session, prompt, on_event, on_text, cache_state)


run = _synchronous(_one_off)
arun = _asynchronous(_one_off)


def allowed_tools(session: Session) -> tuple[Tool, ...]:
    """Every tool the session may use, in catalog order (what a run without tool_search sends)."""
    catalog = session.index.catalog
    if session.allowed is None:
        return tuple(catalog)
    return tuple(catalog[n] for n in catalog.names if n in session.allowed)


def session_tool_tokens(session: Session, encoding: str = "o200k_base") -> int:
    """Tokens of the definitions of every tool the session allows (Chat Completions shape)."""
    return _definitions_tokens(allowed_tools(session), encoding)


def _prompt_cache(model: ChatModel, encoding: str) -> tuple[PromptCache | None, str | None]:
    """The run's prompt-cache model for the provider's wire format, or None and why there is none (a format
    the price table has no rules for: a plug-in's, warned once per format)."""
    from .cost import load_prices

    try:
        prices = load_prices()
    except PriceTableError as exc:  # the price is a measurement: a bad price file leaves runs unpriced, not stopped
        why = f"the price table could not be loaded: {exc}"
        warnings.warn(f"toolsearch: runs have no price: {why}", UserWarning, stacklevel=5)
        return None, why
    if model.format not in prices.formats:
        why = (
            f"the price table has no caching rules for wire format {model.format!r} (it knows "
            f"{', '.join(sorted(prices.formats))}); give its provider an entry naming the format in a price file "
            "(TOOLSEARCH_PRICES or toolsearch.cost.load_prices(path)) to price such runs"
        )
        with _WARNED_LOCK:
            fresh = model.format not in _UNPRICED_FORMATS
            _UNPRICED_FORMATS.add(model.format)
        if fresh:
            warnings.warn(f"toolsearch: runs of this model have no price: {why}", UserWarning, stacklevel=5)
        return None, why
    # a stand-in model (the scripted one) says which model it is priced as: None, the provider's default, unwarned
    name = getattr(model, "priced_as", getattr(model, "model", None))
    model_name = name if isinstance(name, str) else None
    return PromptCache.for_format(model.format, model_name, prices=prices, encoding=encoding), None


_UNPRICED_FORMATS: set[str] = set()  # formats warned about by _prompt_cache


def _definitions_tokens(tools: Iterable[Tool], encoding: str) -> int:
    return sum(tool_tokens(t, encoding) for t in tools)


def _check_sync_handlers(*handlers: object) -> None:
    if any(h is not None and is_async_callable(h) for h in handlers):
        raise ArgumentTypeError("async on_event / on_text / on_augment handlers need arun(); or pass sync handlers")
