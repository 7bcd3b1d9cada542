"""Tool-argument augmentation end to end: the model states why it calls a tool, the tool never sees it.

The loop and the bring-your-own-loop helpers drive the real `openai` / `anthropic` clients against
the strict fake provider server; each test checks the exact tools arrays (the augmented field is
in every exposed tool's schema, not in tool_search), what the tool function received (its own
arguments only) and what the consumer received (the augmented values, with the call's id).
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import pytest
from fakes import FakeLLMServer, Turn
from fakes.augment import REASON, Consumer, Why
from fakes.e2e import (
    Calls,
    assert_tools,
    catalog_tools,
    hits,
    implementations,
    make_model,
    native_search_tool,
    search,
    wire_tool,
)
from pydantic import BaseModel

from toolsearch import (
    Augmentation,
    AugmentationError,
    Tool,
    ToolIndex,
    handle_tool_calls,
    provider_safe_name,
    tools_for_request,
)
from toolsearch.executor import ResultStatus, ahandle_tool_calls
from toolsearch.loop import LoopOutcome, ToolSearchLoop, arun, run
from toolsearch.metatool import ToolSearchMetaTool
from toolsearch.providers import ToolCall
from toolsearch.session import SessionManager

FORMATS = ["openai_chat", "openai_responses", "anthropic"]
def augmented(tool: Tool) -> Tool:
    """`tool` as it must be sent: written out here, not computed by the code under test."""
    schema = copy.deepcopy(dict(tool.input_schema))
    schema["properties"] = {"call_reason": REASON, **schema["properties"]}
    schema["required"] = ["call_reason", *schema.get("required", [])]
    return Tool(tool.name, tool.description, schema, tool.namespace)


@pytest.fixture(scope="module")
def index(demo_tools: list[Tool]) -> ToolIndex:
    return ToolIndex.build(catalog_tools(demo_tools), backend="bm25")


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


def forecast_call(reason: Any = "The user asked for the weather in Paris.", call_id: str = "call-forecast") -> Turn:
    arguments: dict[str, Any] = {"location": "Paris", "days": 2}
    if reason is not None:
        arguments["call_reason"] = reason
    return Turn(tool_calls=[("weather_get_forecast", arguments, call_id)])


# --- the loop, every wire format ------------------------------------------------------------------


@pytest.mark.parametrize("kind", FORMATS)
def test_the_field_is_sent_taken_out_and_consumed(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    catalog = index.catalog
    session = SessionManager(index).create(f"augment-{kind}")
    found = hits(index, "weather forecast", 2)
    assert "weather_get_forecast" in found
    calls, consumer = Calls(), Consumer()
    server.enqueue(search("weather forecast", max_results=2), forecast_call(), Turn(text="Sunny."))

    result = run(
        make_model(kind, server),
        "Weather in Paris?",
        session=session,
        functions=implementations(calls),
        augment=Why,
        on_augment=consumer,
    )

    assert (result.outcome, result.output) == (LoopOutcome.COMPLETED, "Sunny.")
    first, second, third = server.requests
    meta = ToolSearchMetaTool().definition(session)
    assert_tools(first, search=meta)  # tool_search keeps its own schema
    assert_tools(second, search=meta, discovered=[augmented(catalog[n]) for n in found])
    assert_tools(third, search=meta, discovered=[augmented(catalog[n]) for n in found])
    # the tool got its own arguments only; the consumer got the reason, with the call's id
    assert calls.log == [("weather_get_forecast", {"location": "Paris", "days": 2, "units": "metric"})]
    assert consumer.got == [
        ("weather_get_forecast", {"call_reason": "The user asked for the weather in Paris."}, "call-forecast")
    ]
    # the model's own call, reason included, is replayed to it as it was made
    [replayed] = [c for c in third.history_calls() if c.name == "weather_get_forecast"]
    assert replayed.arguments_object()["call_reason"] == "The user asked for the weather in Paris."
    assert result.tool_results[-1].status is ResultStatus.OK
    assert result.tool_results[-1].call.arguments == {"location": "Paris", "days": 2}


@pytest.mark.parametrize("kind", FORMATS)
def test_a_missing_required_field_is_a_tool_error(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    session = SessionManager(index).create(f"missing-{kind}")
    calls, consumer = Calls(), Consumer()
    server.enqueue(
        search("weather forecast", max_results=2),
        forecast_call(reason=None, call_id="first"),
        forecast_call(call_id="second"),
        Turn(text="ok"),
    )

    result = run(
        make_model(kind, server), "Weather?", session=session, functions=implementations(calls),
        augment=Why, on_augment=consumer,
    )

    refused = result.tool_results[1]
    assert refused.status is ResultStatus.INVALID_ARGUMENTS
    assert "'call_reason' is a required property" in refused.content
    assert "call it again" in refused.content
    [answer] = server.requests[2].tool_results()
    assert "call_reason" in answer.text
    # the retry with the field ran; the refused call reached neither the tool nor the consumer
    assert calls.names() == ["weather_get_forecast"]
    assert [tool for tool, _, _ in consumer.got] == ["weather_get_forecast"]


def test_a_bad_augmented_value_is_a_tool_error(server: FakeLLMServer, index: ToolIndex) -> None:
    session = SessionManager(index).create("bad-value")
    calls, consumer = Calls(), Consumer()
    server.enqueue(search("weather forecast", max_results=2), forecast_call(reason=42), Turn(text="ok"))

    result = run(
        make_model("openai_chat", server), "Weather?", session=session, functions=implementations(calls),
        augment=Why, on_augment=consumer,
    )

    assert result.tool_results[1].status is ResultStatus.INVALID_ARGUMENTS
    assert "call_reason: 42 is not of type 'string'" in result.tool_results[1].content
    assert calls.log == [] and consumer.got == []


# --- native forms: deferred tools carry the augmented schema when loaded ----------------------------


@pytest.mark.parametrize("kind", ["anthropic", "openai_responses"])
def test_native_forms_load_the_augmented_schema(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    catalog = index.catalog
    session = SessionManager(index).create(f"native-{kind}")
    found = hits(index, "weather forecast", 2)
    calls, consumer = Calls(), Consumer()
    server.enqueue(search("weather forecast", max_results=2), forecast_call(), Turn(text="Sunny."))

    result = run(
        make_model(kind, server), "Weather?", session=session, functions=implementations(calls),
        augment=Why, on_augment=consumer, tool_search_mode="native",
    )

    assert result.outcome is LoopOutcome.COMPLETED
    first, second, third = server.requests
    if kind == "anthropic":
        meta = ToolSearchMetaTool().definition(session)
        assert_tools(first, search=meta)
        for request in (second, third):
            assert_tools(request, search=meta, deferred=[augmented(catalog[n]) for n in found])
    else:
        native = native_search_tool(session)
        assert first.tools == second.tools == third.tools == [native]
        [output] = [i for i in third["input"] if i.get("type") == "tool_search_output"]
        sent = [wire_tool(t) for t in output["tools"]]
        assert sent == [
            (provider_safe_name(n), catalog[n].description, dict(augmented(catalog[n]).input_schema), False)
            for n in found
        ]
    assert calls.log == [("weather_get_forecast", {"location": "Paris", "days": 2, "units": "metric"})]
    assert [tool for tool, _, _ in consumer.got] == ["weather_get_forecast"]


def test_tool_search_carries_the_field_only_when_asked(server: FakeLLMServer, index: ToolIndex) -> None:
    session = SessionManager(index).create("search-too")
    consumer = Consumer()
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "weather forecast", "call_reason": "I need weather tools."}, "s1")]),
        Turn(tool_calls=[("tool_search", {"query": "send email"}, "s2")]),  # no reason: a search error
        Turn(text="done"),
    )

    result = run(
        make_model("openai_chat", server), "Weather?", session=session,
        augment=Augmentation.of(Why, search=True), on_augment=consumer,
    )

    meta = ToolSearchMetaTool().definition(session)
    first = server.requests[0]
    [sent] = first.tools
    assert wire_tool(sent)[2] == dict(augmented(meta).input_schema)
    assert consumer.got == [("tool_search", {"call_reason": "I need weather tools."}, "s1")]
    ok, missing = result.tool_results
    assert ok.status is ResultStatus.SEARCH and ok.search is not None and ok.search.query == "weather forecast"
    assert missing.status is ResultStatus.SEARCH_ERROR and "'call_reason' is a required property" in missing.content


def test_direct_mode_sends_every_tool_augmented(server: FakeLLMServer, index: ToolIndex) -> None:
    catalog = index.catalog
    allowed = ["weather_get_forecast", "weather_get_current"]
    session = SessionManager(index).create("direct", allowed=allowed)
    calls, consumer = Calls(), Consumer()
    server.enqueue(forecast_call(), Turn(text="Sunny."))

    run(
        make_model("anthropic", server), "Weather?", session=session, functions=implementations(calls),
        augment=Why, on_augment=consumer, tool_search="off",
    )

    assert_tools(server.requests[0], pinned=[augmented(catalog[n]) for n in catalog.names if n in allowed])
    assert calls.names() == ["weather_get_forecast"] and len(consumer.got) == 1


# --- async and streaming ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", FORMATS)
def test_async_loop_with_an_async_consumer(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    session = SessionManager(index).create(f"async-{kind}")
    calls = Calls()
    got: list[tuple[str, dict[str, Any], str]] = []

    async def consumer(tool: str, values: Mapping[str, Any], call_id: str) -> None:
        await asyncio.sleep(0)
        got.append((tool, dict(values), call_id))

    server.enqueue(
        search("greatest common divisor", max_results=1),
        Turn(tool_calls=[(provider_safe_name("math.gcd"), {"a": 12, "b": 18, "call_reason": "gcd asked"}, "g1")]),
        Turn(text="6"),
    )
    result = asyncio.run(
        arun(
            make_model(kind, server, asynchronous=True), "gcd(12, 18)?", session=session,
            functions=implementations(calls), augment=Why, on_augment=consumer,
        )
    )
    assert result.output == "6"
    assert calls.log == [("math.gcd", {"a": 12, "b": 18})]  # the async tool, awaited, without the reason
    assert got == [("math.gcd", {"call_reason": "gcd asked"}, "g1")]


def test_an_async_consumer_is_refused_by_the_sync_loop(server: FakeLLMServer, index: ToolIndex) -> None:
    async def consumer(tool: str, values: Mapping[str, Any], call_id: str) -> None: ...

    session = SessionManager(index).create("sync-refuses")
    with pytest.raises(TypeError, match="arun"):
        run(make_model("openai_chat", server), "x", session=session, augment=Why, on_augment=consumer)
    assert server.requests == []


@pytest.mark.parametrize("kind", FORMATS)
def test_streaming_loop(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    catalog = index.catalog
    session = SessionManager(index).create(f"stream-{kind}")
    found = hits(index, "weather forecast", 2)
    calls, consumer, pieces = Calls(), Consumer(), []
    server.enqueue(search("weather forecast", max_results=2), forecast_call(), Turn(text="Sunny in Paris."))

    result = run(
        make_model(kind, server), "Weather?", session=session, functions=implementations(calls),
        augment=Why, on_augment=consumer, on_text=pieces.append,
    )

    assert all(r.stream for r in server.requests)
    assert "".join(pieces) == result.output == "Sunny in Paris."
    meta = ToolSearchMetaTool().definition(session)
    assert_tools(server.requests[1], search=meta, discovered=[augmented(catalog[n]) for n in found])
    assert calls.log == [("weather_get_forecast", {"location": "Paris", "days": 2, "units": "metric"})]
    assert consumer.got == [
        ("weather_get_forecast", {"call_reason": "The user asked for the weather in Paris."}, "call-forecast")
    ]


# --- collisions -------------------------------------------------------------------------------------


class Reason(BaseModel):
    reason: str


def test_a_colliding_field_is_refused_at_setup(server: FakeLLMServer, index: ToolIndex) -> None:
    sessions = SessionManager(index)
    session = sessions.create("collide")
    model = make_model("openai_chat", server)
    expected = r"field\(s\) 'reason' collide with the parameter\(s\) of the same name of tool 'github_close_issue'"
    with pytest.raises(AugmentationError, match=expected):
        ToolSearchLoop(model, sessions, augment=Reason)
    with pytest.raises(AugmentationError, match=expected):
        run(model, "x", session=session, augment=Reason)
    with pytest.raises(AugmentationError, match=expected):
        tools_for_request(session, augment=Reason)
    with pytest.raises(AugmentationError, match=expected):
        handle_tool_calls(session, [], augment={"properties": {"reason": {"type": "string"}}})
    assert server.requests == []


def test_a_colliding_tool_added_later_is_refused_before_it_is_exposed(demo_tools: list[Tool]) -> None:
    index = ToolIndex.build(catalog_tools(demo_tools), backend="bm25")
    session = SessionManager(index).create("later")
    tools_for_request(session, augment=Why)  # fine at setup
    late = Tool("audit_log_write", "Write an audit log entry.", {"properties": {"call_reason": {"type": "string"}}})
    index.upsert([late])
    session.discover(["audit_log_write"])
    with pytest.raises(AugmentationError, match=r"'call_reason' collide.* of tool 'audit_log_write'"):
        tools_for_request(session, "anthropic", augment=Why)
    # and a call to it (undiscovered="execute" would run it unexposed) is refused the same way
    executor_session = SessionManager(index).create("later-call")
    executor_session.discover(["audit_log_write"])
    with pytest.raises(AugmentationError, match="audit_log_write"):
        from toolsearch.executor import ToolExecutor

        ToolExecutor({"audit_log_write": lambda **_: "ok"}, augment=Augmentation.of(Why)).execute(
            executor_session, [ToolCall("c", "audit_log_write", {"call_reason": "x"})]
        )


def test_a_parameter_is_found_anywhere_in_the_schema_that_declares_the_tools_own() -> None:
    from toolsearch.augment import parameter_names

    own = {"type": "string"}
    schema = {
        "type": "object",
        "properties": {"a": own},
        "required": ["b"],
        "allOf": [{"properties": {"c": own}}, {"$ref": "#/$defs/D"}],
        "anyOf": [{"properties": {"e": own}}],
        "oneOf": [{"if": {"properties": {"f": own}}, "then": {"properties": {"g": own}}, "else": {"required": ["h"]}}],
        "dependentSchemas": {"a": {"properties": {"i": own}}},
        "$defs": {"D": {"properties": {"d": own}, "$ref": "#/$defs/D"}, "a~/b": {"properties": {"j": own}}},
        "not": {"properties": {"not_mine": own}},
    }
    schema["anyOf"].append({"$ref": "#/$defs/a~0~1b"})  # a JSON pointer's escapes
    assert parameter_names(schema) == set("abcdefghij")  # a recursive $ref is followed once
    nested = {"type": "object", "properties": {"x": {"type": "object", "properties": {"reason": own}}}}
    assert parameter_names(nested) == {"x"}  # a property's own properties are not the tool's parameters
    assert parameter_names({"type": "object", "$ref": "#/$defs/missing", "allOf": "not a list"}) == set()
    augmentation = Augmentation.of(Reason)
    assert augmentation is not None
    hidden = Tool("refund", "Refund a payment.", {"type": "object", "allOf": [{"properties": {"reason": own}}]})
    assert augmentation.conflicts(hidden) == ["reason"]
    plain = Tool("pay", "Pay an invoice.", {"type": "object", "properties": {"invoice": own}})
    assert augmentation.collisions([hidden, plain]) == {"refund": ("reason",)}
    with pytest.raises(AugmentationError, match=r"'reason' collide.* of tool 'refund'"):
        augmentation.check([plain, hidden])


def test_an_unusable_augmentation_is_refused() -> None:
    with pytest.raises(AugmentationError, match="at least one field"):
        Augmentation.of({"type": "object", "properties": {}})
    with pytest.raises(AugmentationError, match="'required' must list"):
        Augmentation.of({"properties": {"why": {"type": "string"}}, "required": ["because"]})
    with pytest.raises(AugmentationError, match="the augmentation: input schema 'type' must be 'object'"):
        Augmentation.of({"type": "string"})
    with pytest.raises(AugmentationError, match="pydantic model class or a JSON schema"):
        Augmentation.of("reason")
    with pytest.raises(AugmentationError, match="without augment="):
        Augmentation.of(None, on_augment=print)
    with pytest.raises(AugmentationError, match="not a valid JSON schema"):
        Augmentation.of({"properties": {"why": {"type": "string", "minLength": "3"}}})
    with pytest.raises(AugmentationError, match="parameter 'why' has unknown JSON type 'text'"):
        Augmentation.of({"properties": {"why": {"type": "text"}}})


def test_a_pydantic_model_with_nested_types_is_inlined() -> None:
    class Step(BaseModel):
        goal: str

    class Thinking(BaseModel):
        inner_thought: str
        confidence: Literal["low", "high"] = "high"
        step: Step | None = None

    augmentation = Augmentation.of(Thinking)
    assert augmentation is not None
    schema = augmentation.schema
    assert "$defs" not in json.dumps(schema) and "$ref" not in json.dumps(schema)
    assert schema["required"] == ["inner_thought"]
    assert augmentation.problems({"inner_thought": "x", "step": {"goal": "y"}}) == []
    assert augmentation.problems({"inner_thought": "x", "step": {}}) == [
        "step: {} is not valid under any of the given schemas"
    ]


# --- bring your own loop ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", FORMATS)
def test_helpers_render_and_strip(kind: str, server: FakeLLMServer, index: ToolIndex) -> None:
    """tools_for_request carries the field to the real SDK; handle_tool_calls takes it out again."""
    catalog = index.catalog
    session = SessionManager(index).create(f"byol-{kind}", pinned=["weather_get_forecast"])
    calls, consumer = Calls(), Consumer()
    server.enqueue(forecast_call())
    tools = tools_for_request(session, kind, augment=Why)  # type: ignore[arg-type]
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    if kind == "openai_chat":
        reply = server.openai().chat.completions.create(model="m", messages=messages, tools=tools)
        raw_calls: list[Any] = list(reply.choices[0].message.tool_calls or [])
    elif kind == "openai_responses":
        response = server.openai().responses.create(model="m", input=messages, tools=tools)
        raw_calls = [i for i in response.output if i.type == "function_call"]
    else:
        message = server.anthropic().messages.create(model="m", max_tokens=64, messages=messages, tools=tools)
        raw_calls = [b for b in message.content if b.type == "tool_use"]
    meta = ToolSearchMetaTool().definition(session)
    assert_tools(server.requests[0], pinned=[augmented(catalog["weather_get_forecast"])], search=meta)

    [result] = handle_tool_calls(session, raw_calls, implementations(calls), augment=Why, on_augment=consumer)

    assert result.status is ResultStatus.OK
    assert calls.log == [("weather_get_forecast", {"location": "Paris", "days": 2, "units": "metric"})]
    assert consumer.got == [
        ("weather_get_forecast", {"call_reason": "The user asked for the weather in Paris."}, "call-forecast")
    ]


def test_async_helper_and_the_deprecated_session_methods(index: ToolIndex) -> None:
    session = SessionManager(index).create("byol-async", pinned=["weather_get_current"])
    calls, consumer = Calls(), Consumer()
    call = ToolCall("c1", "weather_get_current", {"location": "Oslo", "call_reason": "asked"})
    [result] = asyncio.run(
        ahandle_tool_calls(session, [call], implementations(calls), augment=Why, on_augment=consumer)
    )
    assert result.status is ResultStatus.OK and result.content == "Oslo: 21C, clear"
    with pytest.warns(DeprecationWarning):
        [again] = session.handle_tool_calls([call], implementations(calls), augment=Why, on_augment=consumer)
    with pytest.warns(DeprecationWarning):
        [definition] = [
            t for t in session.tools_for_request("mcp", augment=Why) if t["name"] == "weather_get_current"
        ]
    assert again.status is ResultStatus.OK
    assert calls.log == [("weather_get_current", {"location": "Oslo", "units": "metric"})] * 2
    assert consumer.got == [("weather_get_current", {"call_reason": "asked"}, "c1")] * 2
    assert definition["inputSchema"]["required"][0] == "call_reason"


def test_a_new_reason_does_not_make_a_repeated_call_new(server: FakeLLMServer, index: ToolIndex) -> None:
    session = SessionManager(index).create("repeat")
    calls = Calls()
    server.enqueue(
        search("weather forecast", max_results=2),
        forecast_call("First reason.", call_id="a"),
        forecast_call("Another wording of the same reason.", call_id="b"),
    )
    result = run(
        make_model("openai_chat", server), "Weather?", session=session, functions=implementations(calls),
        augment=Why, max_identical_calls=1,
    )
    assert result.outcome is LoopOutcome.REPEATED_CALL
    assert calls.names() == ["weather_get_forecast"]


def test_a_failing_consumer_stops_the_run_before_any_tool_runs(server: FakeLLMServer, index: ToolIndex) -> None:
    session = SessionManager(index).create("consumer-fails")
    calls = Calls()

    def consumer(tool: str, values: Mapping[str, Any], call_id: str) -> None:
        raise RuntimeError("the reason store is down")

    server.enqueue(search("weather forecast", max_results=2), forecast_call())
    with pytest.raises(RuntimeError, match="reason store is down"):
        run(make_model("openai_chat", server), "Weather?", session=session, functions=implementations(calls),
            augment=Why, on_augment=consumer)
    assert calls.log == []
    assert "weather_get_forecast" in session.discovered  # the turn's session write happened first
