"""Sync and async are one run: the same scripted conversation, through `run` and `arun` (and
`ToolSearchLoop.run` / `arun`, `model.stream` / `astream`), through the real `openai` / `anthropic`
SDK clients (sync for one side, async for the other) against the strict fake server, must send the
same request bodies byte for byte and end the same way: the same result, usage, streamed events,
augmented values, tracing spans and counters, and the same error when it fails (a failing tool, a
provider error between turns, a connection dropped mid-stream, the iteration limit).

Each side gets a fresh server, session manager and telemetry, so ids and token counts start equal.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pytest
from fakes import ErrorTurn, FakeLLMServer, Turn
from fakes.augment import Consumer, Why
from fakes.e2e import Calls, call_found, catalog_tools, implementations, search
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from toolsearch import Tool, ToolIndex, provider_safe_name, tracing
from toolsearch.loop import LoopOutcome, ToolSearchLoop, arun, run
from toolsearch.providers import (
    AnthropicModel,
    ChatRequest,
    Message,
    OpenAIChatModel,
    OpenAIResponsesModel,
    StreamEvent,
)
from toolsearch.session import SessionManager

FORMATS = ["openai_chat", "openai_responses", "anthropic"]
ANSWER = "Sunny in Paris for the next two days, with a light wind from the west."
PROMPT = "What's the weather in Paris for two days?"
Script = Callable[[], list[Any]]  # a fresh list of scripted turns for each side
_TIMING = {"latency_ms", "elapsed_ms"}  # wall-clock figures: the only fields the two sides may differ in
_SPAN_TIMING = {"toolsearch.search.latency_ms"}


@pytest.fixture(scope="module")
def index(demo_tools: list[Tool]) -> ToolIndex:
    return ToolIndex.build(catalog_tools(demo_tools), backend="bm25")


# --- a connection that drops mid-stream -------------------------------------------------------


class _Dropped:
    """Where a dropped connection cuts a response: request number `request` ends, without its closing
    chunk, after its first `events` SSE events (a real transport error, raised by the SDK's HTTP library:
    `httpx` for openai, `httpx2` for anthropic)."""

    def __init__(self, request: int, events: int) -> None:
        self.request = request
        self.events = events
        self.seen = 0

    def transport(self, http: ModuleType, *, asynchronous: bool) -> Any:
        """A transport of `http` (the SDK's HTTP library) that forwards to the real one and cuts."""
        dropped = self

        class Cut(http.SyncByteStream, http.AsyncByteStream):  # type: ignore[misc, name-defined]
            def __init__(self, kept: bytes) -> None:
                self.kept = kept

            def __iter__(self) -> Iterator[bytes]:
                yield self.kept
                raise http.RemoteProtocolError(_DROPPED)

            async def __aiter__(self) -> AsyncIterator[bytes]:
                yield self.kept
                raise http.RemoteProtocolError(_DROPPED)

        def cut(response: Any, body: bytes) -> Any:
            dropped.seen += 1
            if dropped.seen != dropped.request:
                return http.Response(response.status_code, headers=response.headers, content=body)
            kept = b"".join(part + b"\n\n" for part in body.split(b"\n\n")[: dropped.events])
            return http.Response(response.status_code, headers=response.headers, stream=Cut(kept))

        class Sync(http.BaseTransport):  # type: ignore[misc, name-defined]
            inner = http.HTTPTransport()

            def handle_request(self, request: Any) -> Any:
                response = self.inner.handle_request(request)
                return cut(response, response.read())

        class Async(http.AsyncBaseTransport):  # type: ignore[misc, name-defined]
            inner = http.AsyncHTTPTransport()

            async def handle_async_request(self, request: Any) -> Any:
                response = await self.inner.handle_async_request(request)
                return cut(response, await response.aread())

        return Async() if asynchronous else Sync()


_DROPPED = "peer closed connection without sending complete message body (incomplete chunked read)"


def sdk_model(kind: str, server: FakeLLMServer, *, asynchronous: bool, dropped: _Dropped | None = None) -> Any:
    """A provider model over the real SDK client: sync for the sync side, async for the async one."""
    options: dict[str, Any] = {}
    if dropped is not None:
        http = importlib.import_module("httpx2" if kind == "anthropic" else "httpx")  # each SDK's HTTP library
        transport = dropped.transport(http, asynchronous=asynchronous)
        options["http_client"] = (http.AsyncClient if asynchronous else http.Client)(transport=transport)
    if kind == "anthropic":
        client = server.async_anthropic(**options) if asynchronous else server.anthropic(**options)
        return AnthropicModel(client, "claude-test", max_tokens=512)
    client = server.async_openai(**options) if asynchronous else server.openai(**options)
    return (OpenAIChatModel if kind == "openai_chat" else OpenAIResponsesModel)(client, "gpt-test")


# --- one side of a pair -----------------------------------------------------------------------


@dataclass
class Side:
    """Everything one side of a pair produced, with the wall-clock figures left out."""

    requests: list[tuple[str, bool, bytes]] = field(default_factory=list)  # path, streamed, body as sent
    result: Any = None
    error: tuple[str, str, tuple[str, ...]] | None = None  # type, message, types of the chained causes
    events: list[tuple[Any, ...]] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    tools_run: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    augmented: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    spans: list[tuple[Any, ...]] = field(default_factory=list)
    counters: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)


