"""Provider-neutral chat records and the small ChatModel protocol every provider implements.

How a turn runs, from sync code or asyncio (requests, streams, handlers), is `providers/drive.py`'s job.
"""

from __future__ import annotations

import inspect
import json
import math
import warnings
from collections import UserString
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence, Set, ValuesView
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from .._errors import ArgumentTypeError, DuplicateToolError, InvalidArgumentError
from .._errors import ProviderError as ProviderError  # its old home: imports from here keep working
from .._untrusted import repair_surrogates, surrogate_problem
from ..tools import NameMap, Tool, provider_safe_name
from ._wire import StopKind, dump
from ._wire import stop_kind as _stop_kind

Role = Literal["system", "user", "assistant", "tool"]
ToolSearchMode = Literal["schema", "native"]
CallKind = Literal["function", "tool_search"]
StreamEventType = Literal["text_delta", "tool_call_start"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call a model asked for, with tool names as in the catalog (never provider aliases).

    `arguments` is the parsed JSON object; when the model sent text that is not a JSON object,
    `arguments` is empty and `arguments_error` says why (the loop answers with an instructive result).
    `kind` is "tool_search" for a provider-native search call (OpenAI Responses `tool_search_call`).
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    arguments_error: str | None = None
    kind: CallKind = "function"

    @classmethod
    def from_json(cls, id: str, name: str, text: str | None, *, kind: CallKind = "function") -> ToolCall:
        """Parse a JSON arguments string as providers send it (empty text means no arguments)."""
        arguments, error = parse_arguments(text)
        return cls(id=id, name=name, arguments=arguments, arguments_error=error, kind=kind)

    def arguments_json(self) -> str:
        return json.dumps(dict(self.arguments), ensure_ascii=False, separators=(",", ":"))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form; `ToolCall.coerce` (and `Message.coerce`) read it back."""
        out: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}
        if self.arguments_error:
            out["arguments_error"] = self.arguments_error
        if self.kind != "function":
            out["kind"] = self.kind
        return out

    @classmethod
    def coerce(cls, value: ToolCall | Mapping[str, Any], *, where: str = "tool call") -> ToolCall:
        """A ToolCall from a ToolCall or a mapping in one of `CALL_SHAPES`: the one `to_dict` writes
        (`arguments` an object, or its JSON text) or an OpenAI Chat Completions call.

        Arguments given as text that is not a JSON object come back as `arguments_error`, as a
        provider's reply would; any other shape is an InvalidArgumentError that names `where`
        (e.g. "message 2's tool_calls[0]") and the field.
        """
        if isinstance(value, ToolCall):
            return value
        if not isinstance(value, Mapping):
            raise ArgumentTypeError(f"{where} is {type(value).__name__}, not a ToolCall or a mapping; {CALL_SHAPES}")
        fn = value.get("function")
        chat = isinstance(fn, Mapping)  # OpenAI Chat Completions: the name and arguments are under "function"
        source: Mapping[str, Any] = fn if isinstance(fn, Mapping) else value
        prefix = "function." if chat else ""
        missing = [
            f"{prefix if key != 'id' else ''}{key}"
            for key, holder in (("id", value), ("name", source))
            if not isinstance(holder.get(key), str)
        ]
        if missing:
            raise InvalidArgumentError(
                f"{where} {dict(value)!r:.120} lacks a string {' and '.join(missing)}; {CALL_SHAPES}"
            )
        kind = value.get("kind", "function")
        if kind not in ("function", "tool_search"):
            raise InvalidArgumentError(
                f"{where} {source['name']!r} has kind {kind!r}; a kind is 'function' (the default) or 'tool_search'"
            )
        given = source.get("arguments")
        if given is not None and not isinstance(given, Mapping | str):
            raise InvalidArgumentError(
                f"{where}'s {prefix}arguments is {type(given).__name__} {given!r:.60}, not an object or its JSON "
                f"text; {CALL_SHAPES}"
            )
        arguments, error = parse_arguments(given)
        saved = value.get("arguments_error")
        if saved is not None and not isinstance(saved, str):
            raise InvalidArgumentError(f"{where}'s arguments_error is {type(saved).__name__}, not text or null")
        return cls(value["id"], source["name"], arguments, saved or error, kind)


# What ToolCall.coerce (and Message.coerce's tool_calls) read, for the errors that refuse anything else.
CALL_SHAPES = (
    'a tool call is a ToolCall, a mapping as ToolCall.to_dict() writes it ({"id", "name", "arguments"}, arguments '
    'an object or its JSON text), or an OpenAI Chat Completions call ({"id", "type": "function", "function": '
    '{"name", "arguments": "<JSON text>"}})'
)


def parse_arguments(text: str | Mapping[str, Any] | None) -> tuple[dict[str, Any], str | None]:
    """Tool-call arguments as a dict plus an error text when they are not a JSON object."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return {}, None
    if isinstance(text, Mapping):
        value: Any = dict(text)
    else:
        try:
            value = json.loads(text)
        except (TypeError, ValueError) as exc:
            return {}, f"arguments are not valid JSON ({exc}); send a JSON object matching the tool's schema"
        except RecursionError:
            return {}, "arguments are nested too deeply; send a flat JSON object matching the tool's schema"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}"
    problem = _shape_problem(value)
    if problem is not None:
        return {}, f"{problem}; send a JSON object matching the tool's schema"
    problem = surrogate_problem(value, "arguments")  # kept, it would crash the next request's encoding
    if problem is not None:
        return {}, f"{problem}; send the arguments again as valid text"
    return value, None


