"""A stream that ends cleanly but too soon is no answer: a ProviderError naming the provider, and no call of it runs.

A proxy or gateway whose upstream fails mid-answer closes the stream as if it were done: no `finish_reason` chunk
(Chat Completions), no `message_delta` / `message_stop` (Anthropic), no chunk with a `finishReason` (Gemini), no
`response.completed` (Responses). The strict fake server renders each provider's real stream; a transport of the
SDK's own HTTP library (httpx2) stands for the proxy and drops the stream from the event that ends the turn on,
closing the body cleanly. Every call of the cut turn arrived whole, and none may run.

Some OpenAI-compatible servers never send a `finish_reason` (`""` or null on every chunk: qualcomm/GenieX#1243,
aaamoon/copilot-gpt4-service#239, Geniucker/CoGPT#19) but close each stream with `data: [DONE]`, which a cut stream
lacks. Such a Chat Completions turn is the answer, with a warning, when its calls' arguments are whole; one that
stopped inside a call's arguments raises, without saying a retry may help, and names `stream=False`.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import httpx2
import pytest
from fakes import FakeLLMServer, Turn

from toolsearch import ProviderError, SessionManager, Tool, ToolIndex, arun, run
from toolsearch.providers import AnthropicModel, GeminiModel, OpenAIChatModel, OpenAIResponsesModel

FORMATS = ["openai_chat", "openai_responses", "anthropic", "gemini"]
API = {
    "openai_chat": "OpenAI Chat Completions",
    "openai_responses": "OpenAI Responses",
    "anthropic": "Anthropic Messages",
    "gemini": "Gemini",
}
SEND = Tool("send_money", "Send money to someone.", {"type": "object", "properties": {"to": {"type": "string"}}})


def _ends_the_turn(data: dict[str, Any]) -> bool:
    """Whether a stream event is (or follows) the one that says the provider finished the turn."""
    if data.get("type") in ("message_delta", "message_stop", "response.completed"):
        return True
    if any(choice.get("finish_reason") for choice in data.get("choices") or ()):
        return True
    return any(candidate.get("finishReason") for candidate in data.get("candidates") or ())


def _cut(response: httpx2.Response, body: bytes) -> httpx2.Response:
    """What a proxy whose upstream failed as the turn ended passes on: a stream's events before its end, and the
    body then closes cleanly (no transport error: the client reads a stream that just stopped)."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        return httpx2.Response(response.status_code, headers=response.headers, content=body)
    kept = []
    for event in body.split(b"\n\n"):
        data = next((line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")), b"")
        if data and data != b"[DONE]" and _ends_the_turn(json.loads(data)):
            break
        kept.append(event + b"\n\n")
    headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "transfer-encoding")}
    return httpx2.Response(response.status_code, headers=headers, content=b"".join(kept))


class CutAtTheEnd(httpx2.BaseTransport):
    inner = httpx2.HTTPTransport()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self.inner.handle_request(request)
        return _cut(response, response.read())


class AsyncCutAtTheEnd(httpx2.AsyncBaseTransport):
    inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        return _cut(response, await response.aread())


def cut_model(kind: str, server: FakeLLMServer) -> Any:
    """A provider model over its real SDK client, whose streams pass through `CutAtTheEnd` (Gemini's async
    calls, which arun makes, through `AsyncCutAtTheEnd`)."""
    http = httpx2.Client(transport=CutAtTheEnd())
    if kind == "anthropic":
        return AnthropicModel(server.anthropic(http_client=http), "claude-sonnet-4-6")
    if kind == "gemini":
        from google.genai import types

        options = types.HttpOptions(
            base_url=server.gemini_base_url, api_version="v1beta", httpx_client=http,
            httpx_async_client=httpx2.AsyncClient(transport=AsyncCutAtTheEnd()),
            retry_options=types.HttpRetryOptions(attempts=1),
        )
        return GeminiModel(server.gemini(http_options=options), "gemini-2.5-flash")
    model_class = OpenAIChatModel if kind == "openai_chat" else OpenAIResponsesModel
    return model_class(server.openai(http_client=http), "gpt-4.1")