def _causes(exc: BaseException) -> tuple[str, ...]:
    chain = []
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        chain.append(type(exc).__name__)
    return tuple(chain)


def _unported(text: str) -> str:
    """`text` without the fake server's port: each side talks to a server of its own, and some SDKs name the
    address in a connection error ("Connection to 127.0.0.1:45659 failed: ...")."""
    return re.sub(r"(127\.0\.0\.1|localhost):\d+", r"\1:<port>", text)


def _untimed(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _untimed(v) for k, v in value.items() if k not in _TIMING}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


class _Telemetry:
    """A tracer and a meter provider of one side's own (restored after), and what they recorded."""

    def __enter__(self) -> _Telemetry:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.previous = tracing.configure(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider)
        return self

    def __exit__(self, *exc: object) -> None:
        tracing.restore(self.previous)
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    def spans(self) -> list[tuple[Any, ...]]:
        spans = self.exporter.get_finished_spans()
        names = {s.context.span_id: s.name for s in spans}
        return [
            (
                s.name,
                s.kind.name,
                s.status.status_code.name,
                names.get(s.parent.span_id) if s.parent else None,
                sorted((k, str(v)) for k, v in (s.attributes or {}).items() if k not in _SPAN_TIMING),
            )
            for s in spans
        ]

    def counters(self) -> dict[str, list[tuple[Any, ...]]]:
        data = self.reader.get_metrics_data()
        out: dict[str, list[tuple[Any, ...]]] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    points = out.setdefault(metric.name, [])
                    points += [(sorted(p.attributes.items()), p.value) for p in metric.data.data_points]
        return {name: sorted(points) for name, points in out.items()}


def side(
    kind: str,
    index: ToolIndex,
    script: Script,
    *,
    asynchronous: bool,
    streaming: bool = False,
    via_loop: bool = False,
    dropped: Callable[[], _Dropped] | None = None,
    pinned: tuple[str, ...] = (),
    **settings: Any,
) -> Side:
    """One run of the conversation: `run` (sync client, sync handlers) or `arun` (async client, async
    text handler), through the module functions or a ToolSearchLoop."""
    out = Side()
    calls, consumer = Calls(), Consumer()

    def on_event(event: StreamEvent) -> None:
        out.events.append((event.type, event.text, event.call_id, event.name, event.kind, event.iteration))

    def on_text(piece: str) -> None:
        out.pieces.append(piece)

    async def on_text_async(piece: str) -> None:
        await asyncio.sleep(0)
        out.pieces.append(piece)

    with _Telemetry() as telemetry, FakeLLMServer(*script()) as server:
        sessions = SessionManager(index)
        model = sdk_model(kind, server, asynchronous=asynchronous, dropped=dropped() if dropped else None)
        handlers: dict[str, Any] = {}
        if streaming:
            handlers = {"on_event": on_event, "on_text": on_text_async if asynchronous else on_text}
        options: dict[str, Any] = {"functions": implementations(calls), "augment": Why, "on_augment": consumer}
        try:
            if via_loop:
                loop = ToolSearchLoop(model, sessions, **options, system="Be brief.", **settings)
                arguments = {"session_id": "parity", "pinned": pinned, **handlers}
                out.result = (
                    asyncio.run(loop.arun(PROMPT, **arguments)) if asynchronous else loop.run(PROMPT, **arguments)
                )
            else:
                session = sessions.create("parity", pinned=pinned)
                arguments = {"session": session, **options, **handlers, "system": "Be brief.", **settings}
                out.result = (
                    asyncio.run(arun(model, PROMPT, **arguments)) if asynchronous else run(model, PROMPT, **arguments)
                )
        except Exception as exc:
            out.error = (type(exc).__name__, _unported(str(exc)), _causes(exc))
        out.requests = [(r.path, r.stream, r.raw) for r in server.requests]
    if out.result is not None:
        out.result = _untimed(out.result.to_dict())
    out.tools_run, out.augmented = calls.log, consumer.got
    out.spans, out.counters = telemetry.spans(), telemetry.counters()
    return out