def call_text(value: Any, what: str) -> str:
    """A tool call's name or id from a provider's answer ("" when absent); ProviderError when it is not text.

    SDKs build response objects without checking them, so a malformed answer's name can be a number or
    a list: it would fail later, inside the turn, as a bare TypeError.
    """
    if value is None:
        return ""
    if what == "id" and isinstance(value, int) and not isinstance(value, bool):  # a number is an id all the same
        return str(value)
    if not isinstance(value, str):
        raise ProviderError(
            f"the model's answer holds a tool call whose {what} is {type(value).__name__} {value!r:.80}, not a "
            "string: the provider's answer is malformed"
        )
    return value


# Deeper than any schema a tool may have can describe (toolsearch._untrusted.MAX_DEPTH, two schema levels a value).
MAX_ARGUMENT_DEPTH = 128


def _shape_problem(value: Any) -> str | None:
    """What makes parsed arguments unfit to pass on, or None: a number JSON cannot hold (NaN, Infinity, 1e999:
    Python reads them, every provider's encoder refuses them on the next request) or nesting past
    `MAX_ARGUMENT_DEPTH` (a provider hands over arguments parsed however deep they are)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"arguments hold {item!r}, which is not a JSON number"
        if isinstance(item, Mapping | list | tuple):
            if depth > MAX_ARGUMENT_DEPTH:
                return f"arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
            children = item.values() if isinstance(item, Mapping) else item
            stack.extend((child, depth + 1) for child in children)
    return None


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message in neutral form.

    - user / system: `content`.
    - assistant: `content` (may be empty) and `tool_calls`; `provider_items` keeps a provider's
      own output (reasoning items, thinking blocks) so the same provider can replay it verbatim.
    - tool: the result of one call: `tool_call_id`, `name`, `content`, `is_error`; a search result
      also carries `tool_references`, the tools it found (rendered as Anthropic `tool_reference`
      blocks or an OpenAI `tool_search_output` when the native form is on).
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    call_kind: CallKind = "function"
    tool_references: tuple[Tool, ...] = ()
    provider: str | None = None
    provider_items: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        # A model's, a user's or a tool's text with a lone surrogate would make every later request
        # of the conversation fail to encode: it is repaired here, where all of them become messages.
        if isinstance(self.content, str):
            object.__setattr__(self, "content", repair_surrogates(self.content))

    @classmethod
    def user(cls, content: str) -> Message:
        return cls("user", content)

    @classmethod
    def system(cls, content: str) -> Message:
        return cls("system", content)

    @classmethod
    def assistant(cls, content: str = "", tool_calls: Sequence[ToolCall] = ()) -> Message:
        return cls("assistant", content, tuple(tool_calls))

    @classmethod
    def tool(
        cls,
        call: ToolCall,
        content: str,
        *,
        is_error: bool = False,
        tool_references: Sequence[Tool] = (),
    ) -> Message:
        return cls(
            "tool",
            content,
            tool_call_id=call.id,
            name=call.name,
            is_error=is_error,
            call_kind=call.kind,
            tool_references=tuple(tool_references),
        )

    @classmethod
    def coerce(
        cls,
        value: Message | Mapping[str, Any] | str,
        *,
        tools: Callable[[str], Tool | None] | None = None,
        where: str = "message",
    ) -> Message:
        """Accept a Message, a plain string (a user message) or a `{"role", "content"}` mapping.

        A mapping as `to_dict` writes it comes back as the same message (calls with their kind and
        argument errors, a search result's tools, a provider's own items), so a history saved with
        `LoopResult.to_dict()` resumes as it was. A search result's `tool_references` may also name
        tools only (as earlier releases wrote them): `tools(name)` looks each one up (the loop
        passes its catalog's `get`). An assistant message's `tool_calls` may also be OpenAI Chat
        Completions calls, their arguments JSON text (see `ToolCall.coerce`). Errors name `where`
        (the loop passes "the prompt's message N") and the field.
        """
        if isinstance(value, Message):
            return value
        if isinstance(value, str):
            return cls.user(value)
        if isinstance(value, Mapping):
            role = value.get("role")
            if role == "developer":
                role = "system"
            if role not in ("system", "user", "assistant", "tool"):
                raise InvalidArgumentError(
                    f"{where} has role {role!r}; a message role is system, user, assistant or tool"
                )
            content = value.get("content") or ""
            if not isinstance(content, str):
                raise InvalidArgumentError(
                    f"{where}'s content is {type(content).__name__}: only plain-text message content is supported "
                    "in neutral messages: pass content as a str"
                )
            given = value.get("tool_calls") or ()
            if isinstance(given, str | bytes | Mapping) or not isinstance(given, Sequence):
                raise InvalidArgumentError(
                    f"{where}'s tool_calls is {type(given).__name__}, not a list of tool calls; {CALL_SHAPES}"
                )
            calls = tuple(ToolCall.coerce(c, where=f"{where}'s tool_calls[{i}]") for i, c in enumerate(given))
            call_kind = value.get("call_kind", "function")
            if call_kind not in ("function", "tool_search"):
                raise InvalidArgumentError(
                    f"{where}'s call_kind is {call_kind!r}; it is 'function' (the default) or 'tool_search'"
                )
            provider = value.get("provider")
            return cls(
                role,
                content,
                calls,
                tool_call_id=value.get("tool_call_id"),
                name=value.get("name"),
                is_error=bool(value.get("is_error", False)),
                call_kind=call_kind,
                tool_references=_references(value.get("tool_references") or (), tools),
                provider=provider if isinstance(provider, str) else None,
                # JSON turns a (call id, signature) pair into a list: the pair comes back as a tuple
                provider_items=tuple(tuple(i) if isinstance(i, list) else i for i in value.get("provider_items") or ()),
            )
        raise ArgumentTypeError(
            f"cannot turn {type(value).__name__} into a Message;"
            " pass a Message or a dict with role and content"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (for logs, token accounting and resuming: `Message.coerce` reads it back as it was)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        if self.is_error:
            out["is_error"] = True
        if self.call_kind != "function":
            out["call_kind"] = self.call_kind
        if self.tool_references:
            out["tool_references"] = [t.to_dict() for t in self.tool_references]
        if self.provider is not None:
            out["provider"] = self.provider
        if self.provider_items:
            out["provider_items"] = [dump(i) for i in self.provider_items]
        return out


def _references(
    values: Sequence[Tool | Mapping[str, Any] | str], tools: Callable[[str], Tool | None] | None
) -> tuple[Tool, ...]:
    """A search result's found tools, from Tools, definitions (what `Message.to_dict` writes) or names."""
    if isinstance(values, str | Mapping) or not isinstance(values, Sequence):
        raise ArgumentTypeError(
            f"message tool_references must be a list of tool definitions, got {type(values).__name__}"
        )
    out: list[Tool] = []
    for value in values:
        if isinstance(value, Tool):
            out.append(value)
        elif isinstance(value, Mapping):
            out.append(Tool.from_dict(value))
        elif isinstance(value, str):
            if tools is None:
                raise InvalidArgumentError(
                    f"message tool_references names tool {value!r}, but no catalog was given to look it up; pass the "
                    "tool definitions as Message.to_dict() writes them"
                )
            found = tools(value)
            if found is None:
                # a history saved before the catalog changed: the reference goes (a provider refuses one to a tool
                # the request does not carry), the conversation resumes, and the caller is told
                warnings.warn(
                    f"a saved search result names tool {value!r}, which the index no longer holds; it is left out "
                    "of the resumed history",
                    UserWarning,
                    stacklevel=4,
                )
                continue
            out.append(found)
        else:
            raise ArgumentTypeError(
                f"a tool_references entry must be a tool definition (a mapping) or a name, got {type(value).__name__}"
            )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage as the provider reported it (None where it did not say).

    `input_tokens` is the whole prompt, whatever part of it was read from or written to the cache;
    `cached_input_tokens` the part read from cache, `cache_write_tokens` the part written to it
    (Anthropic bills writes above the input rate), and `cache_write_1h_tokens` the part of those
    written to the 1-hour cache (billed higher still). What remains is `fresh_input_tokens`.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cached_input_tokens: int | None = None
    cache_write_tokens: int | None = None
    cache_write_1h_tokens: int | None = None

    @property
    def fresh_input_tokens(self) -> int | None:
        """The prompt tokens neither read from nor written to the cache (None where the input is not known)."""
        if self.input_tokens is None:
            return None
        return self.input_tokens - (self.cached_input_tokens or 0) - (self.cache_write_tokens or 0)

    def to_dict(self) -> dict[str, int | None]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cache_write_1h_tokens": self.cache_write_1h_tokens,
        }


