"""One flow, two drivers: how every turn runs from sync code or asyncio.

A model request, a streamed turn, a batch of tool calls, a loop turn: each is written once, as a
generator that yields the steps it needs done (httpx's `auth_flow` pattern), and `drive` answers them
from sync code, `adrive` from asyncio. Around that: SDK calls either way (`call_sync`, `call_async`,
with SDK errors translated), streams read either way (`StreamCall`), and handlers settled either way.
The records these move (`ModelTurn`, `StreamEvent`, `ChatRequest`) are in `_base`.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import queue
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterable, Iterator, Mapping
from contextlib import aclosing, closing, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from .._errors import ArgumentTypeError, InvalidArgumentError, ProviderError, joined_sentences, named_error
from ._base import ChatRequest, EventHandler, ModelTurn, StreamEvent, turn_events

__all__ = [
    "StreamAssembler",
    "StreamCall",
    "StreamsByCall",
    "adeliver_event",
    "adrive",
    "asettle",
    "call_async",
    "call_sync",
    "check_client",
    "deliver_event",
    "drive",
    "is_async_callable",
    "reject_stream_option",
    "replay",
    "retry_sentence",
    "run_sync",
    "settle",
    "stream_cut_short",
    "translate_error",
    "translated",
    "unwrapped",
]


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
    """A ProviderError for an SDK/transport exception; other exceptions are returned unchanged.

    Its `status`, `retry_after` and `retryable` are read from the SDK's exception (each SDK names them its own
    way), and its message ends with what to do: wait and send again, or fix the request (after one full stop, also
    when the SDK's own message ends with one: "Request timed out.").
    """
    if isinstance(exc, ProviderError):
        return exc
    module = type(exc).__module__ or ""
    if module.startswith(modules):
        status = _status_of(exc)
        retry_after = _retry_after_of(exc)
        reported = _retry_error_type_of(exc)
        retryable = _retryable(exc, status, reported)
        advice = _retry_advice(status, retry_after, retryable, reported)
        return ProviderError(
            joined_sentences(f"{provider} request failed: {named_error(exc)}", advice),
            status=status,
            retry_after=retry_after,
            retryable=retryable,
        )
    return exc


# Statuses whose request may succeed when sent again as it is: a timeout, a conflict (OpenAI's lock timeout), a rate
# limit, and every server error (Anthropic's 529 "overloaded" too); the SDKs retry the same ones themselves.
_RETRY_STATUSES = frozenset({408, 409, 429})
# Exception classes (by name: no SDK is imported here) that mean no answer came: the request may not even have
# reached the provider, so sending it again may help.
_TRANSPORT_ERRORS = frozenset({
    "APIConnectionError", "APITimeoutError", "TransportError", "TimeoutException", "NetworkError",
    "RemoteProtocolError", "ProtocolError",
})


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status of an SDK's error: `status_code` (openai, anthropic), `code` (google-genai), or its
    `response`'s (httpx); None when no answer came, or when the answer's status says nothing of the error: an
    error a stream reported after its HTTP 200 (Anthropic's `overloaded_error` event) carries that 200."""
    for path in (("status_code",), ("code",), ("response", "status_code")):
        value: Any = exc
        try:
            for name in path:
                value = getattr(value, name)
        except Exception:  # absent, or a property that raises (httpx's, on an error without its request)
            continue
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            return value
    return None


# Error types (the error body's `type`) that a provider reports, mid-stream too, for a request that may succeed when
# sent again: Anthropic's overload, internal error and rate limit; OpenAI's server error.
_RETRY_ERROR_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "server_error"})


def _retry_error_type_of(exc: BaseException) -> str | None:
    """The error's `type` from its body (`{"error": {"type": ...}}` or the error object itself), as Anthropic
    and OpenAI send it, in an error answer or an error event of a stream, when it is one of `_RETRY_ERROR_TYPES`;
    None for any other type, or none. Read once per error: whether it may be retried and what its message says
    both follow from it."""
    body = getattr(exc, "body", None)
    found: Any = None
    if isinstance(body, Mapping):
        error = body.get("error")
        found = (error if isinstance(error, Mapping) else body).get("type")
    if not isinstance(found, str) or not found or found == "error":
        found = getattr(exc, "type", None)
    return found if isinstance(found, str) and found in _RETRY_ERROR_TYPES else None


def _headers_of(exc: BaseException) -> Mapping[str, str]:
    try:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    except Exception:  # httpx raises for a request-less response's attributes
        return {}
    return headers if isinstance(headers, Mapping) else {}


