"""Provider answers and histories the parsers and renderers once got wrong, through the real SDK clients.

Each test serves hand-written provider replies (malformed or unusual, which the scripted fake server
never renders) from a local HTTP server to the real `openai` / `anthropic` / `google-genai` client,
runs the toolsearch loop or the bring-your-own-loop helpers, and checks what was parsed and what the
next request sent (against the API rules in tests/fakes/provider_rules.py where they cover it).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fakes.provider_rules import GEMINI_FUNCTION_NAME, Violation, check_anthropic, check_chat

from toolsearch import (
    ProviderError,
    SessionManager,
    Tool,
    ToolIndex,
    arun,
    handle_tool_calls,
    run,
    tools_for_request,
)
from toolsearch.providers import AnthropicModel, GeminiModel, OpenAIChatModel, OpenAIResponsesModel
from toolsearch.providers.gemini import wire_name
from toolsearch.session import Session

Body = dict[str, Any]
Reply = tuple[int, Any] | Callable[[str, Body], tuple[int, Any]]


class RawServer:
    """Answers each POST with the next (status, body): a JSON body, a list of SSE events or an SSE body as bytes;
    records requests."""

    def __init__(self, *replies: Reply) -> None:
        self.replies: deque[Reply] = deque(replies)
        self.requests: list[tuple[str, Body]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                outer.requests.append((self.path, body))
                reply = outer.replies.popleft() if outer.replies else (500, {"error": "no reply left"})
                status, payload = reply(self.path, body) if callable(reply) else reply
                if isinstance(payload, list):
                    data = "".join(f"data: {json.dumps(e)}\n\n" for e in payload).encode()
                    ctype = "text/event-stream"
                elif isinstance(payload, bytes):  # an event stream written out whole (`event:` lines and all)
                    data, ctype = payload, "text/event-stream"
                else:
                    data, ctype = json.dumps(payload).encode(), "application/json"
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def openai(self) -> Any:
        import openai

        return openai.OpenAI(base_url=self.url + "/v1", api_key="x", max_retries=0)

    def anthropic(self) -> Any:
        import anthropic

        return anthropic.Anthropic(base_url=self.url, api_key="x", max_retries=0)

    def gemini(self) -> Any:
        from google import genai
        from google.genai import types

        options = types.HttpOptions(base_url=self.url, retry_options=types.HttpRetryOptions(attempts=1))
        return genai.Client(api_key="x", http_options=options)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def start(*replies: Reply) -> RawServer:
        servers.append(RawServer(*replies))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def session_with(*tools: Tool | tuple[str, str], pinned: list[str] | None = None) -> Session:
    index = ToolIndex.build([t if isinstance(t, Tool) else Tool(*t) for t in tools], backend="regex")
    return SessionManager(index).create("s", pinned=pinned or ())


def chat(content: Any = None, tool_calls: list[Body] | None = None, finish: str = "stop", **message: Any) -> Any:
    msg: Body = {"role": "assistant", "content": content, **message}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    return 200, {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def anthropic_message(content: list[Body], stop: str = "end_turn", usage: Body | None = None) -> Any:
    return 200, {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": content,
        "stop_reason": stop, "usage": usage or {"input_tokens": 5, "output_tokens": 5},
    }


def gemini_reply(parts: list[Body], usage: Body | None = None) -> Body:
    out: Body = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}]}
    if usage is not None:
        out["usageMetadata"] = usage
    return out


def following_rule(check: Callable[[Body], None], answer: Any) -> Callable[[str, Body], tuple[int, Any]]:
    """A reply that refuses (HTTP 400) a request breaking the real API's rules, as the API does."""

    def reply(path: str, body: Body) -> tuple[int, Any]:
        try:
            check(body)
        except Violation as violation:
            return 400, {"error": {"message": str(violation), "type": "invalid_request_error"},
                         "type": "error"}
        return answer  # type: ignore[no-any-return]

    return reply


# --- Anthropic: a top-level oneOf/anyOf/allOf ----------------------------------------------------


