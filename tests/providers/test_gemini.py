"""End to end through the real `google-genai` client (generateContent) against the strict local server.

The toolsearch loop drives `genai.Client` (base_url on 127.0.0.1, no retries); the server checks
every request against Gemini's documented rules and replays scripted model turns.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import GEMINI, ErrorTurn, FakeLLMServer, ToolCall, Turn
from fakes.e2e import (
    Calls,
    assert_valid_request,
    catalog_tools,
    implementations,
    make_model,
    scenario_dotted_names,
    scenario_empty_reply_then_continue,
    scenario_iteration_guard,
    scenario_multi_step_discovery,
    scenario_parallel_searches,
    scenario_same_turn_call,
    scenario_tool_errors,
    search,
)

from toolsearch import Tool, ToolIndex
from toolsearch.loop import LoopOutcome, arun, run
from toolsearch.providers import ChatRequest, Message, ProviderError, parse_tool_call, render_result
from toolsearch.providers import ToolCall as NeutralCall
from toolsearch.providers.gemini import LOCAL_ID, gemini_payload
from toolsearch.session import SessionManager

KIND = "gemini"


@pytest.fixture(scope="module")
def index(demo_tools: list[Tool]) -> ToolIndex:
    return ToolIndex.build(catalog_tools(demo_tools), backend="bm25")


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


def test_multi_step_discovery(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_multi_step_discovery(KIND, server, index)


def test_parallel_searches(server: FakeLLMServer, index: ToolIndex) -> None:
    """Two calls in one model turn: both answered in the next user turn, in order (the server counts them)."""
    scenario_parallel_searches(KIND, server, index)
    responses = [p["functionResponse"] for p in server.requests[1].messages[-1]["parts"]]
    assert [r["name"] for r in responses] == ["tool_search", "tool_search"]
    assert all("id" not in r for r in responses)  # the API sent no ids: none is sent back


def test_same_turn_call(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_same_turn_call(KIND, server, index)


def test_dotted_names(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_dotted_names(KIND, server, index)


def test_tool_errors(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_tool_errors(KIND, server, index, raw_arguments=False)
    parts = [p for m in server.requests[-1].messages for p in m.get("parts", [])]
    assert any("error" in p.get("functionResponse", {}).get("response", {}) for p in parts)


def test_empty_reply_then_continue(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_empty_reply_then_continue(KIND, server, index)


def test_iteration_guard(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_iteration_guard(KIND, server, index)


def test_requests_validate_against_the_sdk_types(server: FakeLLMServer, index: ToolIndex) -> None:
    scenario_multi_step_discovery(KIND, server, index)
    for request in server.requests:
        assert request.provider == GEMINI and request.model == "gemini-test"
        assert_valid_request(request)
        assert request.body["tools"][0]["functionDeclarations"]


def test_call_ids_the_api_sends_are_sent_back(server: FakeLLMServer, index: ToolIndex) -> None:
    session = SessionManager(index).create("ids")
    server.enqueue(
        Turn(tool_calls=[ToolCall("tool_search", {"query": "current weather"}, "fc-1")]),
        Turn(text="done"),
    )
    result = run(make_model(KIND, server), "Weather?", session=session)
    assert result.output == "done"
    history = server.requests[1].messages
    assert history[1]["parts"][0]["functionCall"]["id"] == "fc-1"
    assert history[2]["parts"][0]["functionResponse"]["id"] == "fc-1"


def test_async_and_streamed_runs(server: FakeLLMServer, index: ToolIndex) -> None:
    session = SessionManager(index).create("async")
    calls = Calls()
    server.enqueue(search("current weather"), Turn(text="Oslo is clear."))
    result = asyncio.run(arun(make_model(KIND, server, asynchronous=True), "Weather?", session=session,
                              functions=implementations(calls)))
    assert result.outcome is LoopOutcome.COMPLETED and result.output == "Oslo is clear."
    pieces: list[str] = []
    server.enqueue(search("send email"), Turn(text="Email tools found, nothing sent."))
    streamed = run(make_model(KIND, server), "Email?", session=SessionManager(index).create("stream"),
                   on_text=pieces.append)
    assert streamed.output == "Email tools found, nothing sent." and "".join(pieces) == streamed.output
    assert server.requests[-1].path.endswith(":streamGenerateContent")


def test_an_api_error_is_a_provider_error(server: FakeLLMServer, index: ToolIndex) -> None:
    server.enqueue(ErrorTurn(429, "Resource has been exhausted (e.g. check quota)."))
    with pytest.raises(ProviderError, match="Gemini request failed: ClientError: 429"):
        run(make_model(KIND, server), "Weather?", session=SessionManager(index).create("err"))


def test_thought_signatures_are_replayed_with_their_calls() -> None:
    call = NeutralCall("fc-9", "tool_search", {"query": "x"})
    local = NeutralCall(f"{LOCAL_ID}7", "tool_search", {"query": "y"})
    turn = Message("assistant", "", (call, local), provider="gemini", provider_items=(("fc-9", "c2ln"),))
    request = ChatRequest((Message.user("hi"), turn, Message.tool(call, "r1"), Message.tool(local, "r2")))
    contents = gemini_payload(request, "gemini-test")["contents"]
    assert contents[1]["parts"] == [
        {"function_call": {"name": "tool_search", "args": {"query": "x"}, "id": "fc-9"}, "thought_signature": "c2ln"},
        {"function_call": {"name": "tool_search", "args": {"query": "y"}}},
    ]
    assert contents[2] == {"role": "user", "parts": [
        {"function_response": {"name": "tool_search", "response": {"output": "r1"}, "id": "fc-9"}},
        {"function_response": {"name": "tool_search", "response": {"output": "r2"}}},
    ]}


def test_the_registry_reads_and_answers_gemini_calls() -> None:
    from google.genai import types

    sdk_call = types.FunctionCall(name="weather_get_current", args={"location": "Oslo"}, id="fc-2")
    assert parse_tool_call(sdk_call) == NeutralCall("fc-2", "weather_get_current", {"location": "Oslo"})
    assert parse_tool_call({"name": "x", "arguments": '{"a": 1}'}).arguments == {"a": 1}  # the plain shape still reads
    answer = render_result("gemini", NeutralCall("fc-2", "weather_get_current", {}), "boom", is_error=True)
    assert answer == {"function_response": {"name": "weather_get_current", "response": {"error": "boom"},
                                            "id": "fc-2"}}
    assert json.dumps(answer)


def test_the_demo_renders_and_counts_gemini_requests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from toolsearch.cli import main

    code = main(["demo", "--backend", "bm25", "--format", "gemini", "--cache-dir", str(tmp_path), "--json", "-q"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["format"] == "gemini"
    assert 0 < report["tool_search"]["tool_tokens"] < report["all_tools"]["tool_tokens"]


def test_a_tool_name_gemini_would_refuse_is_sent_under_a_name_it_accepts(server: FakeLLMServer) -> None:
    """Gemini names start with a letter or `_`: `3d_print` goes out as `_3d_print` and comes back as itself."""
    printer = Tool("3d_print", "Print a 3D model file on the office printer.",
                   {"type": "object", "properties": {"file": {"type": "string"}}})
    index = ToolIndex.build([printer], backend="bm25")
    session = SessionManager(index).create("printer")
    printed: list[str] = []
    server.enqueue(search("print a 3D model"), Turn(tool_calls=[("_3d_print", {"file": "gear.stl"})]), Turn(text="ok"))
    result = run(make_model(KIND, server), "Print gear.stl", session=session,
                 functions={"3d_print": lambda file: printed.append(file) or "queued"})
    assert result.output == "ok" and printed == ["gear.stl"]
    assert "_3d_print" in server.requests[1].tool_names
    assert [r.call.name for r in result.tool_results] == ["tool_search", "3d_print"]
