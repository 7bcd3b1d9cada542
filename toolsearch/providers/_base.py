"""Provider-neutral chat records and the small ChatModel protocol every provider implements."""

from __future__ import annotations

import asyncio
import inspect
import json
import queue
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import aclosing, closing, contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, cast, runtime_checkable

from .._errors import ArgumentTypeError, DuplicateToolError, InvalidArgumentError
from .._errors import ProviderError as ProviderError  # its old home: imports from here keep working
from .._untrusted import repair_surrogates, surrogate_problem
from ..tools import NameMap, Tool, provider_safe_name

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
        out: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}
        if self.arguments_error:
            out["arguments_error"] = self.arguments_error
        if self.kind != "function":
            out["kind"] = self.kind
        return out


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
    problem = surrogate_problem(value, "arguments")  # kept, it would crash the next request's encoding
    if problem is not None:
        return {}, f"{problem}; send the arguments again as valid text"
    return value, None


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
    def coerce(cls, value: Message | Mapping[str, Any] | str) -> Message:
        """Accept a Message, a plain string (a user message) or a `{"role", "content"}` mapping."""
        if isinstance(value, Message):
            return value
        if isinstance(value, str):
            return cls.user(value)
        if isinstance(value, Mapping):
            role = value.get("role")
            if role == "developer":
                role = "system"
            if role not in ("system", "user", "assistant", "tool"):
                raise InvalidArgumentError(f"message role must be system, user, assistant or tool; got {role!r}")
            content = value.get("content") or ""
            if not isinstance(content, str):
                raise InvalidArgumentError(
                    "only plain-text message content is supported in neutral messages:"
                    " pass content as a str"
                )
            calls = tuple(
                c if isinstance(c, ToolCall) else ToolCall(c["id"], c["name"], dict(c.get("arguments") or {}))
                for c in value.get("tool_calls") or ()
            )
            return cls(
                role,
                content,
                calls,
                tool_call_id=value.get("tool_call_id"),
                name=value.get("name"),
                is_error=bool(value.get("is_error", False)),
            )
        raise ArgumentTypeError(
            f"cannot turn {type(value).__name__} into a Message;"
            " pass a Message or a dict with role and content"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (for logs and token accounting)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        if self.is_error:
            out["is_error"] = True
        if self.tool_references:
            out["tool_references"] = [t.name for t in self.tool_references]
        return out


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage as the provider reported it (None where it did not say)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cached_input_tokens: int | None = None

    def to_dict(self) -> dict[str, int | None]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cached_input_tokens": self.cached_input_tokens,
        }