@dataclass(frozen=True, slots=True)
class ModelTurn:
    """What one model request returned: the assistant message, usage, stop reason, raw response.

    `stop_reason` is the provider's own word; `stop_kind` says, in any provider's terms, why the turn
    is not a complete answer: "truncated" (cut at a token limit), "refused" (the model declined, or
    a safety filter withheld the output), "malformed_call" (a tool call the API could not read), or
    None for a normal end. Left out, it follows from `stop_reason` (`_wire.STOP_KINDS`).
    """

    message: Message
    usage: Usage | None = None
    stop_reason: str | None = None
    raw: Any = field(default=None, repr=False, compare=False)
    stop_kind: StopKind | None = None

    def __post_init__(self) -> None:
        if self.stop_kind is None:
            object.__setattr__(self, "stop_kind", _stop_kind(self.stop_reason))


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """Something a streaming model produced while its turn was still arriving.

    - "text_delta": `text` is the next piece of the assistant's text; a turn's pieces, in order,
      concatenate to its final `Message.content`.
    - "tool_call_start": the model began a tool call: `call_id`, `name` and `kind`; its arguments
      are still streaming (the loop runs it after the turn). `name` is the catalog name of any tool
      the request or session knows; a dotted tool the model calls in the same turn as the search
      that finds it still shows the provider alias it was sent under (the loop maps it back to
      the catalog name before running it, once that search ran).

    `iteration` is the model request of the run the event belongs to (set by the loop; 0 outside it).
    """

    type: StreamEventType
    text: str = ""
    call_id: str | None = None
    name: str | None = None
    kind: CallKind = "function"
    iteration: int = 0

    @classmethod
    def text_delta(cls, text: str) -> StreamEvent:
        return cls("text_delta", text)

    @classmethod
    def tool_call_start(cls, call_id: str, name: str, kind: CallKind = "function") -> StreamEvent:
        return cls("tool_call_start", call_id=call_id, name=name, kind=kind)


