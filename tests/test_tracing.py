"""OpenTelemetry: the spans and counters of one agent task, of a search, and of a gateway request.

Each test gets its own SDK providers through `tracing.configure` (restored after), so nothing is
set globally in this process: the API lets a process set its global provider only once. The
gateway test needs the `mcp` SDK's own spans, which use the global provider, so the gateway (and
the upstream server behind it) run as real processes whose global provider a `sitecustomize.py`
sets, exporting each span as one JSON line to a file.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeLLMServer, Turn
from fakes.e2e import Calls, call_found, catalog_tools, implementations, make_model, search
from mcp import Client
from mcp_servers import http_gateway, toy, wait_until, write_config
from mcp_servers.clients import connect, text
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from span_export import exported, tracing_children

from toolsearch import InvalidQueryError, Tool, ToolIndex, tracing
from toolsearch.learning import LearningIndex
from toolsearch.loop import LoopOutcome, arun, run
from toolsearch.metatool import ToolSearchMetaTool
from toolsearch.providers import ChatRequest, Message, ModelTurn, ScriptedModel
from toolsearch.providers import call as scripted_call
from toolsearch.providers import search as scripted_search
from toolsearch.session import SessionManager
from toolsearch.usage import UsageLog, UsageRecorder


class Telemetry:
    """A tracer and a meter provider of this test's own, with what they recorded."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]

    def counts(self, metric: str) -> dict[str, int]:
        """Counter totals by gen_ai.tool.name."""
        data = self.reader.get_metrics_data()
        totals: dict[str, int] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for found in scope.metrics:
                    if found.name == metric:
                        for point in found.data.data_points:
                            name = str(point.attributes["gen_ai.tool.name"])
                            totals[name] = totals.get(name, 0) + int(point.value)
        return totals


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    recorded = Telemetry()
    previous = tracing.configure(tracer_provider=recorded.tracer_provider, meter_provider=recorded.meter_provider)
    try:
        yield recorded
    finally:
        tracing.restore(previous)
        recorded.tracer_provider.shutdown()
        recorded.meter_provider.shutdown()


