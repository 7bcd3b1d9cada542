"""OpenTelemetry spans and counters for searches, tool calls, model requests and gateway requests.

The one place toolsearch makes spans and metric points, on the OpenTelemetry API alone (the
`otel` extra); an SDK, exporter and provider are the application's. Nothing here imports
OpenTelemetry: when no provider was passed to `configure` and the application never imported
`opentelemetry.trace`, no provider can be set, and each hook returns after one dict lookup.

Tracing never fails what it traces: every hook is guarded, so a provider, span processor or
exporter that raises (in `start_span`, `span.end()`, a counter's `add`) costs that span or point
only, and is logged once per kind of failure (what toolsearch was doing, the exception's type).

Names follow the OpenTelemetry GenAI semantic conventions (semantic-conventions-genai, status
Development, as referenced by semantic-conventions v1.45.0):

- a search is one `retrieval` span (INTERNAL), whichever way it was asked (`ToolIndex.search`,
  `Session.search`, a `tool_search`; the outermost of these records it, the ones it calls do not):
  `gen_ai.operation.name`="retrieval",
  `gen_ai.data_source.id` (the index key), `gen_ai.retrieval.top_k`, `gen_ai.retrieval.documents`
  (a JSON string of `{"id", "score"}` objects, best first: span attributes cannot hold a list of
  maps) and, only when queries are traced as text, `gen_ai.retrieval.query.text`; plus
  `toolsearch.search.*` (backend, namespace filter, allowed-subset size, learning on/off, the
  matches left out because the session already has them), `toolsearch.search.note_count` and
  `toolsearch.query.sha256`; the result's notes themselves (`toolsearch.search.notes`) only when
  queries are traced as text, since a note may quote the query (an invalid pattern, the words a
  search left out). A search that raises sets `error.type` and an ERROR status without the
  exception's message (a parse error may quote the query);
- a tool call the loop or executor settled is an `execute_tool {name}` span (INTERNAL):
  `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type`="function", `error.type` (the
  result status) when it failed. A called name that is no catalog tool's (the model made it up: it
  is as free as a query, and may quote the user) is recorded as `(unknown tool)` in the span's name
  and `gen_ai.tool.name`, with `toolsearch.tool.name.sha256` (its digest) under the default "hash"
  setting, and as it is only when queries are traced as text. A span is recorded when the batch
  is settled, with the call's own start and duration (spans a tool makes itself are not its
  children); a call still running when the run raised or was cancelled gets one too, failed with
  the exception's class;
- a model request is a `chat {model}` span (CLIENT), also when it raised (`error.type`, the
  exception's class, and an ERROR status): `gen_ai.provider.name` (the convention's
  value for a built-in wire format: "openai", "anthropic", "gcp.gemini"; another format's name as it is),
  `gen_ai.request.model`, `gen_ai.usage.input_tokens` / `output_tokens` /
  `cache_read.input_tokens` as the provider reported them, `gen_ai.response.finish_reasons`,
  `toolsearch.loop.iteration`, `toolsearch.request.tools` (how many tools it carried);
- a `run()` is an `invoke_agent toolsearch` span (INTERNAL), the parent of all of the above, with
  `toolsearch.loop.outcome` (the LoopOutcome value: a truncated or refused run returns, and only
  this tells it from a complete one); a run that raises, is cancelled or is interrupted (Ctrl-C)
  sets outcome "error", `error.type` (the exception's class) and an ERROR status, again without
  the message, which may quote the conversation;
- gateway requests: the `mcp` SDK already opens the MCP SERVER span (`mcp.method.name`,
  `gen_ai.tool.name`, parent read from the request's `_meta` `traceparent`/`tracestate`) and
  writes `_meta` on the requests it forwards upstream; the gateway only adds `mcp.session.id`
  to that span, as a digest, never the raw session id or context handle.

Queries are private (they quote the user). `configure(queries=...)` or the
`TOOLSEARCH_TRACE_QUERIES` environment variable chooses what a span shows of one: "hash"
(the default: `toolsearch.query.sha256`, the first 16 hex digits of its SHA-256), "text"
(`gen_ai.retrieval.query.text`) or "none".

Counters (metrics API, meter "toolsearch"), both counted when a `run()` finishes, per run, with
`gen_ai.tool.name`:

- `toolsearch.tool.calls_without_search`: each call the model made (whatever its outcome, but
  not a search and not a call the loop skipped) to a tool that no search of that run returned
  (a pinned tool, a tool sent whole, a guessed name; a name no catalog tool has is counted as
  `(unknown tool)`, so made-up names add no series);
- `toolsearch.tool.found_not_called`: each distinct tool a search of that run returned that no
  call of that run named.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from ._errors import InvalidArgumentError, InvalidQueryError
from ._version import __version__

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from .executor import SearchRecord, ToolResult
    from .index import ToolIndex
    from .loop import LoopResult
    from .metatool import MetaToolOutcome
    from .providers._base import ToolCall
    from .results import SearchResult

__all__ = ["QUERIES_ENV", "QUERY_MODES", "UNKNOWN_TOOL", "TraceSettings", "configure", "restore", "settings"]

logger = logging.getLogger(__name__)

QueryMode = Literal["hash", "text", "none"]
QUERY_MODES: tuple[QueryMode, ...] = ("hash", "text", "none")
QUERIES_ENV = "TOOLSEARCH_TRACE_QUERIES"
_SCOPE = "toolsearch"
_NOT_CALLED = frozenset({"search", "search_error", "skipped"})  # ResultStatus values that are no tool call
# gen_ai.provider.name's well-known values for the built-in chat formats other than openai* (all "openai");
# another format, a plug-in's, is named as it is
_PROVIDER_NAMES = {"anthropic": "anthropic", "gemini": "gcp.gemini"}
_P = ParamSpec("_P")
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class TraceSettings:
    """Where spans and counters go (None: the global providers) and what a span shows of a query."""

    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    queries: QueryMode | None = None  # None: TOOLSEARCH_TRACE_QUERIES, else "hash"


_settings = TraceSettings()
# the last provider's tracer and counters; the provider itself is kept, so a new one is never
# mistaken for a collected one that had the same id()
_tracer_of: tuple[Any, Tracer] | None = None
_counters_of: tuple[Any, tuple[Counter, Counter]] | None = None
_warned: set[str] = set()
_failures: set[tuple[str, str]] = set()  # (what toolsearch was doing, the exception's type), each logged once


def configure(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    queries: QueryMode | None = None,
) -> TraceSettings:
    """Send toolsearch's spans and counters to these providers (None: the global ones).

    Returns the previous settings, for `restore`: a test can give each case its own provider
    without touching the global one (the API lets an application set that only once).
    """
    global _settings
    if queries is not None and queries not in QUERY_MODES:
        raise InvalidArgumentError(f"queries={queries!r} is not one of {', '.join(QUERY_MODES)}: pick one of those")
    previous = _settings
    _settings = TraceSettings(tracer_provider, meter_provider, queries)
    return previous


def settings() -> TraceSettings:
    """The current settings (see `configure`)."""
    return _settings


def restore(previous: TraceSettings) -> None:
    """Put back what `configure` returned."""
    global _settings
    _settings = previous


# --- providers ---------------------------------------------------------------------------------


def _tracer() -> Tracer | None:
    """The tracer to use, or None when nothing would record (no provider anywhere)."""
    global _tracer_of
    provider: Any = _settings.tracer_provider
    if provider is None:
        trace = sys.modules.get("opentelemetry.trace")
        if trace is None:  # never imported: no provider can have been set
            return None
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return None
    if _tracer_of is None or _tracer_of[0] is not provider:
        _tracer_of = (provider, provider.get_tracer(_SCOPE, _version()))
    return _tracer_of[1]


def _counter_pair() -> tuple[Counter, Counter] | None:
    global _counters_of
    provider: Any = _settings.meter_provider
    if provider is None:
        metrics = sys.modules.get("opentelemetry.metrics")
        if metrics is None:
            return None
        provider = metrics.get_meter_provider()
        if isinstance(provider, metrics.NoOpMeterProvider):
            return None
    if _counters_of is None or _counters_of[0] is not provider:
        meter = provider.get_meter(_SCOPE, _version())
        without = meter.create_counter(
            "toolsearch.tool.calls_without_search", unit="{call}", description="tool calls no search returned"
        )
        unused = meter.create_counter(
            "toolsearch.tool.found_not_called", unit="{tool}", description="tools a search returned, never called"
        )
        _counters_of = (provider, (without, unused))
    return _counters_of[1]


def _version() -> str:
    return __version__


def _queries() -> QueryMode:
    if _settings.queries is not None:
        return _settings.queries
    raw = os.environ.get(QUERIES_ENV, "hash").strip().lower() or "hash"
    if raw in QUERY_MODES:
        return raw  # type: ignore[return-value]
    if raw not in _warned:
        _warned.add(raw)
        logger.warning("%s=%r is not one of %s; queries are traced as hashes", QUERIES_ENV, raw, ", ".join(QUERY_MODES))
    return "hash"


def _private(text: str, text_key: str, hash_key: str, mode: QueryMode | None = None) -> dict[str, str]:
    """The attribute that shows text that may quote the user (a query, a name the model made up, an augmented
    value), under the query setting (`mode`, read here when not given): `text_key` with the text with "text",
    `hash_key` with its `digest` with "hash", none with "none"."""
    mode = _queries() if mode is None else mode
    if mode == "text":
        return {text_key: text}
    return {hash_key: digest(text)} if mode == "hash" else {}


def digest(text: str) -> str:
    """The first 16 hex digits of SHA-256: enough to group equal values, not to read them."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _at(started: float) -> int:
    """A perf_counter reading as epoch nanoseconds (span times are wall-clock)."""
    return time.time_ns() - int((time.perf_counter() - started) * 1e9)