def test_a_tool_with_a_top_level_one_of_is_sent_to_anthropic_folded(serve: Callable[..., RawServer]) -> None:
    tool = Tool.from_mcp({
        "name": "get_ci_resource", "description": "Get a CI resource by id or by path.",
        "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}, "full_path": {"type": "string"}},
                        "oneOf": [{"required": ["id"]}, {"required": ["full_path", "id"]}]},
    })

    def api(path: str, body: Body) -> tuple[int, Any]:
        for i, t in enumerate(body.get("tools") or []):
            if any(k in t["input_schema"] for k in ("oneOf", "anyOf", "allOf")):
                return 400, {"type": "error", "error": {"type": "invalid_request_error", "message":
                             f"tools.{i}.custom.input_schema: input_schema does not support oneOf, allOf, or "
                             "anyOf at the top level"}}
        if len(body["messages"]) == 1:
            return anthropic_message([{"type": "tool_use", "id": "toolu_1", "name": "get_ci_resource",
                                       "input": {"full_path": "a/b"}}], "tool_use")
        return anthropic_message([{"type": "text", "text": "done"}])

    server = serve(api, api)
    ran: list[dict[str, Any]] = []
    result = run(AnthropicModel(server.anthropic(), "claude-sonnet-4-6"), "show CI resource a/b",
                 session=session_with(tool, pinned=["get_ci_resource"]),
                 functions={"get_ci_resource": lambda **kw: ran.append(kw) or "ok"})
    assert result.output == "done"
    sent = next(t for t in server.requests[0][1]["tools"] if t["name"] == "get_ci_resource")["input_schema"]
    assert sent["properties"] == {"id": {"type": "string"}, "full_path": {"type": "string"}}
    assert sent["required"] == ["id"]  # required in every branch
    assert "oneOf" in sent["description"] and '"full_path"' in sent["description"]
    # the call is still validated against the tool's own schema: full_path alone matches no branch's id
    assert ran == [] and result.tool_results[0].is_error