# A sync handler for `stream`; `astream` also awaits a handler that returns an awaitable.
EventHandler = Callable[[StreamEvent], object]


def turn_events(turn: ModelTurn) -> list[StreamEvent]:
    """The events a turn that was not streamed stands for: its text as one delta, then each call's start."""
    events = [StreamEvent.text_delta(turn.message.content)] if turn.message.content else []
    events += [StreamEvent.tool_call_start(c.id, c.name, c.kind) for c in turn.message.tool_calls]
    return events


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """Everything a provider needs to build one request.

    Tools are kept in their roles so a provider can render them natively: `pinned` (always
    visible), `search_tool` (the tool_search meta-tool, None to leave it out) and `discovered`
    (found by searches). With `tool_search_mode="schema"` (default) the tools array is
    pinned + search tool + discovered as plain function tools; "native" uses the provider's own
    form where it has one (Anthropic `defer_loading` + `tool_reference`, OpenAI Responses
    client-executed `tool_search`) and falls back to schema injection elsewhere.
    """

    messages: tuple[Message, ...]
    system: str | None = None
    pinned: tuple[Tool, ...] = ()
    search_tool: Tool | None = None
    discovered: tuple[Tool, ...] = ()
    tool_search_mode: ToolSearchMode = "schema"

    @property
    def tools(self) -> tuple[Tool, ...]:
        """Every tool in request order: pinned, the search tool, discovered."""
        search = (self.search_tool,) if self.search_tool is not None else ()
        return (*self.pinned, *search, *self.discovered)

    def name_map(self) -> NameMap:
        """Provider-safe aliases for every tool name this request mentions (tools, then history).

        The request's tools must map to distinct aliases (DuplicateToolError otherwise). Names in
        the history are whatever the model sent, guesses included (an alias and the name behind
        it, say); one that would collide is rendered with its alias but not registered, so the
        way back always leads to the request's own tools.
        """
        names = _RequestNames()
        for tool in self.tools:
            names.add(tool.name)
        for message in self.messages:
            mentioned = [c.name for c in message.tool_calls] + [t.name for t in message.tool_references]
            if message.name:
                mentioned.append(message.name)
            for name in mentioned:
                names.safe(name)
        return names


