"""How a tool's call ends, the same from run() and arun(), from a sync tool and an async one.

- a tool stuck past its timeout is abandoned and keeps nothing waiting, the program's exit included; a tool
  still within its timeout (or without one) when a run is stopped and the program exits is let finish its work;
- a tool's SystemExit (argparse refusing the model's arguments, a wrapped script's `sys.exit`) is that call's
  ERROR result, which the model reads; a KeyboardInterrupt ends the run as Ctrl-C does, with the run so far;
- a tool written with `yield` (sync or async), or returning any other iterator (`map`, `itertools.chain`), gives
  its items, run out within the call (in the context the call set up); sets, dict views and ranges are arrays;
  an iterator inside a value is an ERROR saying so; bytes are read as UTF-8 text, and bytes that are not text are
  an ERROR saying so, never a repr passed off as the answer;
- a run that sends every tool (no tool_search) never sends the model to a search tool it was not given.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import itertools
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeLLMServer, Turn

from toolsearch import SessionManager, Tool, ToolIndex, arun, run
from toolsearch.executor import ResultStatus
from toolsearch.loop import LoopOutcome
from toolsearch.providers import OpenAIChatModel, ScriptedModel, call, reply

ROOT = Path(__file__).resolve().parents[1]
RUNS = ["run", "arun"]


def session_with(*names: str) -> Any:
    return SessionManager(ToolIndex.build([Tool(n, f"The {n} tool.") for n in names], backend="regex")).create("s")


def run_with(how: str, model: Any, functions: dict[str, Callable[..., Any]], **settings: Any) -> Any:
    settings = {"session": session_with(*functions), "functions": functions, "tool_search": "off", **settings}
    if how == "arun":
        return asyncio.run(arun(model, "go", **settings))
    return run(model, "go", **settings)


# --- an abandoned tool holds nothing up, exit included -------------------------------------------------------

ABANDONED = """
import asyncio, sys, threading
from toolsearch import SessionManager, Tool, ToolIndex, arun, run
from toolsearch.providers import ScriptedModel, call, reply

never = threading.Event()

def fetch_report(url: str) -> str:
    never.wait()  # a read on a connection that never answers
    return "report"

session = SessionManager(ToolIndex.build([Tool("fetch_report", "Fetch a report.")], backend="regex")).create("s")
model = ScriptedModel([reply(call("fetch_report", url="http://x")), "The report server did not answer."])
settings = dict(session=session, functions={"fetch_report": fetch_report}, tool_search="off", tool_timeout=0.2)
result = asyncio.run(arun(model, "report?", **settings)) if sys.argv[1] == "arun" else run(model, "report?", **settings)
print(result.outcome.value, result.tool_results[0].status.value, flush=True)
"""


@pytest.mark.parametrize("how", RUNS)
def test_a_program_whose_tool_was_abandoned_exits(how: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run([sys.executable, "-c", ABANDONED, how], capture_output=True, text=True, timeout=120,
                              cwd=ROOT, env=env)
    except subprocess.TimeoutExpired as hung:
        # the run returned, but the interpreter waits at exit for the abandoned tool's thread, which never ends
        raise AssertionError(f"the program never exited; it printed {hung.stdout!r}") from None
    assert (done.returncode, done.stdout) == (0, "completed timeout\n"), done.stderr


STOPPED = """
import asyncio, os, signal, sys, time
# Ctrl-C raises KeyboardInterrupt, as in any program: a process started by a pytest-xdist worker inherits SIGINT
# ignored (the controller handles Ctrl-C), and Python installs its handler only where SIGINT is not ignored
signal.signal(signal.SIGINT, signal.default_int_handler)
from toolsearch import SessionManager, Tool, ToolIndex, arun, run
from toolsearch.providers import ScriptedModel, call, reply

def write_report(title: str) -> str:
    os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C while the tools run
    with open(sys.argv[3], "w") as report:
        for i in range(10):
            report.write(f"line {i}\\n")
            report.flush()
            time.sleep(0.05)
    return "written"