def assert_parity(sync: Side, asynchronous: Side) -> None:
    assert sync.requests, "the conversation sent nothing"
    assert [r[:2] for r in asynchronous.requests] == [r[:2] for r in sync.requests]
    for number, (mine, theirs) in enumerate(zip(sync.requests, asynchronous.requests, strict=True), 1):
        assert theirs[2] == mine[2], f"request {number} was sent with other bytes"
    assert asynchronous.result == sync.result
    assert asynchronous.error == sync.error
    assert asynchronous.events == sync.events
    assert asynchronous.pieces == sync.pieces
    assert asynchronous.tools_run == sync.tools_run
    assert asynchronous.augmented == sync.augmented
    assert asynchronous.spans == sync.spans
    assert asynchronous.counters == sync.counters


def both(kind: str, index: ToolIndex, script: Script, **options: Any) -> tuple[Side, Side]:
    sync = side(kind, index, script, asynchronous=False, **options)
    asynchronous = side(kind, index, script, asynchronous=True, **options)
    assert_parity(sync, asynchronous)
    return sync, asynchronous


# --- the conversations ------------------------------------------------------------------------

WHY = {"call_reason": "The user asked for the weather."}


def discovery() -> list[Any]:
    """search → the found tool called (with an augmented reason) → answered."""
    return [
        search("weather forecast", max_results=2),
        call_found(("weather_get_forecast", {"location": "Paris", "days": 2, **WHY})),
        Turn(text=ANSWER),
    ]


def failing_tool() -> list[Any]:
    """Parallel searches, then a tool that raises beside one that works, then an answer."""
    return [
        search("factorial", "weather forecast", max_results=2),
        call_found(
            ("email_send_message", {"to": ["a@b.c"], "subject": "s", "body": "b", **WHY}),
            ("math.factorial", {"n": 5, **WHY}),
            text="Sending and computing.",
        ),
        Turn(text="The mail failed; 5! is 120."),
    ]


def never_done() -> list[Any]:
    """A model that searches on and on: the run stops at its iteration limit."""
    return [search("weather"), search("factorial"), search("email")]


def error_between_turns() -> list[Any]:
    return [search("weather forecast"), ErrorTurn(429, "Rate limit reached")]


def dropped_answer() -> list[Any]:
    return [search("weather forecast", max_results=2), Turn(text=ANSWER)]


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("kind", FORMATS)
def test_a_discovery_conversation_is_the_same_sync_and_async(kind: str, streaming: bool, index: ToolIndex) -> None:
    sync, _ = both(kind, index, discovery, streaming=streaming)
    assert sync.result["outcome"] == LoopOutcome.COMPLETED and sync.result["output"] == ANSWER
    assert sync.tools_run == [("weather_get_forecast", {"location": "Paris", "days": 2, "units": "metric"})]
    assert sync.augmented == [("weather_get_forecast", WHY, sync.result["tool_results"][1]["call"]["id"])]
    assert all(r["usage"]["input_tokens"] for r in sync.result["requests"])  # the provider's usage, parsed
    names = {s[0] for s in sync.spans}
    assert names >= {"invoke_agent toolsearch", "retrieval", "execute_tool weather_get_forecast"}
    assert "augment weather_get_forecast" in names
    if streaming:
        assert "".join(sync.pieces) == ANSWER and len(sync.pieces) > 5
        assert [e[0] for e in sync.events if e[5] == 2] == ["tool_call_start"]
    else:
        assert sync.events == sync.pieces == []


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("kind", FORMATS)
def test_a_failing_tool_is_the_same_sync_and_async(kind: str, streaming: bool, index: ToolIndex) -> None:
    sync, _ = both(kind, index, failing_tool, streaming=streaming, pinned=("email_send_message",))
    statuses = {r["call"]["name"]: (r["status"], r["content"]) for r in sync.result["tool_results"]}
    shown = provider_safe_name("email_send_message")
    failed = f"Tool {shown!r} failed: ConnectionError: SMTP server refused the connection"
    assert statuses["email_send_message"] == ("error", failed)
    assert statuses["math.factorial"] == ("ok", "120")
    assert json.loads(sync.requests[2][2])  # the failure went back to the model
    assert b"SMTP server refused the connection" in sync.requests[2][2]


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("kind", FORMATS)
def test_the_iteration_limit_is_the_same_sync_and_async(kind: str, streaming: bool, index: ToolIndex) -> None:
    sync, _ = both(kind, index, never_done, streaming=streaming, max_iterations=2)
    assert sync.result["outcome"] == LoopOutcome.MAX_ITERATIONS
    assert len(sync.requests) == 2 and [s["query"] for s in sync.result["searches"]] == ["weather", "factorial"]


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("kind", FORMATS)
def test_a_provider_error_between_turns_is_the_same_sync_and_async(
    kind: str, streaming: bool, index: ToolIndex
) -> None:
    sync, _ = both(kind, index, error_between_turns, streaming=streaming)
    assert sync.error is not None and sync.error[0] == "ProviderError" and "Rate limit reached" in sync.error[1]
    assert sync.error[2][0] == "RateLimitError" and sync.result is None
    invoke = [s for s in sync.spans if s[0] == "invoke_agent toolsearch"]
    assert [s[2] for s in invoke] == ["ERROR"]  # the run's span records the failure, in both drivers


