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
from typing import Any, get_args

import pytest
from fakes import GEMINI, FakeLLMServer, Turn
from fakes.e2e import assert_valid_request, make_model
from fakes.loop_tools import SENT, send_email, sessions_over

from toolsearch import ProviderError, SessionManager, Tool, ToolIndex
from toolsearch.loop import LoopOutcome, ResultStatus, arun, run
from toolsearch.providers import OpenAIChatModel, OpenAIResponsesModel, StopKind
from toolsearch.providers._wire import STOP_ERRORS, STOP_KINDS
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
    ("gemini", "OTHER", "refused"),  # stopped for a reason the API does not name: not an answer, and no token limit
    ("gemini", "CONTINUATION", "truncated"),
    ("gemini", "MODEL_ARMOR", "refused"),
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
@pytest.mark.parametrize(
    "reason", ["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS", "MALFORMED_RESPONSE"]
)
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


def test_every_gemini_finish_reason_but_a_normal_end_is_mapped() -> None:
    from google.genai import types

    normal = {"STOP", "FINISH_REASON_UNSPECIFIED"}
    unmapped = [r.value for r in types.FinishReason if r.value not in normal | set(STOP_KINDS) | set(STOP_ERRORS)]
    assert not unmapped, f"the installed google-genai has finish reasons no table maps: {unmapped}"
    assert set(STOP_KINDS.values()) <= set(get_args(StopKind))  # and the kinds are toolsearch.providers' StopKind


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "streamed"])
@pytest.mark.parametrize(
    ("reason", "says"),
    [("MISSING_THOUGHT_SIGNATURE", "resume from messages saved with LoopResult.to_dict()"),
     ("PUP_LIMITED_DISABLED", "the account is limited or disabled")],
)
def test_a_gemini_stop_that_means_the_request_failed_is_a_provider_error(
    server: FakeLLMServer, reason: str, says: str, streamed: bool
) -> None:
    server.enqueue(Turn(text="", stop_reason=reason))
    with pytest.raises(ProviderError, match=f"^the Gemini answer ended with '{reason}': ") as raised:
        run(make_model("gemini", server), "What time is it?", session=session_with(),
            on_text=(lambda _: None) if streamed else None)
    assert says in str(raised.value)  # what happened, and what to do: not a run COMPLETED with no answer
    assert raised.value.partial.outcome is LoopOutcome.ERROR  # type: ignore[attr-defined]


# --- a reply cut while it wrote tool calls runs none of them ----------------------------------------------

EMAIL = ("send_email", {"to": "bob@example.com", "subject": "Hi", "body": "Hello Bob, the report is"})
CUT_CALLS = [
    ("openai_chat", "length", "truncated"),
    ("openai_chat", "content_filter", "refused"),
    ("openai_responses", "max_output_tokens", "truncated"),
    ("anthropic", "max_tokens", "truncated"),
    ("gemini", "MAX_TOKENS", "truncated"),
    ("gemini", "OTHER", "refused"),
]


@pytest.mark.parametrize(("kind", "reason", "outcome"), CUT_CALLS)
@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "streamed"])
def test_a_reply_cut_while_it_held_tool_calls_runs_none_and_resumes(
    server: FakeLLMServer, kind: str, reason: str, outcome: str, streamed: bool
) -> None:
    sessions = sessions_over({"send_email": send_email})
    server.enqueue(Turn(text="Emailing Bob now.", tool_calls=[EMAIL, ("tool_search", {"query": "cal"})],
                        stop_reason=reason))
    result = run(make_model(kind, server), "Email Bob the report", session=sessions.create("s", pinned=["send_email"]),
                 functions={"send_email": send_email}, on_text=(lambda _: None) if streamed else None)
    assert SENT == []  # nothing with side effects ran on arguments that may be cut
    assert result.outcome.value == outcome and result.iterations == 1
    assert [(r.call.name, r.status) for r in result.tool_results] == [
        ("send_email", ResultStatus.SKIPPED), ("tool_search", ResultStatus.SKIPPED)
    ]
    word = "incomplete" if kind == "openai_responses" else reason  # a Responses turn's stop reason is its status
    assert f"Not run: your reply stopped with '{word}'" in result.tool_results[0].content
    assert result.output.startswith("The run stopped after 1 model request(s), before the model gave an answer (")
    assert f"stopped with '{word}'" in result.output
    assert "'send_email', 'tool_search', which did not run" in result.output
    assert result.searches == ()
    # every call is answered, so the history resumes on the strict server as it is
    server.enqueue(Turn(text="Done."))
    again = run(make_model(kind, server), [*result.messages, "Go on"], session=sessions.get("s"),
                functions={"send_email": send_email})
    assert (again.outcome, again.output) == (LoopOutcome.COMPLETED, "Done.")


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