@pytest.fixture(scope="module")
def index(demo_tools: list[Tool]) -> ToolIndex:
    return ToolIndex.build(catalog_tools(demo_tools), backend="bm25")


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_one_agent_task_is_one_trace_with_its_search_scores_calls_and_requests(
    telemetry: Telemetry, index: ToolIndex
) -> None:
    session = SessionManager(index).create("alice@example.com", pinned=["weather_get_current"])
    turns = (
        search("weather forecast", max_results=2),
        # the pinned tool is called without a search; one of the two found tools is never called
        call_found(
            ("weather_get_forecast", {"location": "Paris", "days": 2}), ("weather_get_current", {"location": "Paris"})
        ),
        Turn(text="Sunny in Paris."),
    )
    with FakeLLMServer(*turns) as server:
        model = make_model("openai_chat", server)
        result = run(model, "Weather in Paris?", session=session, functions=implementations(Calls()))
    assert result.outcome is LoopOutcome.COMPLETED

    [agent] = telemetry.spans("invoke_agent toolsearch")
    [retrieval] = telemetry.spans("retrieval")
    chats = telemetry.spans("chat gpt-test")
    tools = sorted(telemetry.spans(), key=lambda s: s.name)
    executed = [s for s in tools if s.name.startswith("execute_tool ")]
    assert len(telemetry.spans()) == 1 + 1 + 3 + 2
    assert agent.context is not None and agent.parent is None
    for child in [retrieval, *chats, *executed]:  # one trace: every span hangs under the run
        assert child.context is not None and child.context.trace_id == agent.context.trace_id
        assert child.parent is not None and child.parent.span_id == agent.context.span_id
    assert _attrs(agent)["gen_ai.conversation.id"] == hashlib.sha256(b"alice@example.com").hexdigest()[:16]

    # the search: the tools and scores it returned, best first, as the model saw them
    [record] = result.searches
    attrs = _attrs(retrieval)
    assert json.loads(attrs["gen_ai.retrieval.documents"]) == [
        {"id": h.name, "score": round(h.score, 6)} for h in record.hits
    ]
    assert len(record.hits) == 2 and "weather_get_forecast" in record.names
    assert attrs["gen_ai.operation.name"] == "retrieval"
    assert attrs["gen_ai.retrieval.top_k"] == 2
    assert attrs["gen_ai.data_source.id"] == index.key
    assert attrs["toolsearch.search.backend"] == "bm25"
    assert attrs["toolsearch.search.learning"] is False
    assert "weather_get_current" not in record.names  # so its call below is one without a search
    # privacy by default: the query's hash, never its text
    assert attrs["toolsearch.query.sha256"] == hashlib.sha256(b"weather forecast").hexdigest()[:16]
    assert "gen_ai.retrieval.query.text" not in attrs
    assert "weather forecast" not in json.dumps(attrs)

    # the tool calls, with the ids the model gave them
    calls = {r.call.name: r.call for r in result.tool_results if r.search is None}
    assert [s.name for s in executed] == ["execute_tool weather_get_current", "execute_tool weather_get_forecast"]
    for span in executed:
        a = _attrs(span)
        call = calls[a["gen_ai.tool.name"]]
        assert (a["gen_ai.operation.name"], a["gen_ai.tool.call.id"], a["toolsearch.tool.status"]) == (
            "execute_tool",
            call.id,
            "ok",
        )
        assert call.id and span.status.status_code is StatusCode.UNSET

    # the model requests: provider, model, iteration, the provider's token counts
    assert [_attrs(s)["toolsearch.loop.iteration"] for s in chats] == [1, 2, 3]
    for span, request in zip(chats, result.requests, strict=True):
        a = _attrs(span)
        assert span.kind is SpanKind.CLIENT
        assert (a["gen_ai.provider.name"], a["gen_ai.request.model"], a["toolsearch.provider.format"]) == (
            "openai",
            "gpt-test",
            "openai_chat",
        )
        assert request.usage is not None and request.usage.input_tokens
        assert a["gen_ai.usage.input_tokens"] == request.usage.input_tokens
        assert a["gen_ai.usage.output_tokens"] == request.usage.output_tokens
        assert a["toolsearch.request.tools"] == len(request.tool_names)

    # counters, per finished run
    found_only = [n for n in record.names if n != "weather_get_forecast"]
    assert telemetry.counts("toolsearch.tool.calls_without_search") == {"weather_get_current": 1}
    assert telemetry.counts("toolsearch.tool.found_not_called") == dict.fromkeys(found_only, 1)


async def test_an_async_run_is_one_trace_too(telemetry: Telemetry, index: ToolIndex) -> None:
    session = SessionManager(index).create("async")
    turns = (
        search("weather forecast", max_results=2),
        call_found(("weather_get_forecast", {"location": "Paris", "days": 2})),
        Turn(text="Sunny."),
    )
    with FakeLLMServer(*turns) as server:
        model = make_model("openai_responses", server, asynchronous=True)
        result = await arun(model, "Weather?", session=session, functions=implementations(Calls()))
    assert result.outcome is LoopOutcome.COMPLETED
    [agent] = telemetry.spans("invoke_agent toolsearch")
    names = sorted(s.name for s in telemetry.spans() if s is not agent)
    assert names == ["chat gpt-test"] * 3 + ["execute_tool weather_get_forecast", "retrieval"]
    assert agent.context is not None
    assert {s.parent.span_id for s in telemetry.spans() if s.parent is not None} == {agent.context.span_id}
    assert {_attrs(s)["toolsearch.provider.format"] for s in telemetry.spans("chat gpt-test")} == {"openai_responses"}
    assert telemetry.counts("toolsearch.tool.calls_without_search") == {}