def _seconds(text: Any, scale: float = 1.0) -> float | None:
    try:
        value = float(text) * scale
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _retry_after_of(exc: BaseException) -> float | None:
    """The wait the provider asked for, in seconds: `retry-after-ms` / `retry-after` (seconds or an HTTP date:
    OpenAI, Anthropic, proxies), or Gemini's `RetryInfo.retryDelay` ("7s") in the error body."""
    headers = _headers_of(exc)
    found = _seconds(headers.get("retry-after-ms"), 0.001)
    if found is None and headers.get("retry-after") is not None:
        text = str(headers["retry-after"])
        found = _seconds(text)
        if found is None:
            from email.utils import parsedate_to_datetime

            try:
                found = max(0.0, parsedate_to_datetime(text).timestamp() - time.time())
            except (TypeError, ValueError, IndexError, OverflowError):
                found = None
    if found is None:
        details = getattr(exc, "details", None)  # google-genai: the error's JSON body
        error = details.get("error") if isinstance(details, Mapping) else None
        for item in (error.get("details") if isinstance(error, Mapping) else None) or ():
            delay = item.get("retryDelay") if isinstance(item, Mapping) else None
            if isinstance(delay, str) and delay.endswith("s"):
                found = _seconds(delay[:-1])
                break
    return found


def _retryable(exc: BaseException, status: int | None, reported: str | None) -> bool | None:
    """Whether sending the request again may help: the provider's own `x-should-retry` header when it sent one,
    else by status (a rate limit, a server error: yes; another refusal: no) or, without an error status, by the
    error type `reported` (`_retry_error_type_of`: an overload a stream reported: yes), by whether the connection
    failed (yes), or unknown."""
    said = str(_headers_of(exc).get("x-should-retry", "")).lower()
    if said in ("true", "false"):
        return said == "true"
    if status is not None:
        if status == 429 and getattr(exc, "code", None) == "insufficient_quota":  # OpenAI: out of credit, no wait helps
            return False
        return status in _RETRY_STATUSES or status >= 500
    if reported is not None:
        return True
    if any(cls.__name__ in _TRANSPORT_ERRORS for cls in type(exc).__mro__):
        return True
    return None


def _retry_advice(status: int | None, retry_after: float | None, retryable: bool | None, reported: str | None) -> str:
    """The sentence a ProviderError's message ends with: whether to send the request again, and when ("" when
    that is unknown)."""
    if status is not None:
        answered = f"HTTP {status}"
    elif reported is not None:
        answered = f"the provider reported {reported}"
    else:
        answered = "no answer came"
    if retryable:
        wait = (
            f"the provider asked to wait {retry_after:g} s before sending it again"
            if retry_after is not None
            else "send it again after a short wait"
        )
        return retry_sentence(True, answered, wait)
    if retryable is None:
        return ""
    todo = {
        401: "check the API key",
        403: "check that the API key may use this model and endpoint",
        404: "check the model name and the client's base_url",
    }.get(status or 0, "fix what the provider names in the request")
    return retry_sentence(False, f"{answered}: the provider refused this request as it is", todo)


def retry_sentence(retryable: bool, why: str, todo: str) -> str:
    """The sentence a ProviderError's message ends with, whoever raises it: `Retrying may help (why): todo.` (or
    `will not help`), joined to the message with `joined_sentences` (a quoted SDK message may end its own)."""
    return f"Retrying {'may help' if retryable else 'will not help'} ({why}): {todo}."


def unwrapped(fn: Any) -> Any:
    """What decorators that keep `__wrapped__` (functools.wraps) wrap; `fn` itself when its chain loops."""
    try:
        return inspect.unwrap(fn)
    except ValueError:
        return fn