def test_an_all_of_requires_what_any_branch_requires() -> None:
    tool = Tool("t", input_schema={"type": "object", "allOf": [
        {"properties": {"a": {"type": "string"}}, "required": ["a"]},
        {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
    ]})
    schema = tool.to_anthropic()["input_schema"]
    assert "allOf" not in schema and schema["required"] == ["a", "b"]
    assert set(schema["properties"]) == {"a", "b"}
    assert tool.input_schema["allOf"]  # the tool itself keeps its schema


def test_branches_that_are_local_references_are_folded_as_what_they_point_to() -> None:
    by_city = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    by_coords = {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                 "required": ["lat", "lon"]}
    tool = Tool("get_weather", "Weather", input_schema={
        "type": "object", "$defs": {"ByCity": by_city, "ByCoords": by_coords},
        "oneOf": [{"$ref": "#/$defs/ByCity"}, {"$ref": "#/$defs/ByCoords"}],
    })
    schema = tool.to_anthropic()["input_schema"]
    assert "oneOf" not in schema and schema["properties"] == {
        "city": {"type": "string"}, "lat": {"type": "number"}, "lon": {"type": "number"}}
    assert "required" not in schema  # no property is required by both branches
    assert "$defs" not in schema  # nothing in the folded schema references them any more
    assert '"required":["lat","lon"]' in schema["description"] and "$ref" not in schema["description"]


def test_a_folded_schema_keeps_definitions_its_properties_reference_and_stops_at_a_cycle() -> None:
    definitions = {
        "Named": {"$ref": "#/definitions/Person"},  # a chain: followed
        "Person": {"properties": {"address": {"$ref": "#/definitions/Address"}}, "required": ["address"]},
        "Address": {"type": "string"},
        "Loop": {"$ref": "#/definitions/Loop"},
    }
    tool = Tool("t", input_schema={"type": "object", "definitions": definitions,
                                   "anyOf": [{"$ref": "#/definitions/Named"}, {"$ref": "#/definitions/Loop"},
                                             {"$ref": "#"}]})
    schema = tool.to_anthropic()["input_schema"]
    assert schema["properties"] == {"address": {"$ref": "#/definitions/Address"}}
    assert schema["definitions"] == definitions  # `address` still references them


# --- call ids: duplicates, none, another provider's -------------------------------------------


@pytest.mark.parametrize("ids", [("call_0", "call_0"), (None, None)], ids=["same-id", "no-ids"])
def test_chat_calls_with_a_repeated_or_missing_id_each_get_their_own(
    serve: Callable[..., RawServer], ids: tuple[str | None, str | None]
) -> None:
    calls = [{"type": "function", "function": {"name": "send_email", "arguments": json.dumps({"to": to})}}
             for to in ("a", "b")]
    for call, call_id in zip(calls, ids, strict=True):
        if call_id is not None:
            call["id"] = call_id
    server = serve(chat(tool_calls=calls, finish="tool_calls"), following_rule(check_chat, chat("done")))
    sent: list[str] = []
    result = run(OpenAIChatModel(server.openai(), "gpt-4.1"), "email a and b",
                 session=session_with(("send_email", "Send.")),
                 functions={"send_email": lambda to: sent.append(to) or "sent"}, tool_search="off")
    assert result.output == "done" and sent == ["a", "b"]
    run_ids = [r.call.id for r in result.tool_results]
    assert len(set(run_ids)) == 2 and all(run_ids)
    messages = server.requests[1][1]["messages"]
    assert [c["id"] for c in messages[-3]["tool_calls"]] == run_ids
    assert [m["tool_call_id"] for m in messages[-2:]] == run_ids
    if ids[0] is not None:
        assert run_ids == ["call_0", "call_0_2"]


def test_anthropic_tool_uses_with_one_id_each_get_their_own(serve: Callable[..., RawServer]) -> None:
    blocks = [{"type": "tool_use", "id": "toolu_1", "name": "send_email", "input": {"to": to}} for to in ("a", "b")]
    server = serve(anthropic_message(blocks, "tool_use"),
                   following_rule(check_anthropic, anthropic_message([{"type": "text", "text": "done"}])))
    result = run(AnthropicModel(server.anthropic(), "claude-sonnet-4-6"), "email a and b",
                 session=session_with(("send_email", "Send.")), functions={"send_email": lambda to: "sent"},
                 tool_search="off")
    assert result.output == "done"
    second = server.requests[1][1]["messages"]
    uses = [b["id"] for b in second[1]["content"] if b["type"] == "tool_use"]
    answers = [b["tool_use_id"] for b in second[2]["content"] if b["type"] == "tool_result"]
    assert uses == answers == ["toolu_1", "toolu_1_2"]


def test_another_providers_call_ids_are_sent_to_anthropic_in_its_id_pattern(serve: Callable[..., RawServer]) -> None:
    first = serve(chat(tool_calls=[{"id": "functions.get_time:0", "type": "function",
                                    "function": {"name": "get_time", "arguments": "{}"}}], finish="tool_calls"),
                  chat("noon"))
    earlier = run(OpenAIChatModel(first.openai(), "gpt-4.1"), "time?", session=session_with(("get_time", "Time.")),
                  functions={"get_time": lambda: "12:00"}, tool_search="off")
    history = [*earlier.messages, {"role": "assistant", "tool_calls": [{"id": "", "name": "get_time"}]},
               {"role": "tool", "tool_call_id": "", "name": "get_time", "content": "13:00"},
               {"role": "user", "content": "and in Paris?"}]
    pattern = re.compile(r"^[a-zA-Z0-9_-]+$")

    def api(path: str, body: Body) -> tuple[int, Any]:
        for m in body["messages"]:
            for b in m["content"] if isinstance(m["content"], list) else []:
                bid = b.get("id") if b.get("type") == "tool_use" else b.get("tool_use_id")
                if bid is not None and not pattern.match(bid):
                    return 400, {"type": "error", "error": {"type": "invalid_request_error",
                                 "message": f"tool_use.id: String should match pattern '{pattern.pattern}'"}}
        return anthropic_message([{"type": "text", "text": "ok"}])

    server = serve(api)
    result = run(AnthropicModel(server.anthropic(), "claude-sonnet-4-6"), history,
                 session=session_with(("get_time", "Time.")), tool_search="off")
    assert result.output == "ok"
    blocks = [b for m in server.requests[0][1]["messages"] if isinstance(m["content"], list) for b in m["content"]]
    uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
    answers = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
    assert uses == answers and len(set(uses)) == 2
    assert uses[0].startswith("functions_get_time_0_")


# --- Chat Completions: refusal, content parts, a malformed message ------------------------------


def test_a_chat_refusal_is_the_reply(serve: Callable[..., RawServer]) -> None:
    server = serve(chat(None, refusal="I can't help with that."))
    result = run(OpenAIChatModel(server.openai(), "gpt-4.1"), "hi", session=session_with(("get_time", "Time.")))
    assert result.output == "I can't help with that."


def test_a_streamed_chat_refusal_is_the_reply(serve: Callable[..., RawServer]) -> None:
    def chunk(delta: Body, finish: str | None = None) -> Body:
        return {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    server = serve((200, [chunk({"role": "assistant", "refusal": "I can't "}), chunk({"refusal": "help."}),
                          chunk({}, "stop")]))
    pieces: list[str] = []
    result = run(OpenAIChatModel(server.openai(), "gpt-4.1"), "hi", session=session_with(("get_time", "Time.")),
                 on_text=pieces.append)
    assert result.output == "I can't help." == "".join(pieces)


def test_chat_content_given_as_text_parts_is_joined(serve: Callable[..., RawServer]) -> None:
    server = serve(chat([{"type": "text", "text": "It is "}, {"type": "text", "text": "noon."}]))
    result = run(OpenAIChatModel(server.openai(), "gpt-4.1"), "hi", session=session_with(("get_time", "Time.")))
    assert result.output == "It is noon."


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ([{"type": "image_url", "image_url": {"url": "x"}}], "message.content[0]"),
        (42, "message.content"),
    ],
)
def test_chat_content_that_is_not_text_is_a_provider_error(
    serve: Callable[..., RawServer], message: Any, field: str
) -> None:
    server = serve(chat(message))
    with pytest.raises(ProviderError, match=re.escape(field)):
        run(OpenAIChatModel(server.openai(), "gpt-4.1"), "hi", session=session_with(("get_time", "Time.")))