def _error(span: Span, kind: str) -> None:
    """Mark `span` failed with `kind`; never with a message, which may quote the query or the conversation."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR))


# --- guards ------------------------------------------------------------------------------------


def _failed(action: str, exc: Exception) -> None:
    """Log a tracing failure, once per `action` and exception type: a broken processor fails every span,
    and one line per span would bury the log (and cost more than the span)."""
    kind = (action, f"{type(exc).__module__}.{type(exc).__qualname__}")
    if kind in _failures:
        return
    _failures.add(kind)
    logger.warning(
        "tracing failed %s (%s); toolsearch carries on without that span or point, and does not log this again",
        action,
        type(exc).__qualname__,
        exc_info=exc,
    )


def _never_raises(action: str, fallback: _R) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """A hook that returns `fallback` instead of raising: the provider, its span processors and exporters
    are the application's, and a bug there must not fail a search or a run whose tools already ran."""

    def guard(hook: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(hook)
        def guarded(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return hook(*args, **kwargs)
            except Exception as exc:
                _failed(action, exc)
                return fallback

        return guarded

    return guard


@contextmanager
def _current_span(
    tracer: Tracer, name: str, attributes: Mapping[str, Any], failed: Callable[[Span, BaseException], None]
) -> Iterator[Span | None]:
    """`name` as the current span around the body (None there when it could not be started).

    Not `start_as_current_span`: that records an exception's message (an event and the status),
    which may quote the query, and lets a raising `span.end()` replace the body's own outcome. Here
    the body's exception is described by `failed(span, exc)` (an `error.type`, never the message)
    and goes on as it was; a start or end that raises is logged and skipped.
    """
    from opentelemetry import context
    from opentelemetry.trace import set_span_in_context

    span: Span | None
    try:
        span = tracer.start_span(name, attributes=attributes)
    except Exception as exc:
        _failed(f"starting a {name!r} span", exc)
        span = None
    if span is None:  # the body runs outside the except clause, so its exceptions do not chain to this one
        yield None
        return
    token = context.attach(set_span_in_context(span))
    try:
        yield span
    except BaseException as exc:
        # a cancelled task or Ctrl-C ends the operation unfinished, an error like any other (semantic conventions,
        # Recording Errors); a generator closed early (GeneratorExit) is no failure
        if not isinstance(exc, GeneratorExit):
            try:
                failed(span, exc)
            except Exception as failure:
                _failed(f"marking a {name!r} span failed", failure)
        raise
    finally:
        context.detach(token)  # the API logs a failed detach itself
        try:
            span.end()
        except Exception as exc:
            _failed(f"ending a {name!r} span", exc)


# --- spans -------------------------------------------------------------------------------------


class Retrieval:
    """What one search's `retrieval` span records; `UNTRACED` records nothing and costs one call."""

    __slots__ = ("_span",)

    def __init__(self, span: Span | None) -> None:
        self._span = span

    def result(self, result: SearchResult, k: int, namespaces: Collection[str] | str | None = None) -> SearchResult:
        """A search's result (ToolIndex.search, Session.search), returned as it is."""
        if self._span is not None:
            try:
                _describe_query(self._span, result.query, k, _namespace(namespaces))
                _describe_result(self._span, result)
            except Exception as exc:  # the search itself succeeded: a span's bug must not fail it
                _failed("describing a 'retrieval' span", exc)
        return result

    def outcome(self, outcome: MetaToolOutcome) -> MetaToolOutcome:
        """A tool_search's outcome: what the model was shown, or why it was refused."""
        span = self._span
        if span is not None:
            try:
                _describe_outcome(span, outcome)
            except Exception as exc:  # the model gets its answer whatever the span's processors do
                _failed("describing a 'retrieval' span", exc)
        return outcome


def _describe_outcome(span: Span, outcome: MetaToolOutcome) -> None:
    _describe_query(span, outcome.query, outcome.max_results, outcome.namespace)
    if outcome.result is not None:
        _describe_result(span, outcome.result)
    if outcome.already_loaded:
        span.set_attribute("toolsearch.search.already_loaded", list(outcome.already_loaded))
    if outcome.error is not None:
        kind = "invalid_query" if outcome.result is None and outcome.query is not None else "invalid_arguments"
        _error(span, kind)


UNTRACED = Retrieval(None)
_UNTRACED: AbstractContextManager[Retrieval] = nullcontext(UNTRACED)  # stateless: one for every untraced search
# Set while a search's span is open: a search inside it (the meta-tool calls Session.search, which calls
# ToolIndex.search) is the same search, described by the outer span, so it opens none of its own.
_searching: ContextVar[bool] = ContextVar("toolsearch_searching", default=False)


@_never_raises("opening a 'retrieval' span", _UNTRACED)
def retrieval(index: ToolIndex, allowed: Collection[str] | None = None) -> AbstractContextManager[Retrieval]:
    """Around one search over `index` (within `allowed`, when given): one `retrieval` span per search.

    `with retrieval(index, allowed) as traced: return traced.result(...)` (or `traced.outcome(...)`).
    ToolIndex.search, Session.search and the meta-tool each open one, and only the outermost records.
    """
    tracer = _tracer()
    if tracer is None or _searching.get():
        return _UNTRACED
    return _retrieval(tracer, index, allowed)


@contextmanager
def _retrieval(tracer: Tracer, index: ToolIndex, allowed: Collection[str] | None) -> Iterator[Retrieval]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "retrieval",
        "gen_ai.data_source.id": index.key,
        "toolsearch.search.backend": index.backend_name,
        # LearningIndex (toolsearch.learning) has `enabled`; a plain index learns nothing
        "toolsearch.search.learning": bool(getattr(index, "enabled", False)),
    }
    if allowed is not None:
        attributes["toolsearch.search.allowed"] = len(allowed)
    token = _searching.set(True)  # even when the span cannot start: the searches inside are still this one
    try:
        with _current_span(tracer, "retrieval", attributes, _search_failed) as span:
            yield UNTRACED if span is None else Retrieval(span)
    finally:
        _searching.reset(token)


def _search_failed(span: Span, exc: BaseException) -> None:
    _error(span, "invalid_query" if isinstance(exc, InvalidQueryError) else type(exc).__qualname__)


def _namespace(namespaces: Collection[str] | str | None) -> str | list[str] | None:
    if not namespaces:
        return None
    if isinstance(namespaces, str):
        return namespaces
    listed = list(namespaces)
    return listed[0] if len(listed) == 1 else listed


def _describe_query(span: Span, query: str | None, k: int | None, namespace: str | list[str] | None) -> None:
    if k is not None:
        span.set_attribute("gen_ai.retrieval.top_k", k)
    if namespace:
        span.set_attribute("toolsearch.search.namespace", namespace)
    if query is not None:
        for key, value in _private(query, "gen_ai.retrieval.query.text", "toolsearch.query.sha256").items():
            span.set_attribute(key, value)


def _describe_result(span: Span, result: SearchResult) -> None:
    documents = [{"id": h.name, "score": round(h.score, 6)} for h in result.hits]
    span.set_attribute("gen_ai.retrieval.documents", json.dumps(documents))
    span.set_attribute("toolsearch.search.backend", result.backend)
    span.set_attribute("toolsearch.search.latency_ms", result.elapsed_ms)
    if result.notes:
        span.set_attribute("toolsearch.search.note_count", len(result.notes))
        # notes may quote the query (an invalid pattern, the words a search left out): word for word only
        # where the query itself is shown
        if _queries() == "text":
            span.set_attribute("toolsearch.search.notes", list(result.notes))


@_never_raises("recording 'execute_tool' spans", None)
def tool_results(results: Sequence[ToolResult], known: Callable[[str], bool]) -> None:
    """An `execute_tool` span per settled tool call of a batch (searches have their retrieval span); `known(name)`
    tells a catalog tool's name from one the model made up (see `UNKNOWN_TOOL`)."""
    tracer = _tracer()
    if tracer is None:
        return
    now = time.time_ns()
    for result in results:
        if result.search is not None or result.status.value in ("search", "search_error"):
            continue
        status = result.status.value
        started = now - int(result.elapsed_ms * 1e6)
        _tool_span(tracer, result.call, known, started, now, status, status if result.is_error else None)


@_never_raises("recording 'execute_tool' spans", None)
def unsettled_calls(
    calls: Sequence[ToolCall], started: float, exc: BaseException, known: Callable[[str], bool]
) -> None:
    """An `execute_tool` span per tool call of a batch begun at perf_counter `started` that `exc` ended before it
    settled (a cancelled task, Ctrl-C, a failing session store), marked with `exc`'s class: the trace shows which
    tools were running when the run stopped, though whether each one ran is unknown. `calls` leaves searches out
    (a search has its retrieval span); `known` as for `tool_results`."""
    tracer = _tracer()
    if tracer is None:
        return
    now, kind = time.time_ns(), type(exc).__qualname__
    for call in calls:
        _tool_span(tracer, call, known, _at(started), now, None, kind)


# What a span or counter shows for a called name that is no catalog tool's (a name the model made up, as free as a
# query and as private: it may quote the user), unless queries are traced as text.
UNKNOWN_TOOL = "(unknown tool)"


def _shown_tool(name: str, known: Callable[[str], bool]) -> tuple[str, dict[str, Any]]:
    """The name a span records for a called tool, and attributes to add: a catalog tool's name as it is; another
    name under the query setting: as it is with "text", else `UNKNOWN_TOOL`, with its digest beside it
    (`toolsearch.tool.name.sha256`) with "hash"."""
    if known(name):
        return name, {}
    mode = _queries()
    if mode == "text":
        return name, {}
    return UNKNOWN_TOOL, _private(name, "gen_ai.tool.name", "toolsearch.tool.name.sha256", mode)


def _tool_span(
    tracer: Tracer,
    call: ToolCall,
    known: Callable[[str], bool],
    start: int,
    end: int,
    status: str | None,
    error: str | None,
) -> None:
    """One call's `execute_tool` span from epoch ns `start` to `end`, failed with `error` when given."""
    from opentelemetry.trace import SpanKind

    name, extra = _shown_tool(call.name, known)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.type": "function",
        **extra,
    }
    if status is not None:
        attributes["toolsearch.tool.status"] = status
    try:  # each span on its own: a processor that fails on one tool's span loses that span only
        span = tracer.start_span(
            f"execute_tool {name}", kind=SpanKind.INTERNAL, start_time=start, attributes=attributes
        )
        if error is not None:
            _error(span, error)
        span.end(end_time=end)
    except Exception as exc:
        _failed("recording an 'execute_tool' span", exc)