class _RequestNames(NameMap):
    """A NameMap whose `safe` never fails: a colliding name gets its alias without being registered."""

    def safe(self, name: str) -> str:
        try:
            return super().safe(name)
        except DuplicateToolError:
            return provider_safe_name(name)


@runtime_checkable
class ChatModel(Protocol):
    """A chat model the loop can drive. Providers implement all three methods.

    `payload(request)` returns the exact keyword arguments the provider would send for the
    request (used for token accounting and tests); `complete` / `acomplete` send it.
    """

    format: str  # "openai_chat" | "openai_responses" | "anthropic" | any other label

    def payload(self, request: ChatRequest) -> dict[str, Any]: ...

    def complete(self, request: ChatRequest) -> ModelTurn: ...

    async def acomplete(self, request: ChatRequest) -> ModelTurn: ...


@runtime_checkable
class StreamingChatModel(ChatModel, Protocol):
    """A ChatModel that can also stream a turn (the loop uses this when streaming is on).

    `stream` / `astream` send `payload(request)` with streaming switched on, pass each
    StreamEvent to `on_event` as it arrives (`astream` awaits a handler returning an awaitable),
    and return the same ModelTurn `complete` would have, assembled from the stream.
    """

    def stream(self, request: ChatRequest, on_event: EventHandler | None = None) -> ModelTurn: ...

    async def astream(self, request: ChatRequest, on_event: EventHandler | None = None) -> ModelTurn: ...


def tool_result_text(value: Any) -> str:
    """Turn whatever a tool returned into the text the model reads.

    Bytes are read as UTF-8 text; bytes that are not (an image, a zip) raise ArgumentTypeError, as does an
    iterator or coroutine nobody ran out (a generator, a `map`: the executor runs out one a tool returns, in the
    tool's thread, but not one inside its value): their repr ("b'\\x89PNG...'", "<map object ...>") would reach
    the model as the tool's answer, and the real output would be lost without a word. At any depth, a collection
    JSON has no form for is written as what it holds: a set, a dict view, a `range` or any other sequence as an
    array, a mapping that is no dict as an object.
    """
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    try:
        return _bytes_text(value) if isinstance(value, bytes | bytearray | memoryview) else json.dumps(
            value, ensure_ascii=False, default=_json_default
        )
    except ArgumentTypeError:
        raise
    except (TypeError, ValueError):
        return str(value)


def _bytes_text(value: bytes | bytearray | memoryview) -> str:
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise ArgumentTypeError(
            f"the tool returned {len(bytes(value)):,} bytes that are not UTF-8 text (binary data, such as an image "
            "or an archive); a tool's result is text: return a str (base64 for binary data) or a JSON-able value"
        ) from None


def _json_default(value: Any) -> Any:
    """What json.dumps writes for a value it has no form for: bytes as their text, a collection as what it holds
    (see `tool_result_text`), else its str()."""
    if isinstance(value, bytes | bytearray | memoryview):
        return _bytes_text(value)
    if isinstance(value, Iterator | AsyncIterator) or inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never awaited: closed here, without the "was never awaited" warning
        raise ArgumentTypeError(
            f"the tool's result holds a {type(value).__name__} that nothing ran out; return its items (a list) or "
            "its awaited value"
        )
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Set | ValuesView | Sequence) and not isinstance(value, UserString):  # text is no array
        return list(value)
    return str(value)