def is_async_callable(fn: Any) -> bool:
    """True for coroutine functions, also behind decorators that hide it (the SDKs' `create`)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(unwrapped(fn))


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


def stream_cut_short(api: str, marker: str, note: str = "") -> ProviderError:
    """The error for a stream that ended before the event that says the provider finished the turn (`marker`).

    A proxy or gateway whose upstream failed mid-answer closes the stream cleanly: what came is a part of a turn,
    never an answer, and a call of it (whole as its arguments may look) must not run. `note` adds what else may
    end a stream so (it follows the likely cause, inside its parentheses).
    """
    return ProviderError(
        joined_sentences(
            f"the {api} stream was cut short: it ended before {marker}, so the turn is incomplete and none of its "
            f"tool calls ran (a proxy, a gateway or the connection dropped the rest{note})",
            retry_sentence(True, "no complete answer came", "send the request again"),
        ),
        retryable=True,
    )


def check_client(owner: str, client: Any, endpoint: str, expected: str, model: Any) -> None:
    """Refuse, when the model is made, a client without the SDK endpoint `owner` calls (`"chat.completions.create"`):
    another provider's client or the arguments swapped would otherwise fail at the first request, as a bare
    AttributeError from inside the adapter that names neither the model class nor what to pass.

    Only the endpoint is looked up (no SDK is imported): a wrapped or proxied client that has it passes.
    """
    target: Any = client
    for part in endpoint.split("."):
        try:
            target = getattr(target, part, None)
        except Exception:  # a property of a half-configured client that raises: no endpoint either
            target = None
        if target is None:
            break
    if not callable(target):
        said = "None" if client is None else f"{type(client).__module__}.{type(client).__qualname__}"
        raise ArgumentTypeError(
            f"{owner} needs {expected} as its first argument (a client with {endpoint}), got {said}; pass "
            f"{owner}(client, \"<model name>\")"
        )
    if not isinstance(model, str) or not model.strip():
        raise ArgumentTypeError(
            f"{owner} needs the model's name as its second argument, a non-empty string, got "
            f"{type(model).__name__} {model!r:.40}; pass {owner}(client, \"<model name>\")"
        )


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
    `opened`, when given, is handed the stream as it is opened (an awaitable one once awaited), however it
    is read, and returns the stream to read: where an adapter watches what the SDK reads and does not pass on.
    """

    create: Callable[..., Any]
    payload: Mapping[str, Any]
    assembler: StreamAssembler
    on_event: EventHandler | None
    provider: str
    modules: tuple[str, ...]
    opened: Callable[[Any], Any] | None = None

    def _open(self) -> Any:
        """`create(**payload)`, the first step of opening the stream (its answer may still need awaiting)."""
        return self.create(**self.payload)

    def _opened(self, stream: Any) -> Any:
        return stream if self.opened is None else self.opened(stream)

    def sync(self) -> ModelTurn:
        """Handlers run in the calling thread; an async client's stream is read on the shared client loop."""
        with translated(self.provider, self.modules), closing(_sync_chunks(self)) as chunks:

            def answer(step: StreamEvent | None) -> Any:
                return next(chunks, _END) if step is None else deliver_event(self.on_event, step)

            return drive(_streamed_turn(self.assembler), answer)

    async def asynchronous(self) -> ModelTurn:
        """Handlers run on the event loop (awaited when async); a sync client's stream is read in a
        worker thread, chunk by chunk, so the event loop keeps serving."""
        with translated(self.provider, self.modules):
            async with aclosing(_async_chunks(self)) as chunks:

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


def _sync_chunks(call: StreamCall) -> Generator[Any, None, None]:
    """The stream's chunks for sync code; an async client's are read on the shared client loop."""
    if is_async_callable(call.create):
        _refuse_inside_event_loop()
        return _client_loop_chunks(call._open, call._opened)
    stream = call._open()
    if inspect.isawaitable(stream) or hasattr(stream, "__aiter__"):  # an async stream in disguise
        _refuse_inside_event_loop(stream)
        return _client_loop_chunks(lambda: stream, call._opened)
    return _closing_iter(call._opened(stream))


def _async_chunks(call: StreamCall) -> AsyncGenerator[Any, None]:
    """The stream's chunks for asyncio; a sync client's are read in a worker thread."""
    if is_async_callable(call.create):
        return _awaited_chunks(call)
    return _thread_chunks(call)


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


async def _awaited_chunks(call: StreamCall) -> AsyncGenerator[Any, None]:
    """Chunks of an async client's stream (the SDK may hand it over behind an awaitable)."""
    stream = call._open()
    if inspect.isawaitable(stream):
        stream = await stream
    stream = call._opened(stream)
    try:
        async for chunk in stream:
            yield chunk
    finally:
        await _close_async(stream)


def _client_loop_chunks(
    open_stream: Callable[[], Any], opened: Callable[[Any], Any]
) -> Generator[Any, None, None]:
    """Chunks of an async stream read on the shared client loop, handed to this thread through a queue; `opened`
    as `StreamCall.opened`."""
    chunks: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

    async def pump() -> None:
        try:
            stream = open_stream()
            if inspect.isawaitable(stream):
                stream = await stream
            stream = opened(stream)
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


async def _thread_chunks(call: StreamCall) -> AsyncGenerator[Any, None]:
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
            stream = call._opened(call._open())
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