@dataclass(frozen=True, slots=True)
class ModelTurn:
    """What one model request returned: the assistant message, usage, stop reason, raw response."""

    message: Message
    usage: Usage | None = None
    stop_reason: str | None = None
    raw: Any = field(default=None, repr=False, compare=False)


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
    """Turn whatever a tool returned into the text the model reads."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


class _ClientLoop:
    """One long-lived event loop, in a daemon thread, for async clients driven from sync code.

    `asyncio.run` per request would bind the client's pooled connections to a loop that is closed
    by the next request ("Event loop is closed"); a loop that outlives the requests keeps them usable.
    """

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or cls._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="toolsearch-async-clients", daemon=True).start()
                cls._loop = loop
            return cls._loop


def _refuse_inside_event_loop(coro: Any = None) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    if inspect.iscoroutine(coro):
        coro.close()
    raise ProviderError("an async client cannot be used from sync code inside a running event loop; use arun()")


def run_sync(coro: Any) -> Any:
    """Run a coroutine from sync code (an async SDK client used through the sync `complete`)."""
    _refuse_inside_event_loop(coro)
    return asyncio.run_coroutine_threadsafe(coro, _ClientLoop.get()).result()


def translate_error(exc: Exception, provider: str, modules: tuple[str, ...]) -> Exception:
    """A ProviderError for an SDK/transport exception; other exceptions are returned unchanged."""
    if isinstance(exc, ProviderError):
        return exc
    module = type(exc).__module__ or ""
    if module.startswith(modules):
        return ProviderError(f"{provider} request failed: {type(exc).__name__}: {exc}")
    return exc


def is_async_callable(fn: Any) -> bool:
    """True for coroutine functions, also behind decorators that hide it (the SDKs' `create`)."""
    try:
        target = inspect.unwrap(fn)
    except ValueError:
        target = fn
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(target)


@contextmanager
def translated(provider: str, modules: tuple[str, ...]) -> Iterator[None]:
    """Around a provider call: an SDK or transport exception leaves as a ProviderError (the SDK's as `__cause__`)."""
    try:
        yield
    except Exception as exc:
        err = translate_error(exc, provider, modules)
        if err is exc:
            raise
        raise err from exc


def call_sync(create: Callable[..., Any], payload: Mapping[str, Any], provider: str, modules: tuple[str, ...]) -> Any:
    """Call an SDK endpoint from sync code (an async client's coroutine is run to completion)."""
    with translated(provider, modules):
        response = create(**payload)
        return run_sync(response) if inspect.isawaitable(response) else response


async def call_async(
    create: Callable[..., Any], payload: Mapping[str, Any], provider: str, modules: tuple[str, ...]
) -> Any:
    """Call an SDK endpoint from asyncio (a sync client runs in a worker thread)."""
    with translated(provider, modules):
        if is_async_callable(create):
            return await create(**payload)
        response = await asyncio.to_thread(create, **payload)
        return await response if inspect.isawaitable(response) else response


# --- one flow, two drivers -------------------------------------------------------------------
#
# Work that is the same in sync and async code but for what it waits on is written once, as a
# generator that yields each step it needs done and is sent the step's answer (httpx's `auth_flow`
# pattern): `drive` answers the steps from sync code, `adrive` from asyncio. Whatever would need an
# `await` (a model request, a call batch, a stream's next chunk, a handler) is a step, never done
# in the flow itself.

Step = TypeVar("Step")
Answer = TypeVar("Answer")
Result = TypeVar("Result")


def _advance(flow: Generator[Step, Answer, Result], answer: Any) -> tuple[bool, Any]:
    """Send `answer` in: (False, the flow's next step), or (True, its result) once it returned."""
    try:
        return False, flow.send(answer)
    except StopIteration as done:
        return True, done.value


def drive(flow: Generator[Step, Answer, Result], answer: Callable[[Step], Answer]) -> Result:
    """Run `flow` from sync code: each step it yields is answered by `answer(step)`."""
    with closing(flow):  # a step that raised leaves the flow closed, not suspended
        done, step = _advance(flow, None)
        while not done:
            done, step = _advance(flow, answer(step))
        return cast(Result, step)


async def adrive(flow: Generator[Step, Answer, Result], answer: Callable[[Step], Awaitable[Answer]]) -> Result:
    """Run `flow` from asyncio: each step it yields is answered by `await answer(step)`."""
    with closing(flow):
        done, step = _advance(flow, None)
        while not done:
            done, step = _advance(flow, await answer(step))
        return cast(Result, step)


# --- streaming transport ---------------------------------------------------------------------


class StreamAssembler(Protocol):
    """Turns a provider's stream chunks into StreamEvents as they arrive, and the whole into a ModelTurn."""

    def feed(self, chunk: Any) -> Iterable[StreamEvent]: ...

    def finish(self) -> ModelTurn: ...


def reject_stream_option(options: Mapping[str, Any]) -> None:
    """`stream` belongs to the loop (or `model.stream`); sent through `complete` it would break parsing."""
    if "stream" in options:
        raise InvalidArgumentError(
            "do not pass stream= to the model: stream through the loop (run(..., stream=True) or on_text=...), "
            "or call model.stream(request, on_event)"
        )


_END = object()  # the answer to a stream flow's request for a chunk once the stream has ended


def _streamed_turn(assembler: StreamAssembler) -> Generator[StreamEvent | None, Any, ModelTurn]:
    """One streamed turn: yields None for the next chunk (sent `_END` when there is none) and each
    event the chunk makes, for the handler (answered with None); returns the turn the whole stream made."""
    while (chunk := (yield None)) is not _END:
        yield from assembler.feed(chunk)
    return assembler.finish()


@dataclass(frozen=True, slots=True)
class StreamCall:
    """One streaming request, read into a turn: `sync()` from sync code, `asynchronous()` from asyncio.

    `create(**payload)` opens the stream; `assembler` turns its chunks into the events handed to
    `on_event` as they arrive, and into the turn. The stream is closed however the turn ends (also
    when a handler raised); an SDK or transport error leaves as a ProviderError naming `provider`.
    """

    create: Callable[..., Any]
    payload: Mapping[str, Any]
    assembler: StreamAssembler
    on_event: EventHandler | None
    provider: str
    modules: tuple[str, ...]

    def sync(self) -> ModelTurn:
        """Handlers run in the calling thread; an async client's stream is read on the shared client loop."""
        with translated(self.provider, self.modules), closing(_sync_chunks(self.create, self.payload)) as chunks:

            def answer(step: StreamEvent | None) -> Any:
                return next(chunks, _END) if step is None else deliver_event(self.on_event, step)

            return drive(_streamed_turn(self.assembler), answer)

    async def asynchronous(self) -> ModelTurn:
        """Handlers run on the event loop (awaited when async); a sync client's stream is read in a
        worker thread, chunk by chunk, so the event loop keeps serving."""
        with translated(self.provider, self.modules):
            async with aclosing(_async_chunks(self.create, self.payload)) as chunks:

                async def answer(step: StreamEvent | None) -> Any:
                    return await anext(chunks, _END) if step is None else await adeliver_event(self.on_event, step)

                return await adrive(_streamed_turn(self.assembler), answer)


class StreamsByCall:
    """`stream` / `astream` of a provider model, from the one StreamCall its `_streamed` makes for a request."""

    def _streamed(self, request: ChatRequest, on_event: EventHandler | None, *, asynchronous: bool) -> StreamCall:
        raise NotImplementedError

    def stream(self, request: ChatRequest, on_event: EventHandler | None = None) -> ModelTurn:
        """`complete`, streamed: `on_event` gets text deltas and tool-call starts as they arrive."""
        return self._streamed(request, on_event, asynchronous=False).sync()

    async def astream(self, request: ChatRequest, on_event: EventHandler | None = None) -> ModelTurn:
        """`acomplete`, streamed; an async `on_event` is awaited."""
        return await self._streamed(request, on_event, asynchronous=True).asynchronous()


def _sync_chunks(create: Callable[..., Any], payload: Mapping[str, Any]) -> Generator[Any, None, None]:
    """The stream's chunks for sync code; an async client's are read on the shared client loop."""
    if is_async_callable(create):
        _refuse_inside_event_loop()
        return _client_loop_chunks(lambda: create(**payload))
    stream = create(**payload)
    if inspect.isawaitable(stream) or hasattr(stream, "__aiter__"):  # an async stream in disguise
        _refuse_inside_event_loop(stream)
        return _client_loop_chunks(lambda: stream)
    return _closing_iter(stream)


def _async_chunks(create: Callable[..., Any], payload: Mapping[str, Any]) -> AsyncGenerator[Any, None]:
    """The stream's chunks for asyncio; a sync client's are read in a worker thread."""
    if is_async_callable(create):
        return _awaited_chunks(create, payload)
    return _thread_chunks(create, payload)


def _close_sync(stream: Any) -> None:
    close = getattr(stream, "close", None)
    if callable(close):
        close()


async def _close_async(stream: Any) -> None:
    close = getattr(stream, "close", None)
    if callable(close):
        result = close()
        if inspect.isawaitable(result):
            await result


def _closing_iter(stream: Any) -> Generator[Any, None, None]:
    try:
        yield from stream
    finally:
        _close_sync(stream)


async def _awaited_chunks(create: Callable[..., Any], payload: Mapping[str, Any]) -> AsyncGenerator[Any, None]:
    """Chunks of an async client's stream (the SDK may hand it over behind an awaitable)."""
    stream = create(**payload)
    if inspect.isawaitable(stream):
        stream = await stream
    try:
        async for chunk in stream:
            yield chunk
    finally:
        await _close_async(stream)


def _client_loop_chunks(open_stream: Callable[[], Any]) -> Generator[Any, None, None]:
    """Chunks of an async stream read on the shared client loop, handed to this thread through a queue."""
    chunks: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

    async def pump() -> None:
        try:
            stream = open_stream()
            if inspect.isawaitable(stream):
                stream = await stream
            try:
                async for chunk in stream:
                    chunks.put((True, chunk))
            finally:
                await _close_async(stream)
            chunks.put((True, _END))
        except BaseException as exc:  # the reader must always wake up, even on cancellation
            chunks.put((False, exc))
            raise

    future = asyncio.run_coroutine_threadsafe(pump(), _ClientLoop.get())
    try:
        while (chunk := _opened(chunks.get())) is not _END:
            yield chunk
    finally:
        future.cancel()  # the reader stopped early: the pump closes the stream


async def _thread_chunks(create: Callable[..., Any], payload: Mapping[str, Any]) -> AsyncGenerator[Any, None]:
    """Chunks of a sync client's stream, read in a worker thread and handed over through a queue."""
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[bool, Any]] = asyncio.Queue()
    stop = threading.Event()

    def put(ok: bool, value: Any) -> None:
        try:
            loop.call_soon_threadsafe(inbox.put_nowait, (ok, value))
        except RuntimeError:  # the event loop is gone: nobody is listening any more
            stop.set()

    def pump() -> None:
        try:
            stream = create(**payload)
            try:
                for chunk in stream:
                    if stop.is_set():
                        break
                    put(True, chunk)
            finally:
                _close_sync(stream)
            put(True, _END)
        except BaseException as exc:
            put(False, exc)

    worker = threading.Thread(target=pump, name="toolsearch-stream", daemon=True)
    worker.start()
    try:
        while (chunk := _opened(await inbox.get())) is not _END:
            yield chunk
    finally:
        # a handler failed or the task was cancelled: the worker stops and closes the stream at its next chunk
        stop.set()


