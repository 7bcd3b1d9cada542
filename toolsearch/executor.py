"""The rules of a turn, in one place: searches first, then allow / discover / validate, refusals, execution.

Every way of running tool calls goes through `ToolExecutor`: the agent loop, the
bring-your-own-loop helpers below (`tools_for_request`, `handle_tool_calls`), and integrations.
A turn reads its session once (`Session.view()`), settles every call against that snapshot, and
writes the turn's discoveries and uses back in one atomic update before any tool runs. The rules
are written once, as a flow that yields what it waits on (`ToolExecutor._batch`); `execute` and
`aexecute` drive it from sync code and from asyncio, and only run the calls.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextvars
import enum
import inspect
import numbers
import threading
import time
import types
from collections.abc import Callable, Collection, Coroutine, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple, ParamSpec, Protocol, TypeVar, cast

from . import tracing
from ._errors import ArgumentTypeError, InvalidArgumentError, ToolCancelledError, named_error, wrong_type
from ._signatures import presented
from ._untrusted import repair_surrogates
from .augment import Augmentation, AugmentSpec, OnAugment
from .metatool import MetaToolOutcome, ToolSearchMetaTool
from .providers._base import Message, ToolCall, tool_result_text
from .providers.drive import adrive, asettle, drive, is_async_callable, unwrapped
from .providers.registry import augment_tools, parse_tool_call, render_result, render_tools
from .results import Hit
from .session import Session, ToolFormat
from .tools import Tool, provider_safe_name

if TYPE_CHECKING:
    from .usage import UsageRecorder

__all__ = [
    "ExecutorConfig",
    "ExecutionSettings",
    "ResultStatus",
    "SearchRecord",
    "ToolExecutor",
    "ToolFunctions",
    "ToolResult",
    "ahandle_tool_calls",
    "argument_problems",
    "handle_tool_calls",
    "render_tools",
    "tools_for_request",
]

ToolFunctions = Mapping[str, Callable[..., Any]] | Iterable[Callable[..., Any]]
# A call's augmented values waiting for the consumer: (call index, tool name, values, call id).
_Delivery = tuple[int, str, Mapping[str, Any], str]
# The largest tool result passed on by default, in UTF-8 bytes (about 250k tokens, more than a model takes in from
# one result): the loop's and the MCP gateway's (`mcp serve --max-result-bytes`) default.
DEFAULT_MAX_RESULT_BYTES = 1_000_000


class ExecutionSettings(Protocol):
    """The settings a turn reads (`LoopConfig` has them all, as does `ExecutorConfig`)."""

    @property
    def tool_timeout(self) -> float | None: ...
    @property
    def undiscovered(self) -> Literal["instruct", "execute"]: ...
    @property
    def return_direct(self) -> frozenset[str]: ...
    @property
    def validate_arguments(self) -> bool: ...
    @property
    def parallel_tool_calls(self) -> bool: ...
    @property
    def provider_names(self) -> bool: ...
    @property
    def max_result_bytes(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    """Executor settings for use without the loop; the fields mean what `LoopConfig`'s do."""

    tool_timeout: float | None = 60.0
    undiscovered: Literal["instruct", "execute"] = "instruct"
    return_direct: frozenset[str] = frozenset()
    validate_arguments: bool = True
    parallel_tool_calls: bool = True
    provider_names: bool = True
    max_result_bytes: int | None = DEFAULT_MAX_RESULT_BYTES

    def __post_init__(self) -> None:
        check_execution_settings(self)


def check_execution_settings(config: ExecutionSettings) -> None:
    """Refuse settings a turn cannot run with; a frozen config's `return_direct` becomes a frozenset.

    Every value's kind is checked before any comparison: `"5" <= 0` is a bare TypeError, and a
    string `return_direct` would become a set of its characters.
    """
    timeout = config.tool_timeout
    # numbers.Real / Integral: numpy's numbers pass too, as they did before the kind was checked
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)):
        raise wrong_type("tool_timeout", timeout, "a number of seconds (or None for no limit)")
    if timeout is not None and not timeout > 0:  # NaN too
        raise InvalidArgumentError(f"tool_timeout must be positive (or None for no limit), got {timeout!r}")
    if config.undiscovered not in ("instruct", "execute"):
        raise InvalidArgumentError(f"undiscovered must be 'instruct' or 'execute', got {config.undiscovered!r}")
    for name in ("validate_arguments", "parallel_tool_calls", "provider_names"):
        if not isinstance(getattr(config, name), bool):
            raise wrong_type(name, getattr(config, name), "True or False")
    limit = getattr(config, "max_result_bytes", DEFAULT_MAX_RESULT_BYTES)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, numbers.Integral)):
        raise wrong_type("max_result_bytes", limit, "a whole number of bytes (or None for no limit)")
    if limit is not None and limit < 1:
        raise InvalidArgumentError(f"max_result_bytes must be at least 1 (or None for no limit), got {limit!r}")
    object.__setattr__(config, "return_direct", _tool_names("return_direct", config.return_direct))


def _tool_names(what: str, names: object) -> frozenset[str]:
    """A setting that holds tool names, as a frozenset; one name as a string is refused, not split into characters."""
    if isinstance(names, (str, bytes)):
        raise ArgumentTypeError(
            f"{what} takes a collection of tool names, not a single string ({names!r}); "
            f"pass {{{names!r}}} for one tool"
        )
    if names is None or not isinstance(names, Iterable):
        raise wrong_type(what, names, "a collection of tool names (an empty one for none)")
    out = frozenset(names)
    for name in out:
        if not isinstance(name, str):
            raise ArgumentTypeError(f"{what} holds {name!r} ({type(name).__name__}); it takes tool names (strings)")
    return out