@_never_raises("recording an 'augment' span", None)
def augmented(name: str, values: Mapping[str, Any], call_id: str) -> None:
    """An `augment {tool}` span for one call's augmented values (toolsearch.augment), recorded as
    `toolsearch.augment.<field>` under the query privacy setting: a value is the model's own words
    (a stated reason often quotes the user), so it is hashed by default, kept as text only with
    queries="text", and left out with "none" (the field names are always recorded)."""
    tracer = _tracer()
    if tracer is None:
        return
    attributes: dict[str, Any] = {
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "toolsearch.augment.fields": sorted(values),
    }
    mode = _queries()  # read once for every field
    for field_name, value in values.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
        key = f"toolsearch.augment.{field_name}"
        attributes.update(_private(text, key, f"{key}.sha256", mode))
    tracer.start_span(f"augment {name}", attributes=attributes).end()


@_never_raises("recording a 'chat' span", None)
def model_request(
    model: Any, iteration: int, tools: int, turn: Any, started: float, error: BaseException | None = None
) -> None:
    """A `chat` span for one model request that began at perf_counter `started` and just returned `turn`, or
    raised `error` (turn None): marked then with its class, never its message, which may quote the conversation."""
    tracer = _tracer()
    if tracer is None:
        return
    from opentelemetry.trace import SpanKind

    fmt = str(getattr(model, "format", "") or "unknown")
    name = getattr(model, "model", None)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai" if fmt.startswith("openai") else _PROVIDER_NAMES.get(fmt, fmt),
        "toolsearch.provider.format": fmt,
        "toolsearch.loop.iteration": iteration,
        "toolsearch.request.tools": tools,
    }
    if isinstance(name, str):
        attributes["gen_ai.request.model"] = name
    usage = getattr(turn, "usage", None)
    for attribute, field in (
        ("gen_ai.usage.input_tokens", "input_tokens"),
        ("gen_ai.usage.output_tokens", "output_tokens"),
        ("gen_ai.usage.cache_read.input_tokens", "cached_input_tokens"),
    ):
        value = getattr(usage, field, None)
        if isinstance(value, int):
            attributes[attribute] = value
    stop = getattr(turn, "stop_reason", None)
    if isinstance(stop, str):
        attributes["gen_ai.response.finish_reasons"] = [stop]
    span = tracer.start_span(
        f"chat {name}" if isinstance(name, str) else "chat",
        kind=SpanKind.CLIENT,
        start_time=_at(started),
        attributes=attributes,
    )
    if error is not None:
        _error(span, type(error).__qualname__)
    span.end()