tools = [Tool("write_report", "Write a report."), Tool("notify", "Notify.")]
session = SessionManager(ToolIndex.build(tools, backend="regex")).create("s")
model = ScriptedModel([reply(call("write_report", title="q3"), call("notify", title="q3")), "never asked"])
timeout = None if sys.argv[2] == "none" else float(sys.argv[2])
settings = dict(session=session, functions={"write_report": write_report, "notify": lambda title: "ok"},
                tool_search="off", tool_timeout=timeout)
try:
    asyncio.run(arun(model, "report", **settings)) if sys.argv[1] == "arun" else run(model, "report", **settings)
except KeyboardInterrupt:
    print("stopped", flush=True)
"""


@pytest.mark.parametrize("timeout", ["none", "60"])
@pytest.mark.parametrize("how", RUNS)
def test_a_program_stopped_while_its_tools_run_lets_them_finish(how: str, timeout: str, tmp_path: Path) -> None:
    report = tmp_path / "report.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", STOPPED, how, timeout, str(report)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=env)
    assert done.stdout == "stopped\n", done.stderr
    # not cut off mid-write as the program exits: the call was within its timeout, never abandoned
    assert report.read_text().splitlines() == [f"line {i}" for i in range(10)]


# --- SystemExit and KeyboardInterrupt from a tool --------------------------------------------------------------


def report(v: str) -> int:
    """A tool that wraps a script's argument parser: argparse exits on an argument it cannot read."""
    parser = argparse.ArgumentParser(prog="report")
    parser.add_argument("--n", type=int)
    return int(parser.parse_args(["--n", v]).n)


async def areport(v: str) -> int:
    await asyncio.sleep(0)
    return report(v)