class ResultStatus(enum.StrEnum):
    """What happened to one tool call."""

    OK = "ok"
    SEARCH = "search"  # a tool_search that ran (hits or none)
    SEARCH_ERROR = "search_error"  # a tool_search with bad arguments or a bad query
    ERROR = "error"  # the tool raised
    INVALID_ARGUMENTS = "invalid_arguments"  # arguments not JSON or not valid for the schema
    TIMEOUT = "timeout"
    NOT_AVAILABLE = "not_available"  # unknown, outside the session, or without an implementation
    NOT_DISCOVERED = "not_discovered"  # allowed but not found by a search yet (undiscovered="instruct")
    SKIPPED = "skipped"  # not run because the loop stopped (repeated-call guard; a reply cut while it held the call)

    @property
    def is_error(self) -> bool:
        return self not in (ResultStatus.OK, ResultStatus.SEARCH)



@dataclass(frozen=True, slots=True)
class SearchRecord:
    """One tool_search call: what was asked, what it found, how long the search took."""

    query: str | None
    hits: tuple[Hit, ...]
    latency_ms: float
    max_results: int | None = None
    namespace: str | None = None
    error: str | None = None
    call_id: str = ""
    iteration: int = 0
    evicted: tuple[str, ...] = ()
    # The backend's own order where learning re-ordered the hits (toolsearch.learning.LearnedSearchResult), for the
    # usage log, which must record what the backend ranked (its calibration reads the lists so); None: `hits` is it.
    ranked: tuple[str, ...] | None = None

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hits]

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "hits": [{"name": h.name, "score": h.score} for h in self.hits],
            "latency_ms": self.latency_ms,
            "max_results": self.max_results,
            "namespace": self.namespace,
            "error": self.error,
            "iteration": self.iteration,
            "evicted": list(self.evicted),
        }


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The result of one call, ready to send back (`to_message` or a provider's shape)."""

    call: ToolCall
    content: str
    status: ResultStatus
    elapsed_ms: float = 0.0
    value: Any = field(default=None, repr=False, compare=False)
    tool_references: tuple[Tool, ...] = ()
    search: SearchRecord | None = None

    def __post_init__(self) -> None:
        # A tool's output can hold a lone surrogate (a JSON "\\ud800" it decoded): no UTF-8 encoder takes
        # it, so every rendering of the result (the loop's and a bring-your-own loop's) gets U+FFFD instead.
        object.__setattr__(self, "content", repair_surrogates(self.content))

    @property
    def is_error(self) -> bool:
        return self.status.is_error

    @property
    def name(self) -> str:
        return self.call.name

    def to_message(self) -> Message:
        return Message.tool(self.call, self.content, is_error=self.is_error, tool_references=self.tool_references)

    def render(self, format: str) -> dict[str, Any]:
        """This result in a registered wire format (see `toolsearch.providers.registry`)."""
        return render_result(format, self.call, self.content, is_error=self.is_error)

    def to_openai_chat(self) -> dict[str, Any]:
        return self.render("openai_chat")

    def to_openai_responses(self) -> dict[str, Any]:
        return self.render("openai_responses")

    def to_anthropic(self) -> dict[str, Any]:
        return self.render("anthropic")



# --- tool execution ------------------------------------------------------------------------


def _functions_map(functions: ToolFunctions | None) -> dict[str, Callable[..., Any]]:
    if functions is None:
        return {}
    if isinstance(functions, Mapping):
        return dict(functions)
    if isinstance(functions, str) or not isinstance(functions, Iterable):
        raise wrong_type("functions", functions, "a mapping of tool name to callable, or a list of named callables")
    out: dict[str, Callable[..., Any]] = {}
    for fn in functions:
        name = getattr(fn, "__name__", None)
        if not callable(fn) or not name:
            raise ArgumentTypeError(f"{fn!r} is not a named callable; pass a mapping of tool name to callable instead")
        out[name] = fn
    return out


_validators: dict[str, Any] = {}
_validators_lock = threading.Lock()


def _validator(tool: Tool) -> Any:
    found = _validators.get(tool.fingerprint)
    if found is None:
        import jsonschema

        cls = jsonschema.validators.validator_for(tool.input_schema, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(tool.input_schema)
            found = _bounded(cls, tool.input_schema)(_one_dialect(tool.input_schema))
        except jsonschema.SchemaError:
            found = False  # a schema jsonschema cannot use: arguments are passed through unchecked
        with _validators_lock:
            _validators[tool.fingerprint] = found
    return found


# A schema's regular expressions come from whoever wrote the tool (an MCP upstream: untrusted), its arguments from
# the model. jsonschema matches them with `re`, which holds the GIL: `^(a+)+$` against 28 characters froze every
# client of a gateway for 9 s. Each match runs under `regex`'s timeout instead; one that runs out is not judged.
_PATTERN_TIMEOUT_S = 0.05


class _Unjudged(Exception):
    """A schema pattern ran past _PATTERN_TIMEOUT_S on an argument: the arguments are not checked."""


def _search(pattern: str, text: str) -> bool:
    import regex

    try:
        return regex.search(pattern, text, timeout=_PATTERN_TIMEOUT_S, concurrent=True) is not None
    except TimeoutError as exc:
        raise _Unjudged(pattern) from exc


def _one_dialect(schema: Any, *, root: bool = True) -> Any:
    """`schema` without the `$schema` of its subschemas: jsonschema checks a subschema that names a dialect with that
    dialect's stock validator, whose regular expressions run unbounded (`_bounded`). The root keeps its own."""
    if isinstance(schema, list):
        return [_one_dialect(item, root=False) for item in schema]
    if not isinstance(schema, dict):
        return schema
    # Only a string value is the keyword (a dialect's URI); a property named "$schema" holds a schema, kept.
    return {k: _one_dialect(v, root=False) for k, v in schema.items()
            if root or k != "$schema" or not isinstance(v, str)}


def _has_key(value: Any, key: str) -> bool:
    if isinstance(value, dict):
        return key in value or any(_has_key(v, key) for v in value.values())
    return isinstance(value, list) and any(_has_key(v, key) for v in value)


def _bounded(cls: Any, schema: Any) -> Any:
    """`cls` with every keyword that matches a schema's regular expression against an argument under a timeout.

    jsonschema matches with `re` in `pattern`, `patternProperties` and the extras of `additionalProperties`; those
    three are re-implemented here on `_search`. `unevaluatedProperties` also matches every `patternProperties` it
    can reach (through `allOf`, `$ref`, ...) with `re`: in a schema holding any, it is not checked (the tool still
    checks for itself), a rare pairing in tool schemas against a way to stall every caller.
    """
    import jsonschema
    from jsonschema import ValidationError

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterable[Any]:
        if validator.is_type(instance, "string") and not _search(patrn, instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any) -> Iterable[Any]:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in patterns.items():
            for key, value in instance.items():
                if _search(patrn, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=patrn)

    def additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterable[Any]:
        if not validator.is_type(instance, "object"):
            return
        known = schema.get("properties", {})
        patterns = list(schema.get("patternProperties", {}))
        extras = sorted(
            (k for k in instance if k not in known and not any(_search(p, k) for p in patterns)), key=str
        )
        if validator.is_type(extra, "object"):
            for key in extras:
                yield from validator.descend(instance[key], extra, path=key)
        elif not extra and extras:
            # jsonschema's own wording, which names the key patterns the model may use
            verb = "does" if len(extras) == 1 else "do"
            if patterns:
                said = f"{', '.join(map(repr, extras))} {verb} not match any of the regexes: "
                yield ValidationError(said + ", ".join(map(repr, sorted(patterns))))
            else:
                said = f"{', '.join(map(repr, extras))} {'was' if len(extras) == 1 else 'were'} unexpected"
                yield ValidationError(f"Additional properties are not allowed ({said})")

    keywords = {
        "pattern": pattern, "patternProperties": pattern_properties, "additionalProperties": additional_properties
    }
    if _has_key(schema, "patternProperties") and "unevaluatedProperties" in cls.VALIDATORS:
        keywords["unevaluatedProperties"] = lambda *_: iter(())
    return jsonschema.validators.extend(cls, keywords)


def _schema_errors(tool: Tool, arguments: Mapping[str, Any]) -> list[str]:
    validator = _validator(tool)
    if not validator:
        return []
    try:
        errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: [str(p) for p in e.absolute_path])
    except Exception:  # a schema that breaks while checking (a bad or too slow regex `pattern`): the tool checks
        return []
    out = []
    for err in errors[:5]:
        where = "/".join(str(p) for p in err.absolute_path)
        out.append(f"{where}: {err.message}" if where else err.message)
    return out


def argument_problems(tool: Tool, arguments: Mapping[str, Any]) -> list[str]:
    """What is wrong with `arguments` for `tool`'s input schema (at most 5 lines; [] when they fit).

    The one argument check of every way of calling tools (the executor, the MCP gateway). A schema
    that jsonschema cannot use passes everything through: the tool checks for itself.
    """
    return _schema_errors(tool, arguments)


def invalid_arguments_text(shown: str, problems: Sequence[str]) -> str:
    """What the model is told about a call whose arguments (its own or augmented ones) do not fit."""
    return (
        f"Invalid arguments for {shown!r}: "
        + "; ".join(problems)
        + ". Fix the arguments to match the tool's parameters and call it again."
    )


def _coerce_call(raw: Any, session: Session, search_name: str) -> ToolCall:
    """A neutral ToolCall from a neutral call or a provider's call object/dict (aliases resolved)."""
    call = parse_tool_call(raw, search_name=search_name)
    if call.kind == "function" and call.name != search_name:
        name = session.resolve_name(call.name)
        if name != call.name:
            call = replace(call, name=name)
    return call


# Outcomes that say whether a tool worked; refusals (not available, not discovered) say nothing about it.
_CALL_OUTCOMES = frozenset(
    {ResultStatus.OK, ResultStatus.ERROR, ResultStatus.INVALID_ARGUMENTS, ResultStatus.TIMEOUT}
)


class ToolExecutor:
    """Runs one turn's tool calls for a session: searches first, then the rest (concurrently).

    With `augment` (`toolsearch.augment.Augmentation`), each call's augmented values are taken
    out and validated (a missing required one is an INVALID_ARGUMENTS result), the tool is
    validated and run with its own arguments only, and the values of every call that runs reach
    `augment.on_augment(tool_name, values, call_id)` once the turn's session update is written,
    in call order, before any tool runs. A result's `call` then holds the tool's own arguments
    (the model's call, augmented values included, stays in the conversation as it was made).
    """

    def __init__(
        self,
        functions: ToolFunctions | None = None,
        *,
        metatool: ToolSearchMetaTool | None = None,
        config: ExecutionSettings | None = None,
        usage: UsageRecorder | None = None,
        augment: Augmentation | None = None,
        searches: bool = True,
    ) -> None:
        self.functions = _functions_map(functions)
        self.metatool = metatool or ToolSearchMetaTool()
        # False where the requests offer no search tool (the loop's direct mode sends every tool instead): a
        # call named like the search tool is then a catalog tool's call, run as any other.
        self.searches = searches
        self.config: ExecutionSettings = config or ExecutorConfig()
        # Feeds the usage log (toolsearch.usage): what each search showed and which shown tools then worked.
        self.usage = usage
        self.augment = augment

    def _record_usage(self, session: Session, results: Sequence[ToolResult]) -> list[ToolResult]:
        if self.usage is not None:
            try:
                for result in results:  # searches first: a call in the same batch may use what they showed
                    if result.search is not None and result.search.error is None:
                        search = result.search
                        self.usage.record_search(session.id, search.query, search.names, ranked=search.ranked)
                for result in results:
                    if result.search is None and result.status in _CALL_OUTCOMES:
                        self.usage.record_call(session.id, result.call.name, result.status is ResultStatus.OK)
            except Exception as exc:
                # The tools have run: a usage store that fails (unreachable, a plug-in's that raises) costs this
                # batch's learning, never its results. The rest of the batch is not tried: a store that failed
                # once would most likely fail again, each time after its timeout.
                from .usage import usage_not_recorded

                usage_not_recorded(self.usage, exc)
        # traced last: the tools have run and their usage is recorded, whatever the application's
        # span processors do (the hook never raises, but the order keeps that true for any hook)
        tracing.tool_results(results, session.index.catalog.__contains__)
        return list(results)

    def shown(self, name: str) -> str:
        """The name the model knows a tool by (its provider-safe alias, unless configured otherwise)."""
        return provider_safe_name(name) if self.config.provider_names else name

    def is_return_direct(self, session: Session, name: str) -> bool:
        if name in self.config.return_direct:
            return True
        tool = session.index.catalog.get(name)
        return bool(tool is not None and tool.metadata.get("return_direct"))

    # --- shared steps ---------------------------------------------------------------------

    def _search(
        self, session: Session, call: ToolCall, iteration: int, deliveries: list[_Delivery], slot: int
    ) -> ToolResult:
        augment = self.augment if self.augment is not None and self.augment.search else None
        problems: list[str] = []
        if augment is not None and not call.arguments_error:
            own, values = augment.split(call.arguments)
            problems = augment.problems(values)
            call = replace(call, arguments=own)
            if not problems:
                deliveries.append((slot, self.metatool.name, values, call.id))
        if call.arguments_error or problems:
            error = call.arguments_error or "; ".join(problems)
            outcome = MetaToolOutcome(
                text=f"{self.metatool.name} error: {error}. "
                f'Call it with a JSON object like {{"query": "<what you need>"}}'
                + (f" and the fields {', '.join(augment.required)}." if augment and augment.required else "."),
                error=error,
            )
        else:
            alias = provider_safe_name if self.config.provider_names else None
            outcome = self.metatool.run(session, call.arguments, alias=alias)
        result = outcome.result
        record = SearchRecord(
            query=outcome.query if outcome.query is not None else _query_of(call),
            hits=result.hits if result else (),
            latency_ms=result.elapsed_ms if result else 0.0,
            max_results=outcome.max_results,
            namespace=outcome.namespace,
            error=outcome.error,
            call_id=call.id,
            iteration=iteration,
            evicted=outcome.update.evicted if outcome.update else (),
            ranked=_backend_order(outcome),
        )
        status = ResultStatus.SEARCH if outcome.ok else ResultStatus.SEARCH_ERROR
        return ToolResult(call, outcome.text, status, record.latency_ms, tool_references=outcome.tools, search=record)

    def admit(self, session: Session, call: ToolCall, *, loaded: Collection[str] = ()) -> ToolResult | None:
        """The allow and discover rules of one call: its refusal, or None when it may go on (a tool
        not loaded yet is discovered when `undiscovered="execute"`). The MCP gateway shares them.

        `loaded`: the tools the turn's request carried (loaded before its searches ran); a call to
        one of them goes on even when a search of the same turn evicted it since.
        """
        name = call.name
        shown = self.shown(name)
        if not session.is_allowed(name):
            # Without a search tool on the request (the loop's direct mode), pointing at it would send the model
            # to call a tool it was never given, and be told the same again, until a guard ends the run.
            todo = (
                f"Call {self.metatool.name} to find a tool for this task, then call one of the names it returns."
                if self.searches
                else "Use one of the tools in your tools list, by its exact name, or answer without a tool."
            )
            return ToolResult(call, f"Tool {shown!r} is not available. {todo}", ResultStatus.NOT_AVAILABLE)
        if name not in loaded and not session.is_visible(name):
            if self.config.undiscovered == "instruct":
                return ToolResult(
                    call,
                    f"Tool {shown!r} is not loaded yet. Call {self.metatool.name} first (for example with the "
                    f"query {_suggest_query(name)!r}); once it is found, call {shown!r} again.",
                    ResultStatus.NOT_DISCOVERED,
                )
            session.discover([name])
        return None

    def split_augmented(self, session: Session, call: ToolCall) -> tuple[ToolCall, dict[str, Any], list[str]]:
        """The augmentation rules of one call: (the call with the tool's own arguments only, the
        augmented values, what is wrong with them). The MCP gateway shares them. A tool whose own
        parameter collides with an augmented field raises AugmentationError (it was never exposed)."""
        augment = self.augment
        if augment is None or call.arguments_error:
            return call, {}, []
        tool = session.index.catalog.get(call.name)
        if tool is not None:
            augment.extend(tool)  # refuses a colliding tool added since setup
        own, values = augment.split(call.arguments)
        return replace(call, arguments=own), values, augment.problems(values)

    def _prepare(
        self, session: Session, call: ToolCall, loaded: Collection[str] = ()
    ) -> ToolResult | tuple[ToolCall, Callable[..., Any], dict[str, Any] | None]:
        """Everything before running a call: a ToolResult when it must not run, else the call with
        the tool's own arguments, the callable and the augmented values (None without augmentation);
        `loaded` as for `admit`."""
        refused = self.admit(session, call, loaded=loaded)
        if refused is not None:
            return refused
        name = call.name
        shown = self.shown(name)
        fn = self.functions.get(name)
        if fn is None:
            return ToolResult(
                call,
                f"Tool {shown!r} has no implementation in this application; use another tool.",
                ResultStatus.NOT_AVAILABLE,
            )
        if call.arguments_error:
            return ToolResult(
                call, f"Invalid arguments for {shown!r}: {call.arguments_error}.", ResultStatus.INVALID_ARGUMENTS
            )
        own, values, problems = self.split_augmented(session, call)
        if self.config.validate_arguments:
            problems = [*problems, *argument_problems(session.index.catalog[name], own.arguments)][:5]
        if problems:
            return ToolResult(call, invalid_arguments_text(shown, problems), ResultStatus.INVALID_ARGUMENTS)
        session.touch([name])
        return own, fn, values if self.augment is not None else None

    def _settled(self, call: ToolCall, outcome: _Outcome) -> ToolResult:
        """The result of a call that ran, from how it ended (its value, its exception or its timeout)."""
        shown = self.shown(call.name)
        if outcome.timed_out:
            return ToolResult(
                call,
                f"Tool {shown!r} timed out after {self.config.tool_timeout:g} s and was abandoned; try "
                "simpler arguments or another tool.",
                ResultStatus.TIMEOUT,
                outcome.elapsed_ms,
            )
        error = outcome.error
        if error is None:
            try:
                text = tool_result_text(outcome.value)
            except Exception as exc:  # a value that cannot be rendered (its model_dump raised) fails the call
                error = exc
            else:
                oversized = self._oversized(shown, text)
                if oversized is not None:
                    return ToolResult(call, oversized, ResultStatus.ERROR, outcome.elapsed_ms)
                return ToolResult(call, text, ResultStatus.OK, outcome.elapsed_ms, value=outcome.value)
        said = f"Tool {shown!r} failed: {named_error(error, _said(error))}"
        return ToolResult(call, said, ResultStatus.ERROR, outcome.elapsed_ms)

    def _oversized(self, shown: str, text: str) -> str | None:
        """What the model is told instead of a result over `max_result_bytes` (None when it fits).

        An error, not a cut-off result (as the MCP gateway does): a truncated list or document reads
        as complete to a model. The call did run, so the text says not to repeat it.
        """
        limit = getattr(self.config, "max_result_bytes", DEFAULT_MAX_RESULT_BYTES)
        if limit is None or len(text) * 4 <= limit:  # UTF-8 takes at most 4 bytes a character
            return None
        size = len(text.encode("utf-8", "surrogatepass"))
        if size <= limit:
            return None
        return (
            f"Tool {shown!r} ran, but its result ({size:,} bytes) is {size - limit:,} bytes over the limit of "
            f"{limit:,} bytes, so it was dropped. Do not repeat the same call to see it: ask for less (narrower "
            "arguments: a filter, a page or a limit, if the tool has one)."
        )

    def _split(self, session: Session, calls: Sequence[Any]) -> list[ToolCall]:
        return [_coerce_call(c, session, self._search_name) for c in calls]

    @property
    def _search_name(self) -> str:
        """The name whose calls search ("" without a search tool: no call is named that)."""
        return self.metatool.name if self.searches else ""

    def _resolve(self, session: Session, call: ToolCall) -> ToolCall:
        """Map an alias to its catalog name once the turn's searches ran: a dotted tool found by a
        search in this very turn is called under an alias the session only learns from that search."""
        if call.kind != "function" or call.name == self._search_name:
            return call
        name = session.resolve_name(call.name)
        return call if name == call.name else replace(call, name=name)

    def _is_search(self, call: ToolCall) -> bool:
        return self.searches and (call.kind == "tool_search" or call.name == self.metatool.name)

    def _plan(
        self, session: Session, calls: Sequence[Any], iteration: int
    ) -> tuple[list[ToolResult | None], list[tuple[int, ToolCall, Callable[..., Any]]], list[_Delivery]]:
        """Run the batch's searches first, then settle every call that needs no execution.

        The whole plan works on one snapshot of the session (one store read) and writes what it
        changed (discoveries, uses) in one atomic update, before any tool runs. Returns a result
        slot per call (filled for searches and refused calls) and the calls left to execute with
        their functions (calls holding the tools' own arguments only), and the augmented values
        for the consumer: the first rule of `_batch`, done before anything waits.
        """
        turn = session.view()
        if self.searches:  # a catalog tool shown under the search tool's name: its calls would search
            self.metatool.check_clash(turn.is_visible)
        neutral = self._split(turn, calls)
        results: list[ToolResult | None] = [None] * len(neutral)
        deliveries: list[_Delivery] = []
        # The tools the request carried that the model calls: a search of this turn evicts them last, and
        # their calls run even if it does (with max_discovered=1, its hit takes the one slot).
        loaded = turn.loaded_names().intersection(c.name for c in neutral if not self._is_search(c))
        turn.spare(turn.spared | loaded)  # and those the caller's handle spares (a plug-in gating one call at a time)
        for i, call in enumerate(neutral):
            if self._is_search(call):
                results[i] = self._search(turn, call, iteration, deliveries, i)
        pending: list[tuple[int, ToolCall, Callable[..., Any]]] = []
        for i, raw in enumerate(neutral):
            if results[i] is None:
                call = self._resolve(turn, raw)  # after the searches: they may have found the alias
                prepared = self._prepare(turn, call, loaded)
                if isinstance(prepared, ToolResult):
                    results[i] = prepared
                else:
                    own, fn, values = prepared
                    pending.append((i, own, fn))
                    if values is not None:
                        deliveries.append((i, own.name, values, own.id))
        turn.commit()
        deliveries.sort(key=lambda d: d[0])
        return results, pending, deliveries

    def consume(self, name: str, values: Mapping[str, Any], call_id: str) -> None:
        """Hand one call's augmented values to the consumer, for callers that run the tool themselves
        (the MCP gateway), after `split_augmented` found them valid."""
        drive(self._handed([(0, name, values, call_id)]), _answer)

    def _handed(self, deliveries: Sequence[_Delivery]) -> Generator[_Settle, Any, None]:
        """Each delivery traced, then handed to the consumer; yields what the consumer returned, for
        the driver to settle (refuse or await an awaitable) before the next one is handed."""
        for _, name, values, call_id in deliveries:
            tracing.augmented(name, values, call_id)
        consumer = self.augment.on_augment if self.augment is not None else None
        for _, name, values, call_id in deliveries if consumer is not None else ():
            yield _Settle(consumer(name, values, call_id))  # type: ignore[misc]

    # --- one batch, two drivers -------------------------------------------------------------

    def _batch(self, session: Session, calls: Sequence[Any], iteration: int) -> Generator[_Step, Any, list[ToolResult]]:
        """The rules of a batch, written once: plan it, hand the augmented values over, run the
        calls (all at once when parallel, else one after another, each within the timeout) and
        make their results. Yields each step that waits on something (a consumer's answer, a group
        of calls) and is sent how it went; `execute` and `aexecute` only do the steps."""
        results, pending, deliveries = self._plan(session, calls, iteration)
        yield from self._handed(deliveries)
        groups = [pending] if self.config.parallel_tool_calls else [[p] for p in pending]
        for group in groups if pending else ():
            outcomes: list[_Outcome] = yield _Calls([(call, fn) for _, call, fn in group], self.config.tool_timeout)
            for (i, call, _), outcome in zip(group, outcomes, strict=True):
                results[i] = self._settled(call, outcome)
        return self._record_usage(session, [r for r in results if r is not None])

    def execute(self, session: Session, calls: Sequence[Any], *, iteration: int = 0) -> list[ToolResult]:
        """Run a batch; results come back in the calls' order."""
        return drive(self._batch(session, calls, iteration), _answer)

    async def aexecute(self, session: Session, calls: Sequence[Any], *, iteration: int = 0) -> list[ToolResult]:
        """`execute` for asyncio: async tools are awaited, sync tools run in worker threads."""
        return await adrive(self._batch(session, calls, iteration), _aanswer)


class _Settle(NamedTuple):
    """A step of a batch: what `on_augment` returned, to refuse (sync) or await (async) when awaitable."""

    returned: object


class _Calls(NamedTuple):
    """A step of a batch: run these calls at once, each within `timeout` seconds (None: no limit);
    answered with an `_Outcome` per call, in order."""

    calls: Sequence[tuple[ToolCall, Callable[..., Any]]]
    timeout: float | None


_Step = _Settle | _Calls


class _Outcome(NamedTuple):
    """How one call ended, as its driver saw it: a value, an exception, or a timeout (it was abandoned)."""

    elapsed_ms: float
    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False


def _answer(step: _Step) -> Any:
    """A step of a batch done from sync code: a consumer is called as is, tools in this or worker threads."""
    if isinstance(step, _Calls):
        return _call_in_threads(step)
    if inspect.isawaitable(step.returned):  # nothing in sync code could await it
        if inspect.iscoroutine(step.returned):
            step.returned.close()
        raise ArgumentTypeError("an async on_augment needs arun() / ahandle_tool_calls(); run() calls it as is")
    return None


async def _aanswer(step: _Step) -> Any:
    """A step of a batch done from asyncio: async tools and consumers are awaited, sync tools run in threads."""
    if isinstance(step, _Calls):
        return await _acalls(step)
    return await asettle(step.returned)


def _call_in_threads(step: _Calls) -> list[_Outcome]:
    """Run a group of calls from sync code; a timed-out call is abandoned (its thread runs on)."""
    if step.timeout is None and len(step.calls) == 1 and not _is_async_tool(step.calls[0][1]):
        ((call, fn),) = step.calls  # no timeout, nothing to overlap: run in this thread
        started = time.perf_counter()
        try:
            value = _call_sync(fn, call.arguments)
        except (Exception, SystemExit) as exc:  # SystemExit: see _interrupted
            return [_Outcome(_ms(started), error=exc)]
        return [_Outcome(_ms(started), value)]
    started = time.perf_counter()
    futures = [_in_thread(fn, call.arguments, step.timeout) for call, fn in step.calls]
    return _interrupted([_collect(future, step.timeout, started) for future in futures])


def _in_thread(
    fn: Callable[..., Any], arguments: Mapping[str, Any], timeout: float | None
) -> concurrent.futures.Future[Any]:
    """Start one call on a thread of its own, in the caller's context (its context variables: a request id, a
    tracing span), as if called here; its Future settles with what the call returned or raised.

    A thread per call: a call abandoned by a timeout keeps its thread, and the group's other calls, the next
    group's, and (from asyncio) the application's own `to_thread` work must not queue behind it, as they would in
    a shared pool (asyncio's default executor has at most 32 threads) and time out unrun. At exit, the program
    waits for the call until its `timeout` runs out, never longer (see `_ToolThreads`).
    """
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    context = contextvars.copy_context()

    def work() -> None:
        try:
            if not future.set_running_or_notify_cancel():  # cancelled before it started (arun's timeout): never run
                return
            try:
                value = context.run(_call_sync, fn, arguments)
            except BaseException as exc:  # whatever it is goes to the waiter, which decides (_collect, _interrupted)
                future.set_exception(exc)
            else:
                future.set_result(value)
        finally:
            _ToolThreads.ended(threading.current_thread())

    _ToolThreads.start(threading.Thread(target=work, name="toolsearch-tool", daemon=True), timeout)
    return future


class _ToolThreads:
    """The tool calls running on threads of their own, each with the time its timeout runs out (None: no timeout),
    so that the program's exit waits for each until then, and no longer.

    Every such thread is a daemon, which Python does not wait for at exit: a call abandoned by its timeout (a tool
    stuck on a dead socket) must never keep the program from exiting. But a call that is not past its timeout, one
    without a timeout above all, was not abandoned: a run stopped by Ctrl-C (the program then exits) lets it finish
    what it was doing, a file it was writing, as Python lets an ordinary thread finish.
    """

    _lock = threading.Lock()
    _running: ClassVar[dict[threading.Thread, float | None]] = {}
    _registered = False

    @classmethod
    def start(cls, thread: threading.Thread, timeout: float | None) -> None:
        with cls._lock:
            if not cls._registered:
                atexit.register(cls.wait_at_exit)
                cls._registered = True
            cls._running[thread] = None if timeout is None else time.monotonic() + timeout
        thread.start()

    @classmethod
    def ended(cls, thread: threading.Thread) -> None:
        with cls._lock:
            cls._running.pop(thread, None)

    @classmethod
    def wait_at_exit(cls) -> None:
        with cls._lock:
            running = list(cls._running.items())
        for thread, deadline in running:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))


