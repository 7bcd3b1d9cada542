"""Streaming end to end: the loop streams each turn through the real `openai` / `anthropic` clients (SSE from
the local fake server) and must behave exactly as without streaming, while handlers see the text as it arrives."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fakes import ErrorTurn, FakeLLMServer, Turn
from fakes.e2e import (
    Calls,
    assert_provider_safe_names,
    assert_tools,
    assert_valid_request,
    call_found,
    catalog_tools,
    hits,
    implementations,
    make_model,
    search,
)

from toolsearch import Tool, ToolIndex, provider_safe_name
from toolsearch.loop import LoopConfig, LoopOutcome, LoopResult, ResultStatus, ToolSearchLoop, arun, run
from toolsearch.metatool import ToolSearchMetaTool
from toolsearch.providers import (
    AnthropicModel,
    ChatRequest,
    ModelTurn,
    OpenAIChatModel,
    OpenAIResponsesModel,
    ProviderError,
    StreamEvent,
    StreamingChatModel,
    Usage,
)
from toolsearch.session import SessionManager

FORMATS = ["openai_chat", "openai_responses", "anthropic"]
ANSWER = "Sunny in Paris, 24 degrees, light wind from the west: a fine day for a walk."


@pytest.fixture(scope="module")
def index(demo_tools: list[Tool]) -> ToolIndex:
    return ToolIndex.build(catalog_tools(demo_tools), backend="bm25")


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


def words(text: str) -> list[str]:
    """How the fake server cuts a text into SSE deltas."""
    return re.findall(r"\S+\s*|\s+", text)


def drive(
    kind: str, server: FakeLLMServer, index: ToolIndex, *, asynchronous: bool, session_id: str, **kwargs: Any
) -> LoopResult:
    """One streamed run, sync (`run`, sync client) or async (`arun`, async client)."""
    session = SessionManager(index).create(session_id)
    model = make_model(kind, server, asynchronous=asynchronous)
    if asynchronous:
        return asyncio.run(arun(model, "What's the weather in Paris?", session=session, **kwargs))
    return run(model, "What's the weather in Paris?", session=session, **kwargs)


def assert_streamed(server: FakeLLMServer, kind: str) -> None:
    for request in server.requests:
        assert request.stream is True
        if kind == "openai_chat":  # without it a streamed completion carries no usage
            assert request["stream_options"] == {"include_usage": True}
        assert_provider_safe_names(request)
        assert_valid_request(request)


# --- text deltas --------------------------------------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", FORMATS)
def test_text_deltas_arrive_in_order_and_make_the_answer(
    kind: str, asynchronous: bool, server: FakeLLMServer, index: ToolIndex
) -> None:
    server.enqueue(Turn(text=ANSWER))
    pieces: list[str] = []
    events: list[StreamEvent] = []

    if asynchronous:

        async def on_text(piece: str) -> None:  # an async handler is awaited under arun
            await asyncio.sleep(0)
            pieces.append(piece)

        result = drive(
            kind, server, index, asynchronous=True, session_id="text", on_text=on_text, on_event=events.append
        )
    else:
        result = drive(
            kind, server, index, asynchronous=False, session_id="text", on_text=pieces.append, on_event=events.append
        )

    assert (result.outcome, result.output) == (LoopOutcome.COMPLETED, ANSWER)
    assert pieces == words(ANSWER) and len(pieces) > 5  # one call per SSE delta, in the order sent
    assert "".join(pieces) == result.output == result.messages[-1].content
    assert [(e.type, e.text, e.iteration) for e in events] == [("text_delta", p, 1) for p in pieces]
    assert_streamed(server, kind)


@pytest.mark.parametrize("kind", FORMATS)
def test_text_before_tool_calls_and_across_turns(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    """A turn with text and a call streams both; each event carries its request number."""
    server.enqueue(
        Turn(text="Let me look that up. ", tool_calls=[("tool_search", {"query": "weather forecast"}, "call_s1")]),
        Turn(text="Found it."),
    )
    events: list[StreamEvent] = []
    result = drive(kind, server, index, asynchronous=False, session_id="mixed", on_event=events.append)
    assert result.output == "Found it."
    assert [(e.type, e.text or e.name, e.iteration) for e in events] == [
        ("text_delta", "Let ", 1),
        ("text_delta", "me ", 1),
        ("text_delta", "look ", 1),
        ("text_delta", "that ", 1),
        ("text_delta", "up. ", 1),
        ("tool_call_start", "tool_search", 1),
        ("text_delta", "Found ", 2),
        ("text_delta", "it.", 2),
    ]
    assert events[5].call_id == "call_s1"
    assert result.messages[1].content == "Let me look that up. "
    assert [s.query for s in result.searches] == ["weather forecast"]


# --- tool-search semantics in a streamed turn ---------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", FORMATS)
def test_streamed_parallel_searches_and_a_found_tool_call(
    kind: str, asynchronous: bool, server: FakeLLMServer, index: ToolIndex
) -> None:
    """Two tool_search calls and calls to what they find, all in one streamed turn: every call is
    assembled from its argument deltas, both searches run, the found tools run in that same turn,
    and the next request carries exactly the discovered tools."""
    catalog = index.catalog
    assert hits(index, "current weather", 1) == ["weather_get_current"]
    assert hits(index, "factorial", 1) == ["math.factorial"]
    alias = provider_safe_name("math.factorial")
    calls = Calls()
    server.enqueue(
        Turn(
            tool_calls=[
                ("tool_search", {"query": "current weather", "max_results": 1}, "call_a"),
                ("tool_search", {"query": "factorial", "max_results": 1}, "call_b"),
                ("weather_get_current", {"location": "Oslo", "units": "imperial"}, "call_c"),
                (alias, {"n": 6}, "call_d"),
            ]
        ),
        call_found(("math.factorial", {"n": 3}), text="One more. "),
        Turn(text="Oslo is clear; 6! = 720."),
    )
    events: list[StreamEvent] = []
    result = drive(
        kind,
        server,
        index,
        asynchronous=asynchronous,
        session_id="parallel",
        functions=implementations(calls),
        on_event=events.append,
    )

    assert (result.outcome, result.output) == (LoopOutcome.COMPLETED, "Oslo is clear; 6! = 720.")
    starts = [(e.call_id, e.name, e.kind, e.iteration) for e in events if e.type == "tool_call_start"]
    assert starts[:4] == [
        ("call_a", "tool_search", "function", 1),
        ("call_b", "tool_search", "function", 1),
        ("call_c", "weather_get_current", "function", 1),
        # found by call_b in this same turn: the session cannot know the alias before that search runs
        ("call_d", alias, "function", 1),
    ]
    # once found, the alias resolves to the catalog name
    assert [(e.name, e.iteration) for e in events if e.type == "tool_call_start"][4:] == [("math.factorial", 2)]
    # arguments rebuilt from the deltas; the dotted tool found in this turn ran under its catalog name
    assert [(r.call.id, r.call.name, dict(r.call.arguments)) for r in result.tool_results[:4]] == [
        ("call_a", "tool_search", {"query": "current weather", "max_results": 1}),
        ("call_b", "tool_search", {"query": "factorial", "max_results": 1}),
        ("call_c", "weather_get_current", {"location": "Oslo", "units": "imperial"}),
        ("call_d", "math.factorial", {"n": 6}),
    ]
    assert [(s.query, s.names, s.iteration) for s in result.searches] == [
        ("current weather", ["weather_get_current"], 1),
        ("factorial", ["math.factorial"], 1),
    ]
    assert [r.status for r in result.tool_results[:4]] == [ResultStatus.SEARCH] * 2 + [ResultStatus.OK] * 2
    assert calls.log == [
        ("weather_get_current", {"location": "Oslo", "units": "imperial"}),
        ("math.factorial", {"n": 6}),
        ("math.factorial", {"n": 3}),
    ]

    first, second, third = server.requests
    meta = ToolSearchMetaTool().definition(SessionManager(index).create("definition"))
    assert_tools(first, search=meta)
    discovered = [catalog["weather_get_current"], catalog["math.factorial"]]
    assert_tools(second, search=meta, discovered=discovered)
    assert_tools(third, search=meta, discovered=discovered)
    assert second.tool_names == ["tool_search", "weather_get_current", alias]
    results = second.tool_results()
    assert [r.call_id for r in results] == ["call_a", "call_b", "call_c", "call_d"]
    assert "weather_get_current" in results[0].text and alias in results[1].text
    assert (results[2].text, results[3].text) == ("Oslo: 21C, clear", "720")
    assert [c.name for c in second.history_calls()] == ["tool_search", "tool_search", "weather_get_current", alias]
    assert third.tool_results()[0].text == "6"
    assert_streamed(server, kind)


# --- usage read from the stream -----------------------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", FORMATS)
def test_usage_is_read_from_the_stream(kind: str, asynchronous: bool, server: FakeLLMServer, index: ToolIndex) -> None:
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "weather"})], usage=(1234, 56)),
        Turn(text="Done.", usage=(2345, 7)),
    )
    result = drive(kind, server, index, asynchronous=asynchronous, session_id="usage", stream=True)
    assert result.output == "Done."
    # Anthropic's usage says what it wrote to the cache (0 here); the OpenAI formats' says nothing of writes.
    written = 0 if kind == "anthropic" else None
    assert [r.usage for r in result.requests] == [
        Usage(input_tokens=1234, output_tokens=56, total_tokens=1290, cached_input_tokens=0,
              cache_write_tokens=written),
        Usage(input_tokens=2345, output_tokens=7, total_tokens=2352, cached_input_tokens=0,
              cache_write_tokens=written),
    ]
    expected_stop = {
        "openai_chat": ["tool_calls", "stop"],
        "openai_responses": ["completed", "completed"],
        "anthropic": ["tool_use", "end_turn"],
    }[kind]
    assert [r.stop_reason for r in result.requests] == expected_stop
    assert_streamed(server, kind)


# --- streaming changes nothing but the transport ------------------------------------------------


def _script() -> list[Any]:
    return [
        Turn(
            text="Searching. ",
            tool_calls=[
                ("tool_search", {"query": "weather forecast", "max_results": 2}, "c1"),
                ("tool_search", {"query": "factorial", "max_results": 1}, "c2"),
                (provider_safe_name("math.factorial"), {"n": 5}, "c3"),  # found by c2, called in the same turn
            ],
        ),
        Turn(tool_calls=[("weather_get_forecast", {"location": "Paris", "days": 2}, "c4")]),
        Turn(text=ANSWER),
    ]


@pytest.mark.parametrize("kind", FORMATS)
def test_streamed_run_equals_the_plain_run(kind: str, index: ToolIndex) -> None:
    """Same script with and without streaming: same history, searches, results and tools on the wire."""
    runs = []
    for stream in (False, True):
        with FakeLLMServer(*_script()) as server:
            result = drive(
                kind,
                server,
                index,
                asynchronous=False,
                session_id=f"same-{stream}",
                functions=implementations(Calls()),
                stream=stream,
            )
            assert [r.stream for r in server.requests] == [stream] * 3
            wire = [(r.tools, r.messages) for r in server.requests]
            runs.append((result, wire))
    (plain, plain_wire), (streamed, streamed_wire) = runs
    assert streamed.output == plain.output == ANSWER
    assert [m.to_dict() for m in streamed.messages] == [m.to_dict() for m in plain.messages]
    assert [s.names for s in streamed.searches] == [s.names for s in plain.searches]
    assert [(r.status, r.content) for r in streamed.tool_results] == [(r.status, r.content) for r in plain.tool_results]
    assert [r.tool_names for r in streamed.requests] == [r.tool_names for r in plain.requests]
    assert streamed_wire == plain_wire  # identical request bodies apart from `stream`
    assert [r.status for r in plain.tool_results] == [ResultStatus.SEARCH] * 2 + [ResultStatus.OK] * 2
    assert plain.tool_results[2].content == "120"


# --- native tool search, streamed ---------------------------------------------------------------


def test_responses_native_tool_search_call_streamed(server: FakeLLMServer, index: ToolIndex) -> None:
    found = hits(index, "weather forecast", 2)
    server.enqueue(
        search("weather forecast", max_results=2),
        call_found(("weather_get_forecast", {"location": "Bergen", "days": 1})),
        "Rainy.",
    )
    events: list[StreamEvent] = []
    result = drive(
        "openai_responses",
        server,
        index,
        asynchronous=False,
        session_id="native-responses",
        functions=implementations(Calls()),
        tool_search_mode="native",
        on_event=events.append,
    )
    assert result.output == "Rainy."
    [search_start, call_start] = [e for e in events if e.type == "tool_call_start"]
    assert (search_start.name, search_start.kind, search_start.iteration) == ("tool_search", "tool_search", 1)
    assert (call_start.name, call_start.kind) == ("weather_get_forecast", "function")
    second = server.requests[1]
    assert second["input"][1]["type"] == "tool_search_call"
    assert second["input"][1]["call_id"] == search_start.call_id
    assert [r.references for r in second.tool_results()] == [tuple(found)]
    assert [s.names for s in result.searches] == [found]
    assert_streamed(server, "openai_responses")


def test_anthropic_native_tool_references_streamed(server: FakeLLMServer, index: ToolIndex) -> None:
    catalog = index.catalog
    found = hits(index, "weather forecast", 2)
    server.enqueue(
        search("weather forecast", max_results=2),
        call_found(("weather_get_forecast", {"location": "Bergen", "days": 1})),
        "Rainy.",
    )
    result = drive(
        "anthropic",
        server,
        index,
        asynchronous=True,
        session_id="native-anthropic",
        functions=implementations(Calls()),
        tool_search_mode="native",
        stream=True,
    )
    assert result.output == "Rainy."
    second = server.requests[1]
    assert [r.references for r in second.tool_results()] == [tuple(provider_safe_name(n) for n in found)]
    meta = ToolSearchMetaTool().definition(SessionManager(index).create("definition"))
    assert_tools(second, search=meta, deferred=[catalog[n] for n in found])
    assert_streamed(server, "anthropic")


# --- clients and threads ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", FORMATS)
async def test_sync_client_under_arun_delivers_on_the_event_loop(
    kind: str, server: FakeLLMServer, index: ToolIndex
) -> None:
    """A sync client's stream is read in a worker thread; handlers still run on the event loop."""
    server.enqueue(search("factorial"), call_found(("math.factorial", {"n": 5})), ANSWER)
    loop_thread = threading.get_ident()
    seen_threads: set[int] = set()
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        seen_threads.add(threading.get_ident())
        pieces.append(piece)

    loop = ToolSearchLoop(make_model(kind, server), SessionManager(index), implementations(Calls()))
    result = await loop.arun("5!?", session_id="bridge", on_text=on_text)
    assert result.output == ANSWER == "".join(pieces)
    assert seen_threads == {loop_thread}
    assert server.requests[2].tool_results()[0].text == "120"
    assert_streamed(server, kind)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("kind", FORMATS)