@pytest.mark.parametrize("timeout", [None, 30.0], ids=["no-timeout", "timeout"])
@pytest.mark.parametrize("tool", [report, areport], ids=["sync-tool", "async-tool"])
@pytest.mark.parametrize("how", RUNS)
def test_a_tools_system_exit_is_its_error_result(how: str, tool: Callable[..., Any], timeout: float | None,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    model = ScriptedModel([reply(call("report", v="abc")), "The report needs a number."])
    result = run_with(how, model, {"report": tool}, tool_timeout=timeout)
    assert result.outcome is LoopOutcome.COMPLETED and result.output == "The report needs a number."
    [failed] = result.tool_results
    assert (failed.status, failed.content) == (ResultStatus.ERROR, "Tool 'report' failed: SystemExit: 2")
    assert "invalid int value: 'abc'" in capsys.readouterr().err  # argparse said why, as it does


def interrupted(city: str) -> str:
    raise KeyboardInterrupt


async def ainterrupted(city: str) -> str:
    await asyncio.sleep(0)
    raise KeyboardInterrupt


@pytest.mark.parametrize("timeout", [None, 30.0], ids=["no-timeout", "timeout"])
@pytest.mark.parametrize("tool", [interrupted, ainterrupted], ids=["sync-tool", "async-tool"])
@pytest.mark.parametrize("how", RUNS)
def test_a_tools_keyboard_interrupt_ends_the_run_with_the_run_so_far(
    how: str, tool: Callable[..., Any], timeout: float | None
) -> None:
    model = ScriptedModel([reply(call("get_weather", city="Porto"), call("get_time")), "never asked"])
    with pytest.raises(KeyboardInterrupt) as raised:
        run_with(how, model, {"get_weather": tool, "get_time": lambda: "12:00"}, tool_timeout=timeout)
    partial = raised.value.partial  # type: ignore[attr-defined]
    assert partial.outcome is LoopOutcome.ERROR
    assert [(r.call.name, r.status) for r in partial.tool_results] == [
        ("get_weather", ResultStatus.SKIPPED), ("get_time", ResultStatus.SKIPPED)
    ]
    assert "was interrupted (KeyboardInterrupt)" in raised.value.__notes__[0]


# --- generators and bytes ------------------------------------------------------------------------------------


def search_docs(q: str) -> Iterator[str]:
    yield "doc 1: refunds take 5 days"
    yield "doc 2: refunds need a receipt"


async def stream_logs(q: str) -> AsyncIterator[str]:
    await asyncio.sleep(0)
    yield "ERROR disk full"


def read_text(path: str) -> bytes:
    return "Résumé".encode()


def read_image(path: str) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + bytes(range(16))


def read_record(path: str) -> dict[str, Any]:
    return {"name": b"Ana", "photo": b"\xff\xd8\xff"}


ENDINGS = {"search_docs": search_docs, "stream_logs": stream_logs, "read_text": read_text,
           "read_image": read_image, "read_record": read_record}


@pytest.mark.parametrize("timeout", [None, 30.0], ids=["no-timeout", "timeout"])
@pytest.mark.parametrize("how", RUNS)
def test_generators_give_their_items_and_bytes_their_text_or_an_error(how: str, timeout: float | None) -> None:
    model = ScriptedModel([reply(call("search_docs", q="refund"), call("stream_logs", q="x"),
                                 call("read_text", path="a.txt"), call("read_image", path="a.png"),
                                 call("read_record", path="ana.json")), "done"])
    result = run_with(how, model, ENDINGS, tool_timeout=timeout, parallel_tool_calls=timeout is not None)
    by_name = {r.call.name: (r.status.value, r.content) for r in result.tool_results}
    not_text = (
        "failed: ArgumentTypeError: the tool returned {} bytes that are not UTF-8 text (binary data, such as an image "
        "or an archive); a tool's result is text: return a str (base64 for binary data) or a JSON-able value"
    )
    assert by_name == {
        "search_docs": ("ok", '["doc 1: refunds take 5 days", "doc 2: refunds need a receipt"]'),
        "stream_logs": ("ok", '["ERROR disk full"]'),
        "read_text": ("ok", "Résumé"),
        "read_image": ("error", "Tool 'read_image' " + not_text.format(24)),
        "read_record": ("error", "Tool 'read_record' " + not_text.format(3)),
    }


# --- iterators and collections ------------------------------------------------------------------------------

ROWS = ["refund: 5 days", "exchange: 30 days"]


async def mapped_later(q: str) -> Iterator[str]:
    await asyncio.sleep(0)
    return map(str.upper, ROWS)


ITERATORS: dict[str, Callable[..., Any]] = {
    "mapped": lambda q: map(str.upper, ROWS),
    "filtered": lambda q: filter(None, ["", *ROWS]),
    "zipped": lambda q: zip(ROWS, (5, 30), strict=True),
    "chained": lambda q: itertools.chain(ROWS, ["store credit"]),
    "iterated": lambda q: iter(ROWS),
    "keys": lambda q: {"a": 1, "b": 2}.keys(),
    "values": lambda q: {"a": 1, "b": 2}.values(),
    "items": lambda q: {"a": 1}.items(),
    "ranged": lambda q: range(3),
    "sets": lambda q: {"tags": frozenset(["vip"])},
    "mapped_later": mapped_later,
    "nested": lambda q: {"rows": map(str.upper, ROWS)},
}


@pytest.mark.parametrize("timeout", [None, 30.0], ids=["no-timeout", "timeout"])
@pytest.mark.parametrize("how", RUNS)
def test_iterators_give_their_items_and_collections_are_arrays(how: str, timeout: float | None) -> None:
    model = ScriptedModel([reply(*(call(name, q="policy") for name in ITERATORS)), "done"])
    result = run_with(how, model, ITERATORS, tool_timeout=timeout, parallel_tool_calls=timeout is not None)
    by_name = {r.call.name: (r.status.value, r.content) for r in result.tool_results}
    assert by_name == {
        "mapped": ("ok", '["REFUND: 5 DAYS", "EXCHANGE: 30 DAYS"]'),
        "filtered": ("ok", '["refund: 5 days", "exchange: 30 days"]'),
        "zipped": ("ok", '[["refund: 5 days", 5], ["exchange: 30 days", 30]]'),
        "chained": ("ok", '["refund: 5 days", "exchange: 30 days", "store credit"]'),
        "iterated": ("ok", '["refund: 5 days", "exchange: 30 days"]'),
        "keys": ("ok", '["a", "b"]'),
        "values": ("ok", "[1, 2]"),
        "items": ("ok", '[["a", 1]]'),
        "ranged": ("ok", "[0, 1, 2]"),
        "sets": ("ok", '{"tags": ["vip"]}'),
        "mapped_later": ("ok", '["REFUND: 5 DAYS", "EXCHANGE: 30 DAYS"]'),
        "nested": ("error", "Tool 'nested' failed: ArgumentTypeError: the tool's result holds a map that nothing ran "
                            "out; return its items (a list) or its awaited value"),
    }


REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("REQUEST", default="(none)")


def lines_of(user: str) -> Iterator[str]:
    yield f"{user}: {REQUEST.get()}"  # read when the iterator is run out


def rows_for(user: str) -> Iterator[str]:
    REQUEST.set(f"request of {user}")
    return lines_of(user)


async def arows_for(user: str) -> Iterator[str]:
    await asyncio.sleep(0)
    REQUEST.set(f"request of {user}")
    return lines_of(user)


@pytest.mark.parametrize("timeout", [None, 30.0], ids=["no-timeout", "timeout"])
@pytest.mark.parametrize("tool", [rows_for, arows_for], ids=["sync-tool", "async-tool"])
@pytest.mark.parametrize("how", RUNS)
def test_an_iterator_a_tool_returns_is_run_out_within_its_call(
    how: str, tool: Callable[..., Any], timeout: float | None
) -> None:
    """The items are the call's work, done where the call runs and within its timeout: the iterator sees what the
    call set up (its context variables), from an async tool as from a sync one."""
    model = ScriptedModel([reply(call("rows_for", user="ana")), "done"])
    # in a context of its own: a sync tool called inline sets the variable in the caller's context
    result = contextvars.Context().run(run_with, how, model, {"rows_for": tool}, tool_timeout=timeout)
    assert [(r.status.value, r.content) for r in result.tool_results] == [("ok", '["ana: request of ana"]')]


# --- a run without tool_search ------------------------------------------------------------------------------


def test_a_run_without_tool_search_sends_the_model_to_its_own_tools() -> None:
    def obedient(request: Any) -> Turn | str:
        """A model that does what the last tool result tells it to."""
        results = request.tool_results()
        if not results:
            return Turn(tool_calls=[("get_weather", {"city": "Porto"})])  # a tool the session does not allow
        if "tool_search" in results[-1].text:
            return Turn(tool_calls=[("tool_search", {"query": "weather"})])
        return "I cannot get the weather here; I can tell the time."

    tools = [Tool("get_time", "Current time in a time zone."), Tool("get_weather", "Weather for a city.")]
    session = SessionManager(ToolIndex.build(tools, backend="bm25")).create("s", allowed={"get_time"})
    with FakeLLMServer(policy=obedient) as server:
        result = run(OpenAIChatModel(server.openai(), "gpt-4.1"), "Weather in Porto?", session=session,
                     functions={"get_time": lambda: "12:00"}, tool_search="off")
        offered = [t["function"]["name"] for t in server.requests[0].body["tools"]]
    assert offered == ["get_time"] and result.outcome is LoopOutcome.COMPLETED
    assert [(r.call.name, r.status, r.content) for r in result.tool_results] == [(
        "get_weather", ResultStatus.NOT_AVAILABLE,
        "Tool 'get_weather' is not available. Use one of the tools in your tools list, by its exact name, or answer "
        "without a tool.",
    )]


def test_a_run_with_tool_search_still_sends_the_model_to_it() -> None:
    tools = [Tool("get_time", "Current time in a time zone."), Tool("get_weather", "Weather for a city.")]
    session = SessionManager(ToolIndex.build(tools, backend="bm25")).create("s", allowed={"get_time"})
    model = ScriptedModel([reply(call("get_weather", city="Porto")), "ok"])
    [refused] = run(model, "Weather in Porto?", session=session, functions={"get_time": lambda: "12:00"}).tool_results
    assert refused.content == (
        "Tool 'get_weather' is not available. Call tool_search to find a tool for this task, then call one of the "
        "names it returns."
    )