def _collect(future: concurrent.futures.Future[Any], timeout: float | None, started: float) -> _Outcome:
    """How a call started at `started` ended, waiting at most until `timeout` seconds after that."""
    remaining = None if timeout is None else max(0.0, timeout - (time.perf_counter() - started))
    try:
        value = future.result(timeout=remaining)
    except BaseException as exc:
        if future.done() and future.exception() is exc:  # the tool's own (a TimeoutError it raised too)
            return _Outcome(_ms(started), error=exc)
        if not isinstance(exc, TimeoutError):  # this thread was interrupted (Ctrl-C) while it waited
            raise
        if not future.done():  # still running at its deadline: abandoned
            return _Outcome(_ms(started), timed_out=True)
        error = future.exception()  # it ended just as the wait ran out
        return _Outcome(_ms(started), error=error) if error is not None else _Outcome(_ms(started), future.result())
    return _Outcome(_ms(started), value)


def _interrupted(outcomes: list[_Outcome]) -> list[_Outcome]:
    """The outcomes of a group, once every call of it ended; a KeyboardInterrupt a tool raised is raised again here.

    One rule for both drivers and every kind of tool: a tool's SystemExit (argparse or click refusing the model's
    arguments, a wrapped script's `sys.exit`) is that call's ERROR result, which the model reads, never the end of
    the program; a KeyboardInterrupt ends the run as Ctrl-C does, with the run so far attached (`exc.partial`).
    """
    for outcome in outcomes:
        if isinstance(outcome.error, KeyboardInterrupt):
            raise outcome.error
    return outcomes