def test_every_search_is_one_retrieval_span_however_it_was_asked(telemetry: Telemetry, index: ToolIndex) -> None:
    """ToolIndex.search, Session.search and the meta-tool: one span each, never one per layer they pass through."""
    learning = LearningIndex(index, UsageLog(index.catalog.hash))
    allowed = [t.name for t in index.catalog if t.namespace == "weather"]
    session = SessionManager(index).create("paths", allowed=allowed)
    asked: dict[str, Callable[[], object]] = {
        "index": lambda: index.search("weather forecast", 3),
        "learning index": lambda: learning.search("weather forecast", 3),
        "session": lambda: session.search("weather forecast", 3),
        "meta-tool": lambda: ToolSearchMetaTool().run(session, {"query": "weather forecast", "max_results": 3}),
    }
    for path, ask in asked.items():
        telemetry.exporter.clear()
        ask()
        spans = telemetry.spans()
        assert [s.name for s in spans] == ["retrieval"], f"{path}: {[s.name for s in spans]}"
        attrs = _attrs(spans[0])
        documents = json.loads(attrs["gen_ai.retrieval.documents"])
        assert len(documents) == 3 and documents[0]["id"].startswith("weather_"), path
        assert (attrs["gen_ai.operation.name"], attrs["gen_ai.retrieval.top_k"]) == ("retrieval", 3), path
        assert attrs["gen_ai.data_source.id"] == index.key, path
        assert attrs["toolsearch.query.sha256"] == hashlib.sha256(b"weather forecast").hexdigest()[:16], path
        assert attrs.get("toolsearch.search.allowed") == (len(allowed) if path in ("session", "meta-tool") else None)
        assert attrs["toolsearch.search.learning"] is (path == "learning index")

    # a search that fails is one span too, an error without the query's text (a parse error may quote it)
    telemetry.exporter.clear()
    with pytest.raises(InvalidQueryError):
        session.search("   ")
    [span] = telemetry.spans()
    assert span.status.status_code is StatusCode.ERROR and _attrs(span)["error.type"] == "invalid_query"
    assert not span.events