@pytest.mark.parametrize("asynchronous", [False, True], ids=["run", "arun"])
@pytest.mark.parametrize("kind", FORMATS)
def test_a_turn_of_calls_cut_before_its_end_raises_and_runs_none(kind: str, asynchronous: bool) -> None:
    sent: list[str] = []
    # two calls: Gemini streams each call whole in a chunk of its own, the last chunk carrying the finish reason
    turn = Turn(tool_calls=[("send_money", {"to": "bob"}), ("send_money", {"to": "alice"})])
    session = SessionManager(ToolIndex.build([SEND], backend="regex")).create("s")
    with FakeLLMServer(turn, "Sent.") as server:
        settings: dict[str, Any] = {
            "session": session, "functions": {"send_money": lambda to: sent.append(to) or "sent"},
            "tool_search": "off", "stream": True,
        }
        with pytest.raises(ProviderError) as raised:
            if asynchronous:
                asyncio.run(arun(cut_model(kind, server), "Pay bob and alice", **settings))
            else:
                run(cut_model(kind, server), "Pay bob and alice", **settings)
        assert len(server.requests) == 1  # the run stopped at the cut turn
    assert sent == []  # not even the calls whose arguments arrived whole
    error = raised.value
    assert str(error).startswith(f"the {API[kind]} stream was cut short: it ended before ")
    assert "none of its tool calls ran" in str(error) and "Retrying may help" in str(error)
    assert (error.status, error.retryable) == (None, True)
    partial = error.partial  # type: ignore[attr-defined]
    assert partial.tool_results == () and [m.role for m in partial.messages] == ["user"]


@pytest.mark.parametrize("kind", FORMATS)
def test_a_text_answer_cut_before_its_end_is_no_completed_answer(kind: str) -> None:
    session = SessionManager(ToolIndex.build([SEND], backend="regex")).create("s")
    answer = "Do NOT approve the transfer unless the customer calls back."
    with FakeLLMServer(answer) as server, pytest.raises(ProviderError, match=f"^the {API[kind]} stream was cut short"):
        run(cut_model(kind, server), "Transfer summary please", session=session, tool_search="off", stream=True)


# --- servers that never send a finish_reason --------------------------------------------------------


def _without_finish_reason(body: bytes, pieces: int | None) -> bytes:
    """A Chat Completions stream as a server that never sends a finish_reason streams it: `""` in every chunk, and
    `data: [DONE]` at the end; with `pieces`, one that stops after that many argument pieces of its call (and
    still ends with `[DONE]`)."""
    kept, seen = [], 0
    for event in body.split(b"\n\n"):
        data = event[5:].strip() if event.startswith(b"data:") else b""
        if not data or data == b"[DONE]":
            continue
        chunk = json.loads(data)
        for choice in chunk.get("choices") or ():
            choice["finish_reason"] = ""
            seen += sum(1 for c in (choice.get("delta") or {}).get("tool_calls") or () if "id" not in c)
        if pieces is not None and seen > pieces:
            break
        kept.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    return b"".join(kept) + b"data: [DONE]\n\n"


def _rewritten(response: httpx2.Response, body: bytes, pieces: int | None) -> httpx2.Response:
    headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "transfer-encoding")}
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        body = _without_finish_reason(body, pieces)
    return httpx2.Response(response.status_code, headers=headers, content=body)


class NoFinishReason(httpx2.BaseTransport):
    inner = httpx2.HTTPTransport()

    def __init__(self, pieces: int | None = None) -> None:
        self.pieces = pieces

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self.inner.handle_request(request)
        return _rewritten(response, response.read(), self.pieces)


class AsyncNoFinishReason(httpx2.AsyncBaseTransport):
    inner = httpx2.AsyncHTTPTransport()

    def __init__(self, pieces: int | None = None) -> None:
        self.pieces = pieces

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        return _rewritten(response, await response.aread(), self.pieces)


def no_finish_reason_model(server: FakeLLMServer, client: str, pieces: int | None = None) -> OpenAIChatModel:
    if client == "async-client":
        http = httpx2.AsyncClient(transport=AsyncNoFinishReason(pieces))
        return OpenAIChatModel(server.async_openai(http_client=http), "qwen3")
    return OpenAIChatModel(server.openai(http_client=httpx2.Client(transport=NoFinishReason(pieces))), "qwen3")


