"""A ProviderError says whether sending the request again may help, whatever the SDK under it.

Each provider's real SDK client meets the strict fake server's error answers (a rate limit with `retry-after`,
a server error, a refused request, a bad key) or no server at all; the ProviderError the run raises carries the
HTTP `status`, the `retry_after` the provider asked for and `retryable`, and its message ends with what to do.
A model built with the wrong client is refused when it is made, naming the class and what to pass.
"""

from __future__ import annotations

import socket
from typing import Any

import anthropic
import openai
import pytest
from fakes import ErrorTurn, FakeLLMServer
from fakes.e2e import make_model
from google import genai
from google.genai import types

from toolsearch import ArgumentTypeError, ProviderError, SessionManager, Tool, ToolIndex, arun, run
from toolsearch.providers import AnthropicModel, GeminiModel, OpenAIChatModel, OpenAIResponsesModel

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