def test_a_chat_message_that_is_not_an_object_is_a_provider_error(serve: Callable[..., RawServer]) -> None:
    server = serve((200, {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                          "choices": [{"index": 0, "message": "It is noon.", "finish_reason": "stop"}]}))
    with pytest.raises(ProviderError, match=r"choices\[0\]\.message is str"):
        run(OpenAIChatModel(server.openai(), "gpt-4.1"), "hi", session=session_with(("get_time", "Time.")))


# --- Responses: a response that failed, was cancelled or is not finished ---------------------------


def responses_body(status: str, output: list[Body], error: Body | None = None) -> Body:
    return {"id": "resp_1", "object": "response", "created_at": 1, "model": "m", "status": status, "error": error,
            "incomplete_details": None, "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": [], "usage": {"input_tokens": 5, "output_tokens": 5, "total_tokens": 10,
                                   "input_tokens_details": {"cached_tokens": 0},
                                   "output_tokens_details": {"reasoning_tokens": 0}}}


EMAIL_CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "send_email",
              "arguments": '{"to": "bob@example.com"}', "status": "completed"}
FAILED = {"code": "server_error", "message": "The model failed to generate a response."}


def emailing() -> Session:
    return session_with(("send_email", "Send."))


@pytest.mark.parametrize(
    ("status", "error", "says"),
    [
        ("failed", FAILED, "'failed' (server_error: The model failed to generate a response.): the response failed"),
        ("cancelled", None, "'cancelled': the response was cancelled before it finished"),
        ("queued", None, "'queued': the response is not finished yet (a background response)"),
    ],
    ids=["failed", "cancelled", "queued"],
)
def test_a_responses_turn_that_did_not_complete_is_a_provider_error_and_runs_nothing(
    serve: Callable[..., RawServer], status: str, error: Body | None, says: str
) -> None:
    server = serve((200, responses_body(status, [EMAIL_CALL], error)))
    sent: list[str] = []
    with pytest.raises(ProviderError, match=re.escape(f"the OpenAI Responses answer ended with {says}")) as raised:
        run(OpenAIResponsesModel(server.openai(), "gpt-4.1"), "email bob", session=emailing(),
            functions={"send_email": sent.append}, tool_search="off")
    assert sent == []  # not an answer: its call did not run
    assert raised.value.partial.requests == ()  # type: ignore[attr-defined]