_OUTCOME = "toolsearch.loop.outcome"


class AgentRun:
    """What one run's `invoke_agent` span records; `UNTRACED_RUN` records nothing and costs one call."""

    __slots__ = ("_span",)

    def __init__(self, span: Span | None) -> None:
        self._span = span

    def finished(self, result: LoopResult) -> LoopResult:
        """The run's result, returned as it is; its outcome goes on the span: a truncated or refused answer
        returns like a complete one, and without it the trace could not tell them apart."""
        if self._span is not None:
            try:
                self._span.set_attribute(_OUTCOME, result.outcome.value)
            except Exception as exc:  # the run itself succeeded: a span's bug must not fail it
                _failed("describing an 'invoke_agent' span", exc)
        return result


UNTRACED_RUN = AgentRun(None)
_NO_SPAN: AbstractContextManager[AgentRun] = nullcontext(UNTRACED_RUN)  # stateless, like _UNTRACED


@_never_raises("opening an 'invoke_agent' span", _NO_SPAN)
def agent_run(session_id: str) -> AbstractContextManager[AgentRun]:
    """Around one `run()`: the parent span of its requests, searches and tool calls.

    `with agent_run(session.id) as traced: return traced.finished(result)`. A run that raises, or is
    cancelled or interrupted, marks it with `error.type` (the exception's class) and no message (a provider's
    or a backend's error may quote the query or the conversation), and with outcome "error".
    """
    tracer = _tracer()
    if tracer is None:
        return _NO_SPAN
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "toolsearch",
        "gen_ai.conversation.id": digest(session_id),  # caller-chosen ids may name a user
    }
    return _agent_run(tracer, attributes)