async def _acalls(step: _Calls) -> list[_Outcome]:
    """Run a group of calls from asyncio: async tools awaited, sync ones each in a thread of its own."""
    return _interrupted(list(await asyncio.gather(*(_acall(call, fn, step.timeout) for call, fn in step.calls))))


class _Exited(Exception):
    """An async tool's SystemExit or KeyboardInterrupt, carried out of its task as an ordinary exception: asyncio
    raises those two out of the event loop itself, past the run that must record them (`_interrupted`)."""

    def __init__(self, exit: SystemExit | KeyboardInterrupt) -> None:
        super().__init__(type(exit).__name__)
        self.exit = exit


async def _exits_kept(awaitable: Any) -> Any:
    try:
        return await awaitable
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _Exited(exc) from None


async def _acall(call: ToolCall, fn: Callable[..., Any], timeout: float | None) -> _Outcome:
    """Run one call from asyncio: an async tool awaited, a sync one in a thread of its own; cancelled on timeout."""
    started = time.perf_counter()
    task: asyncio.Future[Any]
    if _is_async_tool(fn):
        try:  # a bad signature raises at call time, before there is a coroutine to await
            value = fn(**call.arguments)
        except (Exception, SystemExit, KeyboardInterrupt) as call_error:  # see _interrupted
            return _Outcome(_ms(started), error=call_error)
        task = asyncio.ensure_future(_exits_kept(_finished(value)))
    else:
        task = asyncio.wrap_future(_in_thread(fn, call.arguments, timeout))
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        return _Outcome(_ms(started), timed_out=True)
    if task.cancelled():  # the tool cancelled itself: task.exception() would raise, ending the whole turn
        return _Outcome(_ms(started), error=ToolCancelledError())
    exc = task.exception()
    if isinstance(exc, _Exited):
        exc = exc.exit
    if exc is not None:
        return _Outcome(_ms(started), error=exc)
    return _Outcome(_ms(started), task.result())