def test_query_text_only_when_chosen_and_a_bad_query_is_an_error_span(
    telemetry: Telemetry, index: ToolIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    meta = ToolSearchMetaTool()
    session = SessionManager(index).create("s")
    tracing.configure(tracer_provider=telemetry.tracer_provider, queries="text")
    meta.run(session, {"query": "weather forecast"})
    [span] = telemetry.spans("retrieval")
    assert _attrs(span)["gen_ai.retrieval.query.text"] == "weather forecast"
    assert "toolsearch.query.sha256" not in _attrs(span)

    telemetry.exporter.clear()
    tracing.configure(tracer_provider=telemetry.tracer_provider)
    monkeypatch.setenv(tracing.QUERIES_ENV, "none")
    meta.run(session, {"query": "weather"})
    [span] = telemetry.spans("retrieval")
    assert not {"gen_ai.retrieval.query.text", "toolsearch.query.sha256"} & set(_attrs(span))

    telemetry.exporter.clear()
    monkeypatch.setenv(tracing.QUERIES_ENV, "plain")  # not a mode: the safe one, and a warning
    meta.run(session, {"query": "weather"})
    [span] = telemetry.spans("retrieval")
    assert "toolsearch.query.sha256" in _attrs(span)

    telemetry.exporter.clear()
    meta.run(session, {"max_results": 2})  # no query: the model gets an instruction, the span an error
    [span] = telemetry.spans("retrieval")
    assert span.status.status_code is StatusCode.ERROR and _attrs(span)["error.type"] == "invalid_arguments"

    with pytest.raises(ValueError, match="queries='plain' is not one of hash, text, none"):
        tracing.configure(queries="plain")  # type: ignore[arg-type]


def test_without_a_provider_nothing_imports_opentelemetry(tmp_path: Path) -> None:
    code = (
        "import sys, json; from toolsearch import Tool, ToolIndex; from toolsearch.loop import run\n"
        "from toolsearch.metatool import ToolSearchMetaTool; from toolsearch.session import SessionManager\n"
        "index = ToolIndex.build([Tool(name='echo', description='echo text back')], backend='bm25')\n"
        "session = SessionManager(index).create('s'); session.search('echo'); index.search('echo')\n"
        "ToolSearchMetaTool().run(session, {'query': 'echo'})\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert json.loads(done.stdout) == []


@pytest.mark.slow
async def test_gateway_request_continues_the_callers_trace_from_meta(
    telemetry: Telemetry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook, spans = tracing_children(tmp_path, monkeypatch)
    # the upstream server gets the same hook: it shows what the gateway wrote into the forwarded `_meta`
    servers = {"toy": toy(PYTHONPATH=str(hook), TRACE_DIR=str(spans))}
    caller = telemetry.tracer_provider.get_tracer("test-client")
    with http_gateway(write_config(tmp_path / "servers.json", servers), "--pin", "toy__echo") as gateway:
        async with connect(gateway.url or "") as client:
            with caller.start_as_current_span("agent step") as step:
                found = await client.search("add two numbers")
                echoed = await client.call("toy__echo", {"text": "hi"})
        async with Client(gateway.url or "") as modern:  # the 2026-07-28 era: no session, a context handle
            with caller.start_as_current_span("another step") as later:
                handed = await modern.call_tool("tool_search", {"query": "add two numbers"})
    assert not found.is_error and text(echoed) == "hi"
    ours = step.get_span_context()
    trace_id, step_id = f"0x{ours.trace_id:032x}", f"0x{ours.span_id:016x}"

    def by_name(name: str) -> list[dict[str, Any]]:
        return [s for s in exported(spans) if s["name"] == name]

    assert wait_until(lambda: by_name("tools/call echo"), timeout=10)
    # the mcp SDK's SERVER span in the gateway, a child of the caller's span through `_meta`
    [search_span] = [s for s in by_name("tools/call tool_search") if s["parent_id"] == step_id]
    assert search_span["kind"] == "SpanKind.SERVER"
    assert search_span["context"]["trace_id"] == trace_id
    attributes = search_span["attributes"]
    assert (attributes["mcp.method.name"], attributes["gen_ai.tool.name"]) == ("tools/call", "tool_search")
    session_digest = attributes["mcp.session.id"]
    assert len(session_digest) == 16 and int(session_digest, 16) >= 0  # a digest, not the raw id

    # toolsearch's span, inside the gateway's request span
    [retrieval] = [s for s in by_name("retrieval") if s["parent_id"] == search_span["context"]["span_id"]]
    documents = [d["id"] for d in json.loads(retrieval["attributes"]["gen_ai.retrieval.documents"])]
    assert documents[0] == "toy__add_numbers" and all(name in text(found) for name in documents)

    [forward] = by_name("tools/call toy__echo")
    assert (forward["parent_id"], forward["attributes"]["mcp.session.id"]) == (step_id, session_digest)
    [send] = by_name("MCP send tools/call echo")  # the gateway's call to the upstream server
    [upstream] = by_name("tools/call echo")  # the upstream server, another process, in the same trace
    assert send["parent_id"] == forward["context"]["span_id"]
    assert upstream["context"]["trace_id"] == trace_id and upstream["parent_id"] == send["context"]["span_id"]

    handle = (handed.structured_content or {}).get("context")
    assert isinstance(handle, str) and handle
    [modern_span] = [
        s for s in by_name("tools/call tool_search") if s["parent_id"] == f"0x{later.get_span_context().span_id:016x}"
    ]
    context_digest = modern_span["attributes"]["mcp.session.id"]
    assert len(context_digest) == 16 and context_digest != session_digest
    assert handle not in json.dumps(exported(spans))  # the handle is a credential: never in a span


@pytest.mark.parametrize("mode", ["hash", "text", "none"])
def test_augmented_values_are_span_attributes_under_the_privacy_setting(
    telemetry: Telemetry, index: ToolIndex, mode: str
) -> None:
    from fakes.augment import Consumer, Why

    previous = tracing.configure(
        tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider, queries=mode  # type: ignore[arg-type]
    )
    reason = "The user asked for the forecast in Paris."
    turns = (
        search("weather forecast", max_results=2),
        call_found(("weather_get_forecast", {"location": "Paris", "days": 2, "call_reason": reason})),
        Turn(text="Sunny."),
    )
    consumer = Consumer()
    try:
        with FakeLLMServer(*turns) as server:
            model = make_model("openai_chat", server)
            session = SessionManager(index).create(f"aug-{mode}")
            functions = implementations(Calls())
            run(model, "Forecast?", session=session, functions=functions, augment=Why, on_augment=consumer)
    finally:
        tracing.restore(previous)
    [(tool, values, call_id)] = consumer.got
    assert tool == "weather_get_forecast"
    assert values == {"call_reason": reason}
    [span] = telemetry.spans("augment weather_get_forecast")
    attrs = _attrs(span)
    assert attrs["gen_ai.tool.call.id"] == call_id and attrs["toolsearch.augment.fields"] == ("call_reason",)
    assert (attrs.get("toolsearch.augment.call_reason") == reason) is (mode == "text")
    hashed = attrs.get("toolsearch.augment.call_reason.sha256")
    assert (hashed == hashlib.sha256(reason.encode()).hexdigest()[:16]) is (mode == "hash")
    assert mode == "hash" or hashed is None
    assert reason not in json.dumps(attrs) or mode == "text"


@pytest.mark.parametrize("mode", ["hash", "text", "none"])
def test_notes_that_quote_the_query_reach_a_span_only_when_queries_are_text(telemetry: Telemetry, mode: str) -> None:
    """A backend's notes quote the query (an invalid regex, words left out): outside "text" mode only their count."""
    tracing.configure(tracer_provider=telemetry.tracer_provider, queries=mode)  # type: ignore[arg-type]
    index = ToolIndex.build([Tool("get_weather", "Weather forecast for a city")], backend="regex")
    secret = "weather for patient Jane Doe ("  # not a valid pattern: the regex backend's note quotes it
    result = index.search(secret, 3)
    assert result.notes and any("Jane Doe" in note for note in result.notes)
    [span] = telemetry.spans("retrieval")
    attrs = _attrs(span)
    if mode == "text":
        assert attrs["toolsearch.search.notes"] == result.notes
    else:
        assert "Jane Doe" not in json.dumps(attrs)
        assert "toolsearch.search.notes" not in attrs
    assert attrs["toolsearch.search.note_count"] == len(result.notes)


def test_a_failed_run_is_an_error_span_without_the_exception_message(telemetry: Telemetry, index: ToolIndex) -> None:
    """A provider's error may quote the conversation: the run's span gets its type, never its message."""
    secret = "my diagnosis is private"

    def refuse(request: ChatRequest) -> str:
        raise ConnectionError(f"the provider refused the request {request.messages[-1].content!r}")

    session = SessionManager(index).create("failing")
    with pytest.raises(ConnectionError, match=secret):
        run(ScriptedModel([refuse]), secret, session=session)
    [agent] = telemetry.spans("invoke_agent toolsearch")
    assert _attrs(agent)["error.type"] == "ConnectionError"
    assert agent.status.status_code is StatusCode.ERROR and not agent.status.description
    assert not agent.events
    assert secret not in agent.to_json()


@pytest.mark.parametrize(
    ("turn", "outcome"),
    [
        (ModelTurn(Message.assistant("The answer is"), stop_reason="length", stop_kind="truncated"), "truncated"),
        (ModelTurn(Message.assistant(""), stop_reason="content_filter", stop_kind="refused"), "refused"),
        (ModelTurn(Message.assistant("Sunny."), stop_reason="stop"), "completed"),
        (
            ModelTurn(
                Message.assistant("", (scripted_call("weather_get_forecast", {"location": "Paris"}),)),
                None,
                "tool_calls",
            ),
            "max_iterations",
        ),
    ],
)
def test_the_run_span_says_how_the_run_ended(
    telemetry: Telemetry, index: ToolIndex, turn: ModelTurn, outcome: str
) -> None:
    """A cut or withheld answer returns like a complete one: only the outcome on the run's span tells them apart."""
    session = SessionManager(index).create(f"ended-{outcome}", pinned=["weather_get_forecast"])
    result = run(
        ScriptedModel([turn]),
        "Weather?",
        session=session,
        functions={"weather_get_forecast": lambda **_: "sunny"},
        max_iterations=1,
    )
    assert result.outcome.value == outcome
    [agent] = telemetry.spans("invoke_agent toolsearch")
    assert _attrs(agent)["toolsearch.loop.outcome"] == outcome
    assert agent.status.status_code is StatusCode.UNSET  # the run returned: an outcome, not an error
    [chat] = telemetry.spans("chat scripted")
    assert _attrs(chat)["gen_ai.response.finish_reasons"] == (turn.stop_reason,)


@pytest.mark.parametrize("driver", ["run", "arun"])
async def test_a_model_request_that_raises_is_a_failed_chat_span(
    telemetry: Telemetry, index: ToolIndex, driver: str
) -> None:
    """The request the run failed at is in the trace too, marked with the error's class, never its message."""
    secret = "my diagnosis is private"

    def refuse(request: ChatRequest) -> str:
        raise ConnectionError(f"the provider refused the request {request.messages[0].content!r}")

    model = ScriptedModel([scripted_search("weather forecast"), refuse])
    session = SessionManager(index).create(f"failing-{driver}")
    with pytest.raises(ConnectionError, match=secret):
        if driver == "run":
            run(model, secret, session=session)
        else:
            await arun(model, secret, session=session)
    [agent] = telemetry.spans("invoke_agent toolsearch")
    first, failed = telemetry.spans("chat scripted")
    assert agent.context is not None and failed.parent is not None and failed.parent.span_id == agent.context.span_id
    assert first.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR and not failed.status.description and not failed.events
    assert _attrs(failed)["error.type"] == "ConnectionError" and _attrs(failed)["toolsearch.loop.iteration"] == 2
    assert "gen_ai.response.finish_reasons" not in _attrs(failed)
    assert (_attrs(agent)["error.type"], _attrs(agent)["toolsearch.loop.outcome"]) == ("ConnectionError", "error")
    assert secret not in failed.to_json()


@pytest.mark.parametrize("stop", ["cancel", "ctrl-c"])
async def test_a_run_stopped_from_outside_is_an_error_span_and_so_is_the_call_it_stopped(
    telemetry: Telemetry, index: ToolIndex, stop: str
) -> None:
    """A cancelled task (a timeout, a closed connection) or Ctrl-C: the run's span and the span of the tool that was
    running say so, instead of an UNSET run span with no trace of the call."""
    model = ScriptedModel(
        [scripted_search("weather forecast"), scripted_call("weather_get_forecast", {"location": "Paris"}), "done"]
    )
    session = SessionManager(index).create(f"stopped-{stop}")
    if stop == "cancel":
        running = asyncio.Event()

        async def forecast(**_: Any) -> str:
            running.set()
            await asyncio.Event().wait()  # until cancelled
            return "sunny"

        task = asyncio.ensure_future(
            arun(model, "Weather?", session=session, functions={"weather_get_forecast": forecast})
        )
        await running.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        kind = "CancelledError"
    else:

        def interrupted(**_: Any) -> str:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            run(model, "Weather?", session=session, functions={"weather_get_forecast": interrupted}, tool_timeout=None)
        kind = "KeyboardInterrupt"
    [agent] = telemetry.spans("invoke_agent toolsearch")
    assert agent.status.status_code is StatusCode.ERROR
    assert (_attrs(agent)["error.type"], _attrs(agent)["toolsearch.loop.outcome"]) == (kind, "error")
    [tool] = telemetry.spans("execute_tool weather_get_forecast")
    assert tool.status.status_code is StatusCode.ERROR and _attrs(tool)["error.type"] == kind
    assert agent.context is not None and tool.parent is not None and tool.parent.span_id == agent.context.span_id
    assert [s.status.status_code for s in telemetry.spans("chat scripted")] == [StatusCode.UNSET] * 2
    assert telemetry.spans("retrieval")[0].status.status_code is StatusCode.UNSET


class _RaisingProcessor(SpanProcessor):
    """An application's span processor with a bug: it raises from `hook` for every span."""

    def __init__(self, hook: str, error: type[Exception]) -> None:
        self.hook, self.error = hook, error

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self.hook == "on_start":
            raise self.error("processor bug")

    def on_end(self, span: ReadableSpan) -> None:
        if self.hook == "on_end":
            raise self.error("processor bug")


@pytest.mark.parametrize("hook", ["on_start", "on_end"])
def test_a_span_processor_that_raises_never_fails_a_run_or_loses_its_usage(
    telemetry: Telemetry, index: ToolIndex, hook: str, caplog: pytest.LogCaptureFixture
) -> None:
    # an exception type of this case's own: each kind of failure is logged once per process
    bug = type(f"ProcessorBug_{hook}", (RuntimeError,), {})
    telemetry.tracer_provider.add_span_processor(_RaisingProcessor(hook, bug))  # after the exporter's
    log = UsageLog(index.catalog.hash)
    sent: list[dict[str, Any]] = []

    def send(**arguments: Any) -> str:
        sent.append(arguments)
        return "sent"

    def once() -> None:
        model = ScriptedModel(
            [scripted_search("weather forecast"), scripted_call("weather_get_forecast", {"location": "Paris"}), "done"]
        )
        session = SessionManager(index).create(f"processor-{hook}")
        result = run(
            model, "Weather?", session=session, functions={"weather_get_forecast": send}, usage=UsageRecorder(log)
        )
        assert result.outcome is LoopOutcome.COMPLETED and result.output == "done"

    with caplog.at_level(logging.WARNING, logger="toolsearch.tracing"):
        once()
        assert len(sent) == 1 and len(log) == 1  # the tool ran, and its search was credited
        first = [r for r in caplog.records if r.name == "toolsearch.tracing"]
        assert first and all(bug.__name__ in r.getMessage() for r in first)
        assert index.search("weather forecast", 3).hits  # a search outside a run too
        caplog.clear()
        once()  # the same failures again: carried on, not logged again
        assert len(sent) == 2 and len(log) == 2
        assert not [r for r in caplog.records if r.name == "toolsearch.tracing"]
    if hook == "on_end":  # the exporter's processor comes first: every span still reached it
        names = sorted({s.name for s in telemetry.spans()})
        assert names == ["chat scripted", "execute_tool weather_get_forecast", "invoke_agent toolsearch", "retrieval"]


@pytest.mark.parametrize(
    ("wire_format", "provider"),
    [("openai_chat", "openai"), ("openai_responses", "openai"), ("anthropic", "anthropic"), ("gemini", "gcp.gemini")],
)
def test_provider_name_is_the_semantic_conventions_value(
    telemetry: Telemetry, index: ToolIndex, wire_format: str, provider: str
) -> None:
    run(ScriptedModel(["hi"], format=wire_format), "hi", session=SessionManager(index).create("provider"))
    [chat] = telemetry.spans("chat scripted")
    assert (_attrs(chat)["gen_ai.provider.name"], _attrs(chat)["toolsearch.provider.format"]) == (provider, wire_format)