def run_either(how: str, model: OpenAIChatModel, prompt: str, **settings: Any) -> Any:
    if how == "arun":
        return asyncio.run(arun(model, prompt, **settings))
    return run(model, prompt, **settings)


CLIENTS = ["sync-client", "async-client"]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("how", ["run", "arun"])
def test_a_server_that_never_sends_a_finish_reason_still_answers(how: str, client: str) -> None:
    sent: list[str] = []
    session = SessionManager(ToolIndex.build([SEND], backend="regex")).create("s")
    turn = Turn(tool_calls=[("send_money", {"to": "bob"}), ("send_money", {"to": "alice"})])
    with FakeLLMServer(turn, "Sent to both.") as server, pytest.warns(UserWarning) as warned:
        result = run_either(how, no_finish_reason_model(server, client), "Pay bob and alice", session=session,
                            functions={"send_money": lambda to: sent.append(to) or "sent"}, tool_search="off",
                            stream=True)
    assert (result.outcome.value, result.output, sent) == ("completed", "Sent to both.", ["bob", "alice"])
    said = [str(w.message) for w in warned if "finish_reason" in str(w.message)]
    assert said and said[0].startswith(
        "the OpenAI Chat Completions stream of model 'qwen3' ended without a finish_reason. Some OpenAI-compatible "
        "servers never send a finish_reason (\"\" or null on every chunk): the answer was taken as whole because "
        "the server closed the stream normally"
    )
    assert "stream=False" in said[0]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_stream_that_stops_inside_a_calls_arguments_without_a_finish_reason_runs_nothing(client: str) -> None:
    sent: list[str] = []
    session = SessionManager(ToolIndex.build([SEND], backend="regex")).create("s")
    turn = Turn(tool_calls=[("send_money", {"to": "bob", "memo": "rent for march"})])
    with FakeLLMServer(turn, "Sent.") as server, pytest.raises(ProviderError) as raised:
        run(no_finish_reason_model(server, client, pieces=1), "Pay bob", session=session,
            functions={"send_money": lambda to, memo="": sent.append(to) or "sent"}, tool_search="off", stream=True)
    assert sent == []
    error = raised.value
    assert str(error).startswith(
        "the OpenAI Chat Completions stream ended without a finish_reason while its tool call 'send_money' was "
        "unfinished (arguments "
    )
    assert "none of its tool calls ran" in str(error) and "never send a finish_reason" in str(error)
    assert "stream=False" in str(error)
    assert "Retrying may help" not in str(error) and (error.status, error.retryable) == (None, None)


def test_without_a_finish_reason_and_without_done_the_stream_was_cut_short() -> None:
    session = SessionManager(ToolIndex.build([SEND], backend="regex")).create("s")
    with FakeLLMServer("Do NOT approve the transfer.") as server, pytest.raises(ProviderError) as raised:
        run(cut_model("openai_chat", server), "Transfer summary please", session=session, tool_search="off",
            stream=True)
    assert "and without `data: [DONE]`" in str(raised.value) and "stream=False" in str(raised.value)
    assert raised.value.retryable is True


class AwaitableStreams:
    """An async client wrapped as some instrumentation wraps one: `chat.completions.create` is a plain function that
    hands back the async SDK's awaitable, so the stream is opened behind it."""

    def __init__(self, client: Any) -> None:
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=lambda **payload: client.chat.completions.create(
            **payload
        )))


def test_a_stream_opened_behind_an_awaitable_is_watched_for_done_too() -> None:
    session = SessionManager(ToolIndex.build([SEND], backend="regex")).create("s")
    with FakeLLMServer("Do NOT approve the transfer.") as server, pytest.raises(ProviderError) as raised:
        client = server.async_openai(http_client=httpx2.AsyncClient(transport=AsyncCutAtTheEnd()))
        run(OpenAIChatModel(AwaitableStreams(client), "gpt-4.1"), "Transfer summary please", session=session,
            tool_search="off", stream=True)
    assert "and without `data: [DONE]`" in str(raised.value) and raised.value.retryable is True
