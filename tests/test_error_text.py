"""An error quoted in a message reads `Name: message`, or `Name` alone when its message is empty: never a dangling
`Name: `, at every place that quotes one (`toolsearch._errors.named_error` holds the rule).

Each place a public call reaches is met with the exception that says nothing as it comes: a tool that raises
`TimeoutError()` (what `asyncio.wait_for` raises), a handler doing the same under a run, a usage store timing out, a
wire-format plug-in whose `assert` fails, a backend plug-in whose reader raises a bare `EOFError()` and redis-py's
bare errors. The places only a damaged model or graph file reaches (the embedding model, the onnx query graph) use
the same helper, which is checked here on its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
import redis.exceptions
from fakes.loop_tools import SENT, send_email, sessions_over, weather_forecast

from toolsearch import ArgumentTypeError, IndexFormatError, PluginWarning, Tool, ToolIndex
from toolsearch._errors import joined_sentences, named_error
from toolsearch.backends import BACKENDS, BackendSpec, get_backend_spec, register_backend
from toolsearch.executor import ResultStatus, ahandle_tool_calls, handle_tool_calls
from toolsearch.loop import LoopOutcome, run
from toolsearch.providers import ScriptedModel, ToolCall, WireFormat, call, parse_tool_call, register_format, search
from toolsearch.providers import registry as formats
from toolsearch.session import SessionManager
from toolsearch.stores.redis import redis_failure
from toolsearch.usage import PendingSearch, UsageLog, UsageRecorder

# --- the rule, once -----------------------------------------------------------------------------------------


def test_an_exception_is_named_with_its_message_or_alone() -> None:
    assert named_error(ValueError("bad row 3")) == "ValueError: bad row 3"
    assert named_error(TimeoutError()) == "TimeoutError"
    assert named_error(OSError()) == "OSError"
    assert named_error(KeyError("call_id")) == "KeyError: 'call_id'"  # a KeyError quotes its key, as str() does
    assert named_error(KeyError()) == "KeyError"
    # the message as the caller shows it (cut, on one line): its emptiness decides, not the exception's
    for message, named in [("no\n  vocab", "RuntimeError: no vocab"), (" \n", "RuntimeError")]:
        assert named_error(RuntimeError(message), " ".join(message.split())) == named


def test_a_sentence_joined_after_one_that_ended_gets_no_second_stop() -> None:
    assert joined_sentences("APITimeoutError: Request timed out.", "Retry.") == (
        "APITimeoutError: Request timed out. Retry.")
    assert joined_sentences("Overloaded!", "Retry.") == "Overloaded! Retry."
    assert joined_sentences("Is the key right?", "Retry.") == "Is the key right? Retry."
    assert joined_sentences("Error code: 503 - {'error': 'down'}", "Retry.") == (
        "Error code: 503 - {'error': 'down'}. Retry.")
    assert joined_sentences("Connection error.\n", "Retry.") == "Connection error. Retry."
    assert joined_sentences("APITimeoutError", "") == "APITimeoutError"  # no advice: the text as it is


# --- a failed tool call, through the real executor -----------------------------------------------------------


def fetch_page(url: str) -> str:
    """Fetch a web page."""
    raise TimeoutError()  # what asyncio.wait_for and many clients raise: no message


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_tool_that_raises_an_empty_timeout_error_is_named_without_a_dangling_colon(
    driver: Literal["sync", "async"]
) -> None:
    # Before: "Tool 'fetch_page' failed: TimeoutError: " (the model read a sentence cut off after the colon).
    functions = {"fetch_page": fetch_page}
    session = SessionManager(ToolIndex.build([Tool.from_callable(fetch_page)], backend="bm25")).create("s")
    session.discover(["fetch_page"])
    calls = [call("fetch_page", url="https://example.com", id="f")]
    if driver == "sync":
        (result,) = handle_tool_calls(session, calls, functions)
    else:
        (result,) = asyncio.run(ahandle_tool_calls(session, calls, functions))
    assert (result.status, result.content) == (ResultStatus.ERROR, "Tool 'fetch_page' failed: TimeoutError")


# --- a failed run -----------------------------------------------------------------------------------------------


def test_a_run_that_fails_with_an_empty_error_ends_its_output_without_a_colon() -> None:
    # Before: "The run failed with TimeoutError after 2 model request(s): " (only a BaseException was spared that).
    functions = {f.__name__: f for f in (weather_forecast, send_email)}
    email = call("send_email", to="bob@example.com", subject="Hi", body="Hello")

    def on_text(piece: str) -> None:
        if "Bob" in piece:
            raise TimeoutError()  # the client's connection timed out while the answer streamed

    model = ScriptedModel([search("send email", 1), email, "Emailed Bob."])
    with pytest.raises(TimeoutError) as raised:
        run(model, "Email Bob", session=sessions_over(functions).create("s"), functions=functions, on_text=on_text)
    partial = raised.value.partial  # type: ignore[attr-defined]
    assert partial.outcome is LoopOutcome.ERROR and SENT == ["bob@example.com"]
    assert partial.output == "The run failed with TimeoutError after 2 model request(s)"


# --- a usage store that times out ---------------------------------------------------------------------------------


class TimingOutPending:
    """A shared pending-search store whose client gives up with a bare TimeoutError (asyncio.wait_for's)."""

    def __repr__(self) -> str:
        return "TimingOutPending()"

    def add(self, session_id: str, search: PendingSearch) -> None:
        raise TimeoutError()

    def credit(self, session_id: str, tool: str) -> PendingSearch | None:
        raise TimeoutError()

    def forget(self, session_id: str) -> None:
        raise TimeoutError()


def test_a_usage_store_that_times_out_is_named_without_a_dangling_colon(caplog: pytest.LogCaptureFixture) -> None:
    # Before: "usage of a batch of tool calls not recorded: TimeoutError:  (pending searches in ...)".
    weather = Tool("weather_get", "Get the current weather for a city.", {"properties": {"city": {"type": "string"}}})
    session = SessionManager(ToolIndex.build([weather], backend="bm25")).create("s")
    recorder = UsageRecorder(UsageLog("cat"), pending=TimingOutPending())
    with caplog.at_level(logging.WARNING, logger="toolsearch"):
        handle_tool_calls(session, [search("weather in lisbon", id="s")], {}, usage=recorder)
    (said,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == (
        "usage of a batch of tool calls not recorded: TimeoutError (pending searches in TimingOutPending()); "
        "the results stand"
    )


# --- a wire-format plug-in whose parse_call raises ----------------------------------------------------------------


def _parse_own_shape(data: Any, search_name: str) -> ToolCall | None:
    # assumes its own shape, where the contract says to return None: a StopIteration that says nothing otherwise
    tool = next(value for key, value in data.items() if key == "tool")
    return ToolCall(data.get("call_id", ""), tool, {})


@pytest.fixture()
def own_shape_format() -> Iterator[None]:
    register_format(WireFormat("own_shape_chat", "Own shape", render_tool=lambda tool, alias: {"tool": alias},
                               parse_call=_parse_own_shape, render_result=lambda c, content, e: {"r": content}))
    yield
    formats.FORMATS.unregister("own_shape_chat")


def test_a_format_whose_parse_call_raises_an_empty_error_is_named_without_a_dangling_colon(
    own_shape_format: None
) -> None:
    # Before: "... raised StopIteration:  in parse_call, so it was skipped for this call".
    with pytest.warns(PluginWarning) as warned, pytest.raises(ArgumentTypeError, match="needs at least a 'name'"):
        parse_tool_call({"arguments": "{}"})  # no built-in format's shape: each format is tried
    (said,) = [str(w.message) for w in warned if "own_shape_chat" in str(w.message)]
    assert "raised StopIteration in parse_call, so it was skipped for this call" in said


# --- a backend plug-in whose files cannot be read -------------------------------------------------------------


class TruncatedFiles:
    """A third party's backend (bm25 inside) whose reader meets the end of a truncated file and says nothing more."""

    name = "truncated_files"

    def __init__(self) -> None:
        self.inner = get_backend_spec("bm25").create()

    def add(self, tools: Any) -> None:
        self.inner.add(tools)

    def remove(self, names: Any) -> None:
        self.inner.remove(names)

    def search(self, query: str, k: int, allowed: Any = None) -> Any:
        return self.inner.search(query, k, allowed)

    def describe(self) -> dict[str, Any]:
        return {}

    def save(self, folder: Path) -> None:
        self.inner.save(folder)

    @classmethod
    def load(cls, folder: Path, tools: Any, **options: Any) -> TruncatedFiles:
        raise EOFError()


@pytest.fixture()
def truncated_backend() -> Iterator[str]:
    register_backend(BackendSpec("truncated_files", lambda **options: TruncatedFiles(), TruncatedFiles.load))
    yield "truncated_files"
    BACKENDS.unregister("truncated_files")


def test_a_backend_whose_files_cannot_be_read_is_named_without_a_dangling_colon(
    truncated_backend: str, tmp_path: Path
) -> None:
    # Before: "... the truncated_files backend files cannot be read (EOFError: ); rebuild the index".
    ToolIndex.build([Tool("get_time", "Current time.")], backend=truncated_backend).save(tmp_path / "idx")
    with pytest.raises(IndexFormatError) as raised:
        ToolIndex.load(tmp_path / "idx")
    assert str(raised.value).endswith("the truncated_files backend files cannot be read (EOFError); rebuild the index")


# --- redis-py's bare errors -----------------------------------------------------------------------------------------


def test_a_bare_redis_error_is_named_without_a_dangling_colon() -> None:
    # Before: ("TimeoutError: ", False), which the store then followed with " (timeout 5 s); check that Redis ...".
    assert redis_failure(redis.exceptions.TimeoutError(), credentials=False) == ("TimeoutError", False)
    assert redis_failure(redis.exceptions.ConnectionError("Connection closed by server."), credentials=False) == (
        "ConnectionError: Connection closed by server.", False)