def _is_async_tool(fn: Callable[..., Any]) -> bool:
    """A tool to await on the event loop: a coroutine function, or an async generator function (`async def` with
    `yield`, whose items are its result)."""
    return is_async_callable(fn) or inspect.isasyncgenfunction(unwrapped(fn))


async def _finished(value: Any) -> Any:
    """What an async tool's call returned, finished where the call runs (within its timeout): a coroutine
    awaited, an async generator's items (a tool written with `async def` and `yield` streams its result), and an
    iterator it came to run out (`_ran_out`)."""
    if inspect.isasyncgen(value):
        return [item async for item in value]
    return _ran_out(await value)


def _ran_out(value: Any) -> Any:
    """A tool's result, with an iterator (see `_call_sync`) run out into the list of its items."""
    return list(value) if isinstance(value, Iterator) else value


def _call_sync(fn: Callable[..., Any], arguments: Mapping[str, Any]) -> Any:
    """Call a sync tool, in the thread it runs in, and finish what it returned there.

    An iterator it returned (a tool written with `yield`, a `map`, `filter`, `zip`, an `itertools` one, an open
    file: any `collections.abc.Iterator`) is run out here, within the call's timeout, and its items, as a list,
    are the result: the text the model reads is made later, where a lazy iterator's work must not run, and its
    repr would tell the model nothing. Collections JSON has no form for (sets, dict views, `range`) need no work to
    read and are written as arrays there (`tool_result_text`).
    """
    value = fn(**arguments)
    if inspect.isasyncgen(value) or isinstance(value, Coroutine):  # an async tool driven from sync code
        try:  # run in this worker thread
            return asyncio.run(_finished(value))
        except asyncio.CancelledError:  # not an Exception: it would end the whole turn, every other result lost
            raise ToolCancelledError() from None
    return _ran_out(value)