@contextmanager
def _agent_run(tracer: Tracer, attributes: Mapping[str, Any]) -> Iterator[AgentRun]:
    with _current_span(tracer, "invoke_agent toolsearch", attributes, _run_failed) as span:
        yield UNTRACED_RUN if span is None else AgentRun(span)


def _run_failed(span: Span, exc: BaseException) -> None:
    span.set_attribute(_OUTCOME, "error")  # LoopOutcome.ERROR, the outcome of the partial record exc carries
    _error(span, type(exc).__qualname__)


@_never_raises("naming the session on the MCP request's span", None)
def gateway_session(session_id: str) -> None:
    """Name the session on the MCP SDK's span of the request being served (a digest, never the id)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute("mcp.session.id", digest(session_id))


# --- counters ----------------------------------------------------------------------------------


@_never_raises("counting a finished run", None)
def run_finished(searches: Sequence[SearchRecord], results: Sequence[ToolResult], known: Callable[[str], bool]) -> None:
    """Count a finished run's calls without a search and its found-but-never-called tools.

    A called name that is no catalog tool's (`known(name)` false) is counted as `UNKNOWN_TOOL`, whatever the query
    setting: each made-up name would start a metric series of its own, without bound."""
    if not results and not searches:
        return
    pair = _counter_pair()
    if pair is None:
        return
    without_search, not_called = pair
    found = {name for record in searches for name in record.names}
    called: set[str] = set()
    for result in results:
        if result.status.value in _NOT_CALLED:
            continue
        called.add(result.call.name)
        if result.call.name not in found:
            name = result.call.name if known(result.call.name) else UNKNOWN_TOOL
            without_search.add(1, {"gen_ai.tool.name": name, "toolsearch.tool.status": result.status.value})
    for name in sorted(found - called):
        not_called.add(1, {"gen_ai.tool.name": name})