def _opened(item: tuple[bool, Any]) -> Any:
    """A chunk a pump queued as (ok, value): the value, or the exception the pump hit, raised here."""
    ok, value = item
    if not ok:
        raise value
    return value


# --- handlers --------------------------------------------------------------------------------


def settle(result: object) -> None:
    """What a handler returned, from sync code: an awaitable is refused (nothing could await it)."""
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        raise ArgumentTypeError("an async on_event / on_text handler needs arun(); run() calls its handlers directly")


async def asettle(result: object) -> None:
    """What a handler returned, from asyncio: an awaitable is awaited."""
    if inspect.isawaitable(result):
        await result


def deliver_event(on_event: EventHandler | None, event: StreamEvent) -> None:
    """Call a handler (if any) from sync code (an async handler is refused: nothing could await it)."""
    if on_event is not None:
        settle(on_event(event))


async def adeliver_event(on_event: EventHandler | None, event: StreamEvent) -> None:
    """Call a handler (if any) from asyncio, awaiting it when it returns an awaitable."""
    if on_event is not None:
        await asettle(on_event(event))


def replay(turn: ModelTurn, events: Iterable[StreamEvent] | None = None) -> Generator[StreamEvent, None, ModelTurn]:
    """A turn that is already in, as a stream flow: yields its events (`turn_events` unless given)
    for the handler, then returns the turn."""
    yield from turn_events(turn) if events is None else events
    return turn