def test_a_streamed_responses_turn_that_failed_is_a_provider_error(serve: Callable[..., RawServer]) -> None:
    body = responses_body("failed", [EMAIL_CALL], FAILED)
    server = serve((200, [
        {"type": "response.created", "sequence_number": 0,
         "response": {**body, "status": "in_progress", "error": None}},
        {"type": "response.failed", "sequence_number": 1, "response": body},
    ]))
    sent: list[str] = []
    with pytest.raises(ProviderError, match=re.escape("ended with 'failed' (server_error: The model failed")):
        run(OpenAIResponsesModel(server.openai(), "gpt-4.1"), "email bob", session=emailing(),
            functions={"send_email": sent.append}, tool_search="off", on_text=lambda _: None)
    assert sent == []


# --- usage figures -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["12", -1, 1.5])
def test_an_anthropic_usage_figure_that_is_not_a_count_is_a_provider_error(
    serve: Callable[..., RawServer], value: Any
) -> None:
    server = serve(anthropic_message([{"type": "text", "text": "noon"}],
                                     usage={"input_tokens": value, "output_tokens": 3}))
    with pytest.raises(ProviderError, match="'input_tokens'"):
        run(AnthropicModel(server.anthropic(), "claude-sonnet-4-6"), "hi", session=session_with(("get_time", "T.")))


def test_a_chat_usage_figure_that_is_not_a_count_is_a_provider_error(serve: Callable[..., RawServer]) -> None:
    status, body = chat("noon")
    body["usage"]["completion_tokens"] = -5  # (the SDK turns "5" into 5 itself)
    server = serve((status, body))
    with pytest.raises(ProviderError, match="'completion_tokens'"):
        run(OpenAIChatModel(server.openai(), "gpt-4.1"), "hi", session=session_with(("get_time", "Time.")))


def test_gemini_thought_tokens_are_output_tokens(serve: Callable[..., RawServer]) -> None:
    usage = {"promptTokenCount": 100, "candidatesTokenCount": 5, "thoughtsTokenCount": 900, "totalTokenCount": 1005}
    server = serve((200, gemini_reply([{"text": "It is noon."}], usage)))
    result = run(GeminiModel(server.gemini(), "gemini-2.5-flash"), "time?", session=session_with(("get_time", "T.")))
    found = result.requests[0].usage
    assert found is not None and found.output_tokens == 905
    assert found.input_tokens + found.output_tokens == found.total_tokens  # type: ignore[operator]


def test_a_gemini_part_of_the_wrong_type_is_a_provider_error(serve: Callable[..., RawServer]) -> None:
    server = serve((200, gemini_reply([{"text": "It is "}, {"text": 12}])))
    with pytest.raises(ProviderError, match=r"parts\.1\.text"):
        run(GeminiModel(server.gemini(), "gemini-2.5-flash"), "hi", session=session_with(("get_time", "Time.")))


# --- Gemini names and ids ----------------------------------------------------------------------


def test_long_gemini_names_that_start_with_a_digit_stay_apart(serve: Callable[..., RawServer]) -> None:
    a, b = "3d_print_" + "x" * 54 + "a", "3d_print_" + "x" * 54 + "b"
    assert len(wire_name(a)) == 64 and wire_name(a) != wire_name(b)
    assert GEMINI_FUNCTION_NAME.fullmatch(wire_name(a))

    def answer(path: str, body: Body) -> tuple[int, Any]:
        declared = [d["name"] for d in body["tools"][0]["functionDeclarations"]]
        assert len(set(declared)) == 2
        return 200, gemini_reply([{"functionCall": {"name": wire_name(b), "args": {}}}])

    server = serve(answer, (200, gemini_reply([{"text": "done"}])))
    ran: list[str] = []
    run(GeminiModel(server.gemini(), "gemini-2.5-flash"), "print it", session=session_with((a, "A."), (b, "B.")),
        functions={a: lambda: ran.append("a") or "a", b: lambda: ran.append("b") or "b"}, tool_search="off")
    assert ran == ["b"]
    response = server.requests[1][1]["contents"][-1]["parts"][0]["functionResponse"]
    assert response["name"] == wire_name(b)