def _said(error: BaseException, limit: int = 4_000) -> str:
    """An exception's message for the model: one whose __str__ raises must not fail the turn, and a huge one is cut."""
    try:
        text = str(error)
    except Exception:
        return "(its message could not be read)"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} characters left out)"


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _query_of(call: ToolCall) -> str | None:
    query = call.arguments.get("query") if isinstance(call.arguments, Mapping) else None
    return query if isinstance(query, str) else None


def _backend_order(outcome: MetaToolOutcome) -> tuple[str, ...] | None:
    """What the usage log records as a learned search's list: the backend's own order (`ranked` of a
    LearnedSearchResult), trimmed as the search trimmed what it showed (the tools the session had already
    left out, `max_results` kept), so it reads as a plain search's list would; None for a plain search."""
    ranked = getattr(outcome.result, "ranked", None)
    if ranked is None:
        return None
    loaded = set(outcome.already_loaded)
    kept = tuple(name for name in ranked if name not in loaded)
    return kept[: outcome.max_results] if outcome.max_results else kept


def _suggest_query(name: str) -> str:
    from .text import split_identifier

    return " ".join(split_identifier(name)) or name



# --- bring-your-own-loop helpers --------------------------------------------------------------


def _check_call_arguments(what: str, session: object, calls: object = ()) -> None:
    """Refuse what the bring-your-own-loop helpers cannot work with, before anything runs."""
    if not isinstance(session, Session):
        raise wrong_type(f"{what}: session", session, "a Session (SessionManager.create or get)")
    if isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Iterable):
        raise wrong_type(f"{what}: calls", calls, "a list of tool calls (the model's reply)")


