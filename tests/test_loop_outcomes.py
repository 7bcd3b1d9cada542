"""A turn that ended badly is not reported as a finished answer, whatever the provider.

The loop drives the real `openai` / `anthropic` / `google-genai` clients against the strict local
server (tests/fakes/llm_server.py), which answers with each provider's own stop reason for a cut or
withheld reply; the run's outcome says why its output is not a complete answer, and a Gemini call the
API could not read is answered with a note and retried within max_iterations.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fakes import GEMINI, FakeLLMServer, Turn
from fakes.e2e import assert_valid_request, make_model

from toolsearch import SessionManager, Tool, ToolIndex
from toolsearch.loop import LoopOutcome, arun, run
from toolsearch.providers import OpenAIChatModel, OpenAIResponsesModel
from toolsearch.session import Session

CUT = "The report begins: first, the"

# (provider, its stop reason, the outcome it means: LoopOutcome.TRUNCATED or REFUSED, by value)
STOPS = [
    ("openai_chat", "length", "truncated"),
    ("openai_chat", "content_filter", "refused"),
    ("openai_responses", "max_output_tokens", "truncated"),
    ("openai_responses", "content_filter", "refused"),
    ("anthropic", "max_tokens", "truncated"),
    ("anthropic", "refusal", "refused"),
    ("gemini", "MAX_TOKENS", "truncated"),
    ("gemini", "SAFETY", "refused"),
    ("gemini", "PROHIBITED_CONTENT", "refused"),
    ("gemini", "LANGUAGE", "refused"),
]


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


def session_with(*names: str) -> Session:
    index = ToolIndex.build([Tool(name, f"{name} tool.") for name in names or ("get_time",)], backend="regex")
    return SessionManager(index).create("s")


@pytest.mark.parametrize(("kind", "reason", "outcome"), STOPS)
@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "streamed"])
def test_a_cut_or_withheld_answer_has_its_own_outcome_and_keeps_its_text(
    server: FakeLLMServer, kind: str, reason: str, outcome: str, streamed: bool
) -> None:
    server.enqueue(Turn(text=CUT, stop_reason=reason))
    pieces: list[str] = []
    result = run(make_model(kind, server), "Write a long report", session=session_with(),
                 on_text=pieces.append if streamed else None)
    assert (result.outcome.value, result.output) == (outcome, CUT)
    assert result.iterations == 1 and result.messages[-1].content == CUT
    assert result.to_dict()["outcome"] == outcome


@pytest.mark.parametrize(("kind", "reason", "outcome"), STOPS[::2])
def test_async_runs_report_the_same_outcomes(
    server: FakeLLMServer, kind: str, reason: str, outcome: str
) -> None:
    server.enqueue(Turn(text=CUT, stop_reason=reason))
    result = asyncio.run(arun(make_model(kind, server, asynchronous=True), "Write a long report",
                              session=session_with()))
    assert (result.outcome.value, result.output) == (outcome, CUT)


@pytest.mark.parametrize("kind", ["openai_chat", "openai_responses", "anthropic", "gemini"])
def test_a_normal_end_is_still_completed(server: FakeLLMServer, kind: str) -> None:
    server.enqueue(Turn(text="It is noon."))
    result = run(make_model(kind, server), "What time is it?", session=session_with())
    assert (result.outcome, result.output) == (LoopOutcome.COMPLETED, "It is noon.")


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "streamed"])
@pytest.mark.parametrize("reason", ["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"])
def test_a_gemini_call_the_api_could_not_read_is_retried_with_a_note(
    server: FakeLLMServer, streamed: bool, reason: str
) -> None:
    server.enqueue(Turn(stop_reason=reason), Turn(text="It is noon."))
    result = run(make_model("gemini", server), "What time is it?", session=session_with(),
                 on_text=(lambda _: None) if streamed else None)
    assert (result.outcome, result.output) == (LoopOutcome.COMPLETED, "It is noon.")
    assert [r.stop_reason for r in result.requests] == [reason, "STOP"]
    retry = server.requests_for(GEMINI)[1]
    assert_valid_request(retry)  # the strict server's Gemini rules: the empty reply is left out, the note is sent
    note = retry.messages[-1]
    assert note["role"] == "user" and reason in note["parts"][0]["text"]
    assert "valid JSON object" in note["parts"][0]["text"]
    assert [m.role for m in result.messages] == ["user", "assistant", "user", "assistant"]


def test_a_gemini_call_never_read_ends_at_max_iterations_not_as_an_answer(server: FakeLLMServer) -> None:
    server.enqueue(Turn(stop_reason="MALFORMED_FUNCTION_CALL"), Turn(stop_reason="MALFORMED_FUNCTION_CALL"))
    result = run(make_model("gemini", server), "What time is it?", session=session_with(), max_iterations=2)
    assert result.outcome is LoopOutcome.MAX_ITERATIONS and result.iterations == 2
    assert "before the model gave an answer" in result.output


# --- replies the scripted server never writes: an OpenAI refusal field or part -----------------------


class _OneReply:
    """A local server that answers every POST with one JSON body (an OpenAI reply the fake server never writes)."""

    def __init__(self, body: dict[str, Any]) -> None:
        payload = json.dumps(body).encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def openai(self) -> Any:
        import openai

        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.httpd.server_address[1]}/v1", api_key="x",
                             max_retries=0)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


REFUSAL = "I can't help with that request."
USAGE = {"input_tokens": 5, "output_tokens": 5, "total_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
         "output_tokens_details": {"reasoning_tokens": 0}}


def test_an_openai_refusal_is_refused_with_its_text() -> None:
    chat = _OneReply({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": None, "refusal": REFUSAL}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
    })
    responses = _OneReply({
        "id": "resp_1", "object": "response", "created_at": 1, "model": "m", "status": "completed",
        "output": [{"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                    "content": [{"type": "refusal", "refusal": REFUSAL}]}],
        "usage": USAGE, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
    })
    try:
        for model in (OpenAIChatModel(chat.openai(), "gpt-4.1"), OpenAIResponsesModel(responses.openai(), "gpt-4.1")):
            result = run(model, "hi", session=session_with())
            assert (result.outcome.value, result.output) == ("refused", REFUSAL)
    finally:
        chat.close()
        responses.close()