@pytest.mark.parametrize("name", ["weather.get_forecast", "weather get forecast", "crm_" + "x" * 70])
def test_a_gemini_result_is_named_as_its_function_was_declared(name: str) -> None:
    session = session_with((name, "Weather."), pinned=[name])
    declared = [d["name"] for d in tools_for_request(session, "gemini")]
    call = {"name": declared[0], "args": {}, "id": "c1"}
    results = handle_tool_calls(session, [call], functions={name: lambda: "ok"})
    response = results[0].render("gemini")["function_response"]
    assert results[0].status.value == "ok" and response["name"] == declared[0]


def test_streamed_gemini_call_starts_carry_the_ids_the_calls_run_under(serve: Callable[..., RawServer]) -> None:
    calls = [{"functionCall": {"name": "get_time", "args": {"tz": tz}}} for tz in ("UTC", "CET")]
    usage = {"promptTokenCount": 5, "candidatesTokenCount": 5, "totalTokenCount": 10}
    server = serve((200, [gemini_reply(calls, usage)]), (200, [gemini_reply([{"text": "done"}])]))
    starts: list[str | None] = []
    result = run(GeminiModel(server.gemini(), "gemini-2.5-flash"), "time?", session=session_with(("get_time", "T.")),
                 functions={"get_time": lambda tz: tz}, tool_search="off",
                 on_event=lambda e: starts.append(e.call_id) if e.type == "tool_call_start" else None)
    ran = [r.call.id for r in result.tool_results]
    assert starts == ran and len(set(ran)) == 2 and all(ran)


# --- a stream with no events at all --------------------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True], ids=["run", "arun"])
@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
def test_an_empty_stream_was_cut_short_and_runs_nothing(
    serve: Callable[..., RawServer], kind: str, asynchronous: bool
) -> None:
    # a proxy whose upstream failed before the first event answers 200 and closes an empty event stream: no turn
    # came, which is a cut (retrying may help) exactly as a stream cut one event later is
    server = serve((200, []))
    sent: list[str] = []
    model = (AnthropicModel(server.anthropic(), "claude-sonnet-4-6") if kind == "anthropic"
             else GeminiModel(server.gemini(), "gemini-2.5-flash"))
    settings: dict[str, Any] = {
        "session": session_with(("send_money", "Send money to someone.")), "tool_search": "off", "stream": True,
        "functions": {"send_money": lambda to: sent.append(to) or "sent"},
    }
    with pytest.raises(ProviderError) as raised:
        if asynchronous:
            asyncio.run(arun(model, "Pay bob", **settings))
        else:
            run(model, "Pay bob", **settings)
    api = "Anthropic Messages" if kind == "anthropic" else "Gemini"
    assert str(raised.value).startswith(f"the {api} stream was cut short: it ended before ")
    assert (raised.value.status, raised.value.retryable) == (None, True) and "Retrying may help" in str(raised.value)
    assert sent == [] and len(server.requests) == 1


def test_an_anthropic_stream_that_ends_its_turn_without_message_start_is_no_turn(
    serve: Callable[..., RawServer],
) -> None:
    # not a cut (the turn's end came): a server that does not speak the Messages stream protocol, and no retry helps
    events = [{"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
              {"type": "message_stop"}]
    # the Anthropic SDK passes on only the events its `event:` line names
    server = serve((200, "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()))
    with pytest.raises(ProviderError, match="without ever sending message_start") as raised:
        run(AnthropicModel(server.anthropic(), "claude-sonnet-4-6"), "Hello", session=session_with(("a", "b")),
            tool_search="off", stream=True)
    assert raised.value.retryable is None