def setup_augmentation(
    session: Session,
    augment: AugmentSpec | None,
    on_augment: OnAugment | None = None,
) -> Augmentation | None:
    """The Augmentation for `augment` (a pydantic model class, a JSON schema or an Augmentation),
    checked against the session's catalog: a field named like a tool's parameter is refused here,
    once per catalog content (AugmentationError naming both)."""
    augmentation = Augmentation.of(augment, on_augment=on_augment)
    if augmentation is not None:
        catalog = session.index.catalog
        augmentation.check(catalog, catalog_key=catalog.hash)
    return augmentation


def tools_for_request(
    session: Session,
    format: ToolFormat = "openai_chat",
    *,
    metatool: ToolSearchMetaTool | None = None,
    augment: AugmentSpec | None = None,
) -> list[dict[str, Any]]:
    """The tools for this turn in a provider's format: pinned + tool_search + discovered.

    Names are mapped to provider-safe aliases (`session.resolve_name` maps them back, and
    `handle_tool_calls` does so for every call). One read of the session. With `augment`, every
    tool but tool_search carries the augmented fields (see `toolsearch.augment`); pass the same
    `augment` to `handle_tool_calls`.
    """
    _check_call_arguments("tools_for_request", session)
    meta = metatool or ToolSearchMetaTool()
    augmentation = setup_augmentation(session, augment)
    pinned, search, discovered = meta.turn_tools(session.view())  # one read of the session
    tools = augment_tools([*pinned, search, *discovered], augmentation, meta.name)
    return render_tools(format, tools, session.name_map)


