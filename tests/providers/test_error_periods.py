"""An SDK message that ends its own sentence gets no second full stop before the advice on retrying.

The real OpenAI client (sync and async) asks the strict fake server for a turn that never comes: the server holds
the request until the client's timeout gives up, and the SDK raises `APITimeoutError("Request timed out.")`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Literal

import pytest
from fakes import FakeLLMServer, Request, Turn

from toolsearch import ProviderError, SessionManager, Tool, ToolIndex, arun, run
from toolsearch.providers import OpenAIChatModel


@pytest.fixture()
def stalled_server() -> Iterator[FakeLLMServer]:
    """A server that answers no request until the test is over."""
    released = threading.Event()

    def stall(request: Request) -> Turn:
        released.wait(30)
        return Turn(text="too late")

    with FakeLLMServer(policy=stall) as server:
        try:
            yield server
        finally:
            released.set()


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "unstreamed"])
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_timed_out_request_reads_one_full_stop_before_the_advice(
    stalled_server: FakeLLMServer, driver: Literal["sync", "async"], stream: bool
) -> None:
    # Before: "OpenAI request failed: APITimeoutError: Request timed out.. Retrying may help ...".
    session = SessionManager(ToolIndex.build([Tool("get_time", "Current time.")], backend="regex")).create("s")
    client = stalled_server.async_openai(timeout=0.5) if driver == "async" else stalled_server.openai(timeout=0.5)
    model = OpenAIChatModel(client, "gpt-4.1")
    with pytest.raises(ProviderError) as raised:
        if driver == "async":
            asyncio.run(arun(model, "What time is it?", session=session, stream=stream))
        else:
            run(model, "What time is it?", session=session, stream=stream)
    assert str(raised.value) == (
        "OpenAI request failed: APITimeoutError: Request timed out. Retrying may help (no answer came): send it "
        "again after a short wait."
    )
    assert raised.value.retryable is True