def test_async_client_under_sync_run(kind: str, stream: bool, server: FakeLLMServer, index: ToolIndex) -> None:
    """An async client driven by `run` over several requests (its pooled connection outlives each one)."""
    server.enqueue(search("factorial"), search("weather"), ANSWER)
    pieces: list[str] = []
    caller = threading.get_ident()
    seen_threads: set[int] = set()

    def on_text(piece: str) -> None:
        seen_threads.add(threading.get_ident())
        pieces.append(piece)

    model = make_model(kind, server, asynchronous=True)
    loop = ToolSearchLoop(model, SessionManager(index), config=LoopConfig(stream=stream))
    for n in range(2):  # a second run on the same client reuses its connections
        if n:
            server.enqueue(search("factorial"), search("weather"), ANSWER)
        result = loop.run("5!?", session_id=f"async-client-{n}", on_text=on_text if stream else None)
        assert result.output == ANSWER
        assert [s.query for s in result.searches] == ["factorial", "weather"]
    assert [r.stream for r in server.requests] == [stream] * 6
    if stream:
        assert "".join(pieces) == ANSWER * 2
        assert seen_threads == {caller}  # handlers run in the thread that called run()


# --- handlers and errors ------------------------------------------------------------------------


def test_async_handler_is_refused_by_sync_run(server: FakeLLMServer, index: ToolIndex) -> None:
    async def on_text(piece: str) -> None:
        pass

    with pytest.raises(TypeError, match="arun"):
        drive("openai_chat", server, index, asynchronous=False, session_id="refused", on_text=on_text)
    assert server.requests == []  # refused before anything was sent