class _Batch(NamedTuple):
    """A batch for `handle_tool_calls` / `ahandle_tool_calls`, checked and ready to run."""

    executor: ToolExecutor
    session: Session
    calls: Sequence[Any]


def _tool_calls(
    session: Session,
    calls: Sequence[ToolCall | Mapping[str, Any] | Any],
    functions: ToolFunctions | None = None,
    *,
    metatool: ToolSearchMetaTool | None = None,
    config: ExecutionSettings | None = None,
    usage: UsageRecorder | None = None,
    augment: AugmentSpec | None = None,
    on_augment: OnAugment | None = None,
) -> Callable[[str], _Batch]:
    """Run one batch of tool calls: every tool_search first, then the other calls.

    `calls` may be neutral ToolCalls or provider objects/dicts (OpenAI Chat `tool_calls`,
    Responses `function_call` items, Anthropic `tool_use` blocks). Each ToolResult has
    `.to_openai_chat()`, `.to_openai_responses()`, `.to_anthropic()` for the reply message.
    With `augment`, each call's augmented values go to `on_augment(tool_name, values, call_id)`
    and the tool runs with its own arguments.
    """

    def ready(helper: str) -> _Batch:  # the helper's name, for its errors
        _check_call_arguments(helper, session, calls)
        augmentation = setup_augmentation(session, augment, on_augment)
        executor = ToolExecutor(functions, metatool=metatool, config=config, usage=usage, augment=augmentation)
        return _Batch(executor, session, calls)

    return ready


_P = ParamSpec("_P")
_Start = Callable[_P, Callable[[str], _Batch]]
_F = TypeVar("_F", bound=Callable[..., Any])


def _synchronous(start: _Start[_P]) -> Callable[_P, list[ToolResult]]:
    """`handle_tool_calls`: the batch `start` prepares, run from sync code (its parameters and docstring)."""
    prepare = _renamed(start, "handle_tool_calls")

    def handle_tool_calls(*args: _P.args, **kwargs: _P.kwargs) -> list[ToolResult]:
        executor, session, calls = prepare(*args, **kwargs)("handle_tool_calls")
        return executor.execute(session, calls)

    return presented(handle_tool_calls, start, "list[ToolResult]")


def _asynchronous(start: _Start[_P], doc: str) -> Callable[_P, Coroutine[Any, Any, list[ToolResult]]]:
    """`ahandle_tool_calls`: the batch `start` prepares, run from asyncio (its parameters, docstring `doc`)."""
    prepare = _renamed(start, "ahandle_tool_calls")

    async def ahandle_tool_calls(*args: _P.args, **kwargs: _P.kwargs) -> list[ToolResult]:
        executor, session, calls = prepare(*args, **kwargs)("ahandle_tool_calls")
        return await executor.aexecute(session, calls)

    return presented(ahandle_tool_calls, start, "list[ToolResult]", doc)


def _renamed(start: _F, name: str) -> _F:
    """`start` under `name`, so that Python refuses a call with wrong arguments in the helper's name
    (`handle_tool_calls() missing 1 required positional argument: 'calls'`)."""
    fn = cast(types.FunctionType, start)
    copy = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__, copy.__qualname__ = fn.__kwdefaults__, name
    return cast(_F, copy)


handle_tool_calls = _synchronous(_tool_calls)
ahandle_tool_calls = _asynchronous(
    _tool_calls,
    "`handle_tool_calls` for asyncio: async tools and an async `on_augment` are awaited, sync tools run in threads.",
)
