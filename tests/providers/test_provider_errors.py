"""A ProviderError says whether sending the request again may help, whatever the SDK under it.

Each provider's real SDK client meets the strict fake server's error answers (a rate limit with `retry-after`,
a server error, a refused request, a bad key) or no server at all; the ProviderError the run raises carries the
HTTP `status`, the `retry_after` the provider asked for and `retryable`, and its message ends with what to do.
A model built with the wrong client is refused when it is made, naming the class and what to pass.
An error a stream reports after its HTTP 200 (Anthropic's overload event) is judged by its type, not by that 200;
a Gemini prompt blocked for safety, streamed or not, is refused as it is, never a stream cut short.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from fakes import ErrorTurn, FakeLLMServer
from fakes.e2e import make_model
from google import genai
from google.genai import types
from test_reply_faults import serve, session_with

from toolsearch import ArgumentTypeError, ProviderError, SessionManager, Tool, ToolIndex, arun, run
from toolsearch.providers import AnthropicModel, GeminiModel, OpenAIChatModel, OpenAIResponsesModel

__all__ = ["serve"]  # the fixture, shared with test_reply_faults

FORMATS = ["openai_chat", "openai_responses", "anthropic", "gemini"]


def failed_run(kind: str, error: ErrorTurn) -> ProviderError:
    session = SessionManager(ToolIndex.build([Tool("get_time", "Current time.")], backend="regex")).create("s")
    with FakeLLMServer(error) as server, pytest.raises(ProviderError) as raised:
        run(make_model(kind, server), "What time is it?", session=session)
    return raised.value


@pytest.mark.parametrize("kind", FORMATS)
def test_a_rate_limit_says_to_retry_after_the_wait_the_provider_asked_for(kind: str) -> None:
    error = failed_run(kind, ErrorTurn(429, "Rate limit reached", headers={"retry-after": "7"}))
    assert (error.status, error.retry_after, error.retryable) == (429, 7.0, True)
    assert str(error).endswith(
        ". Retrying may help (HTTP 429): the provider asked to wait 7 s before sending it again."
    )
    assert error.partial.outcome.value == "error"  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", FORMATS)
def test_a_server_error_may_be_retried(kind: str) -> None:
    error = failed_run(kind, ErrorTurn(503, "The server is overloaded"))
    assert (error.status, error.retry_after, error.retryable) == (503, None, True)
    assert str(error).endswith(". Retrying may help (HTTP 503): send it again after a short wait.")


@pytest.mark.parametrize("kind", FORMATS)
def test_a_refused_request_says_retrying_will_not_help(kind: str) -> None:
    error = failed_run(kind, ErrorTurn(400, "Invalid 'tools[0]'"))
    assert (error.status, error.retryable) == (400, False)
    assert str(error).endswith(
        ". Retrying will not help (HTTP 400: the provider refused this request as it is): fix what the provider "
        "names in the request."
    )


def test_a_bad_key_says_to_check_it() -> None:
    error = failed_run("anthropic", ErrorTurn(401, "invalid x-api-key"))
    assert (error.status, error.retryable) == (401, False) and str(error).endswith(": check the API key.")


def test_a_quota_used_up_is_no_rate_limit_to_wait_out() -> None:
    error = failed_run("openai_chat", ErrorTurn(429, "You exceeded your current quota", code="insufficient_quota"))
    assert (error.status, error.retryable) == (429, False)


def test_the_providers_own_advice_on_retrying_wins() -> None:
    error = failed_run("openai_chat", ErrorTurn(500, "Do not retry this one", headers={"x-should-retry": "false"}))
    assert (error.status, error.retryable) == (500, False)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("asynchronous", [False, True], ids=["run", "arun"])
def test_no_answer_at_all_may_be_retried(asynchronous: bool) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    session = SessionManager(ToolIndex.build([Tool("get_time", "Current time.")], backend="regex")).create("s")
    model = AnthropicModel(anthropic.Anthropic(api_key="x", base_url=url, max_retries=0), "claude-sonnet-4-6")
    with pytest.raises(ProviderError) as raised:
        if asynchronous:
            import asyncio

            asyncio.run(arun(model, "hi", session=session))
        else:
            run(model, "hi", session=session)
    error = raised.value
    assert (error.status, error.retry_after, error.retryable) == (None, None, True)
    assert "Retrying may help (no answer came)" in str(error)


# --- errors inside an answer ---------------------------------------------------------------------------


class ErrorMidStream(httpx2.BaseTransport):
    """Anthropic as it fails mid-answer: the HTTP 200 stream's events after `message_start` give way to an `error`
    event (its streaming docs: `event: error`, `{"type": "error", "error": {"type": "overloaded_error", ...}}`)."""

    inner = httpx2.HTTPTransport()

    def __init__(self, error_type: str) -> None:
        self.error_type = error_type

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self.inner.handle_request(request)
        started = response.read().split(b"\n\n")[0] + b"\n\n"
        error = {"type": "error", "error": {"type": self.error_type, "message": "Overloaded"}}
        dropped = ("content-length", "transfer-encoding")
        headers = {k: v for k, v in response.headers.items() if k.lower() not in dropped}
        return httpx2.Response(200, headers=headers,
                               content=started + f"event: error\ndata: {json.dumps(error)}\n\n".encode())


@pytest.mark.parametrize(
    ("error_type", "retryable"),
    [("overloaded_error", True), ("api_error", True), ("rate_limit_error", True), ("invalid_request_error", None)],
)
def test_an_error_a_stream_reports_after_its_http_200_is_judged_by_its_type(
    error_type: str, retryable: bool | None
) -> None:
    session = SessionManager(ToolIndex.build([Tool("get_time", "Current time.")], backend="regex")).create("s")
    with FakeLLMServer("It is noon.") as server, pytest.raises(ProviderError) as raised:
        client = server.anthropic(http_client=httpx2.Client(transport=ErrorMidStream(error_type)))
        run(AnthropicModel(client, "claude-sonnet-4-6"), "What time is it?", session=session, stream=True)
    error = raised.value
    assert (error.status, error.retryable) == (None, retryable)  # the 200 says nothing of the error
    assert "HTTP 200" not in str(error) and "Retrying will not help" not in str(error)
    if retryable:
        assert str(error).endswith(
            f". Retrying may help (the provider reported {error_type}): send it again after a short wait."
        )


@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
def test_a_gemini_prompt_blocked_for_safety_is_refused_as_it_is(serve: Any, stream: bool) -> None:
    blocked = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
               "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3}}
    server = serve((200, [blocked] if stream else blocked))  # streamed: that one chunk, no candidate
    with pytest.raises(ProviderError) as raised:
        run(GeminiModel(server.gemini(), "gemini-2.5-flash"), "hi", session=session_with(("t", "d")),
            tool_search="off", stream=stream)
    assert str(raised.value) == (
        "Gemini returned no candidate (prompt feedback: {'block_reason': 'PROHIBITED_CONTENT'}). Retrying will not "
        "help (the prompt was blocked): change the prompt, or the request's safety_settings."
    )
    assert (raised.value.status, raised.value.retryable) == (None, False)


# --- the wrong client ----------------------------------------------------------------------------------


OPENAI = openai.OpenAI(api_key="x", base_url="http://127.0.0.1:9/v1")
ANTHROPIC = anthropic.Anthropic(api_key="x", base_url="http://127.0.0.1:9")
GEMINI = genai.Client(api_key="x", http_options=types.HttpOptions(base_url="http://127.0.0.1:9"))


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda: OpenAIChatModel(ANTHROPIC, "gpt-4.1"), "OpenAIChatModel needs an OpenAI client"),
        (lambda: OpenAIChatModel("gpt-4.1", OPENAI), "OpenAIChatModel needs an OpenAI client"),  # swapped
        (lambda: OpenAIResponsesModel(None, "gpt-4.1"), "OpenAIResponsesModel needs an OpenAI client"),
        (lambda: AnthropicModel(OPENAI, "claude-sonnet-4-6"), "AnthropicModel needs an Anthropic client"),
        (lambda: GeminiModel(OPENAI, "gemini-2.5-flash"), "GeminiModel needs a google-genai client"),
        (lambda: GeminiModel(ANTHROPIC, "gemini-2.5-flash"), "GeminiModel needs a google-genai client"),
        (lambda: OpenAIChatModel(OPENAI, OPENAI), "OpenAIChatModel needs the model's name as its second argument"),
    ],
    ids=["anthropic-for-chat", "swapped", "none", "openai-for-anthropic", "openai-for-gemini", "anthropic-for-gemini",
         "client-for-name"],
)
def test_a_model_made_with_the_wrong_client_is_refused_when_made(make: Any, said: str) -> None:
    with pytest.raises(ArgumentTypeError, match=f"^{said}") as raised:
        make()
    assert "pass " in str(raised.value)


def test_the_right_clients_and_wrapped_ones_are_taken() -> None:
    class Wrapped:  # an instrumented client: anything with the endpoint the model calls
        def __init__(self, inner: Any) -> None:
            self.chat = inner.chat

    OpenAIChatModel(OPENAI, "gpt-4.1")
    OpenAIChatModel(Wrapped(OPENAI), "gpt-4.1")
    OpenAIResponsesModel(openai.AsyncOpenAI(api_key="x", base_url="http://127.0.0.1:9/v1"), "gpt-4.1")
    AnthropicModel(ANTHROPIC, "claude-sonnet-4-6")
    GeminiModel(GEMINI, "gemini-2.5-flash")