class HandlerFailed(Exception):
    pass


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", FORMATS)
def test_a_failing_handler_stops_the_run_with_its_own_error(
    kind: str, asynchronous: bool, server: FakeLLMServer, index: ToolIndex
) -> None:
    server.enqueue(Turn(text=ANSWER))
    pieces: list[str] = []

    def on_text(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) == 3:
            raise HandlerFailed("the UI went away")

    with pytest.raises(HandlerFailed, match="the UI went away"):
        drive(kind, server, index, asynchronous=asynchronous, session_id="failing", on_text=on_text)
    assert pieces == words(ANSWER)[:3]  # delivered while streaming, and nothing after the failure


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", FORMATS)
def test_http_error_on_a_streamed_request_is_a_provider_error(
    kind: str, asynchronous: bool, server: FakeLLMServer, index: ToolIndex
) -> None:
    server.enqueue(search("weather"), ErrorTurn(429, "Rate limit reached"))
    with pytest.raises(ProviderError, match="Rate limit reached") as caught:
        drive(kind, server, index, asynchronous=asynchronous, session_id="http-error", on_text=lambda piece: None)
    assert type(caught.value.__cause__).__name__ == "RateLimitError"
    assert len(server.requests) == 2 and all(r.stream for r in server.requests)


def test_broken_streamed_arguments_are_an_instructive_result(server: FakeLLMServer, index: ToolIndex) -> None:
    """Argument deltas that never form a JSON object: the call is answered, not run, not crashed on."""
    calls = Calls()
    server.enqueue(
        Turn(tool_calls=[("weather_get_forecast", '{"location": "Rome",')]),
        "Sorry.",
    )
    session = SessionManager(index).create("broken", pinned=["weather_get_forecast"])
    result = run(
        make_model("openai_chat", server), "Rome?", session=session, functions=implementations(calls), stream=True
    )
    assert result.output == "Sorry."
    [bad] = result.tool_results
    assert bad.status == ResultStatus.INVALID_ARGUMENTS and "not valid JSON" in bad.content
    assert calls.log == []