@pytest.mark.parametrize("kind", FORMATS)
def test_a_connection_dropped_mid_stream_is_the_same_sync_and_async(kind: str, index: ToolIndex) -> None:
    """The answer's stream breaks after a few events: the handlers got those, then the run fails with
    the transport's error as a ProviderError."""
    sync, _ = both(kind, index, dropped_answer, streaming=True, dropped=lambda: _Dropped(request=2, events=6))
    assert sync.error is not None and sync.error[0] == "ProviderError"
    assert "RemoteProtocolError" in sync.error[2]  # the transport's error (the openai SDK wraps it in its own)
    assert sync.pieces and "".join(sync.pieces) != ANSWER and ANSWER.startswith("".join(sync.pieces))


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("kind", ["openai_chat", "anthropic"])
def test_a_reusable_loop_is_the_same_sync_and_async(kind: str, streaming: bool, index: ToolIndex) -> None:
    sync, _ = both(kind, index, discovery, streaming=streaming, via_loop=True)
    assert sync.result["output"] == ANSWER and sync.result["session_id"] == "parity"


# --- provider streaming alone: every client / driver combination --------------------------------


@pytest.mark.parametrize("kind", FORMATS)
def test_a_streamed_turn_is_the_same_from_every_driver_and_client(kind: str) -> None:
    """`stream` and `astream`, each with a sync and an async client (the cross cases read the stream
    on the shared client loop or in a worker thread), give the same events and turn, and send the
    same bytes, as `complete` gives the same turn."""
    weather = Tool("weather_get_forecast", "Weather forecast for a city.", {"type": "object", "properties": {}})
    request = ChatRequest(messages=(Message.user(PROMPT),), system="Be brief.", pinned=(weather,))
    script = [Turn(text=ANSWER, tool_calls=[("weather_get_forecast", {"city": "Paris"}, "call_w1")])]

    def one(client_async: bool, driver_async: bool, streamed: bool = True) -> tuple[Any, ...]:
        events: list[StreamEvent] = []
        with FakeLLMServer(*script) as server:
            model = sdk_model(kind, server, asynchronous=client_async)
            if not streamed:
                turn = asyncio.run(model.acomplete(request)) if driver_async else model.complete(request)
            elif driver_async:
                turn = asyncio.run(model.astream(request, events.append))
            else:
                turn = model.stream(request, events.append)
            [sent] = server.requests
        return events, turn.message.to_dict(), turn.usage, turn.stop_reason, sent.raw

    sync_sync = one(client_async=False, driver_async=False)
    assert [e.type for e in sync_sync[0]][-1] == "tool_call_start" and sync_sync[1]["content"] == ANSWER
    for client_async, driver_async in ((False, True), (True, False), (True, True)):
        assert one(client_async, driver_async) == sync_sync, (client_async, driver_async)
    completed = one(client_async=False, driver_async=False, streamed=False)
    assert completed[1:4] == one(client_async=True, driver_async=True, streamed=False)[1:4]
    assert completed[1] == sync_sync[1]