@pytest.mark.parametrize("model_class", [OpenAIChatModel, OpenAIResponsesModel, AnthropicModel])
def test_stream_is_not_a_model_option(model_class: type[Any], server: FakeLLMServer) -> None:
    with pytest.raises(ValueError, match="stream"):
        model_class(server.openai(), "m", stream=True)


# --- models without streaming methods -----------------------------------------------------------


class PlainModel:
    """A user's own ChatModel with only the three required methods (here over the real Chat client)."""

    format = "openai_chat"

    def __init__(self, inner: OpenAIChatModel) -> None:
        self.inner = inner

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        return self.inner.payload(request)

    def complete(self, request: ChatRequest) -> ModelTurn:
        return self.inner.complete(request)

    async def acomplete(self, request: ChatRequest) -> ModelTurn:
        return await self.inner.acomplete(request)


def test_a_model_without_streaming_replays_its_turn_to_the_handlers(server: FakeLLMServer, index: ToolIndex) -> None:
    model = PlainModel(make_model("openai_chat", server))
    assert not isinstance(model, StreamingChatModel)
    assert isinstance(make_model("openai_chat", server), StreamingChatModel)
    server.enqueue(Turn(text="Looking. ", tool_calls=[("tool_search", {"query": "weather"}, "c1")]), ANSWER)
    events: list[StreamEvent] = []
    result = run(model, "weather?", session=SessionManager(index).create("plain"), on_event=events.append)
    assert result.output == ANSWER
    assert [(e.type, e.text or e.name, e.iteration) for e in events] == [
        ("text_delta", "Looking. ", 1),
        ("tool_call_start", "tool_search", 1),
        ("text_delta", ANSWER, 2),
    ]
    assert [r.stream for r in server.requests] == [False, False]
    assert json.loads(server.requests[0].raw).get("stream") is None
