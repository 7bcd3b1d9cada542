"""The executor's two drivers: the same batch gives the same results, session, usage log and spans in sync and async.

Each batch runs over a real bm25 index and real Python tools, once through `handle_tool_calls` and
once through `ahandle_tool_calls`, each with a fresh session of its own; what came back is compared
whole, and each kind of call is also checked against what it must give.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import pytest
from fakes.augment import Consumer, Why
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from toolsearch import ArgumentTypeError, InvalidArgumentError, Tool, ToolIndex, provider_safe_name, tracing
from toolsearch.executor import (
    ExecutorConfig,
    ResultStatus,
    ToolExecutor,
    ToolResult,
    ahandle_tool_calls,
    handle_tool_calls,
)
from toolsearch.loop import LoopConfig, LoopOutcome, arun, run
from toolsearch.providers import ScriptedModel, ToolCall, call, search
from toolsearch.session import Session, SessionManager
from toolsearch.usage import UsageLog, UsageRecorder

Driver = Literal["sync", "async"]
DRIVERS: tuple[Driver, ...] = ("sync", "async")


def lookup_record(key: str) -> dict[str, Any]:
    """Look up a record by its key in the registry."""
    return {"key": key, "found": True}


def explode_widget(widget: str) -> str:
    """Explode a widget into its parts."""
    raise ValueError(f"widget {widget} is glued")


def sleepy_report(seconds: float) -> str:
    """Generate a slow quarterly sales report."""
    time.sleep(seconds)
    return "report"


async def async_stock_price(symbol: str) -> float:
    """Look up the latest stock price for a ticker symbol."""
    await asyncio.sleep(0)
    return 123.5


async def async_translate(text: str) -> str:
    """Translate text into French, slowly."""
    await asyncio.sleep(2)
    return "bonjour"


async def async_broken_feed(url: str) -> str:
    """Read a news feed from a URL."""
    raise ConnectionError("feed is down")


def final_answer(text: str) -> str:
    """Give the final answer to the user and stop."""
    return f"FINAL: {text}"


def hidden_archive(year: int) -> str:
    """Open the hidden archive of a year."""
    return f"archive {year}"


def forbidden_delete(confirm: bool) -> str:
    """Delete every user account in the admin console."""
    return "deleted"


def unimplemented_fax(number: str) -> str:
    """Send a fax to a number."""
    return "faxed"


class _Unrenderable:
    """A value whose `model_dump` raises: it cannot become a tool result's text."""

    def model_dump(self, mode: str = "python") -> Any:
        raise RuntimeError("cannot dump this value")


def unrenderable_value() -> Any:
    """Return a value that cannot be rendered."""
    return _Unrenderable()


FUNCTIONS = [
    lookup_record,
    explode_widget,
    sleepy_report,
    async_stock_price,
    async_translate,
    async_broken_feed,
    final_answer,
    hidden_archive,
    forbidden_delete,
    unimplemented_fax,
    unrenderable_value,
]
# A dotted name: the model calls it by its provider-safe alias.
FACTORIAL = Tool("math.factorial", "Compute the factorial of an integer.", {"properties": {"n": {"type": "integer"}}})
TOOLS = [*map(Tool.from_callable, FUNCTIONS), FACTORIAL]
IMPLEMENTED = {fn.__name__: fn for fn in FUNCTIONS if fn is not unimplemented_fax} | {"math.factorial": lambda n: 120}
ALLOWED = frozenset(t.name for t in TOOLS) - {"forbidden_delete"}
# Visible from the start: every allowed tool but hidden_archive (never searched for) and math.factorial
# (found by a search of the batch itself).
VISIBLE = sorted(ALLOWED - {"hidden_archive", "math.factorial"})


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    return ToolIndex.build(TOOLS, backend="bm25")


def _session(index: ToolIndex, name: str) -> Session:
    session = SessionManager(index).create(name, allowed=ALLOWED)
    session.discover(VISIBLE)
    return session


def _batch(driver: Driver, session: Session, calls: Sequence[Any], **options: Any) -> list[ToolResult]:
    if driver == "sync":
        return handle_tool_calls(session, calls, IMPLEMENTED, **options)
    return asyncio.run(ahandle_tool_calls(session, calls, IMPLEMENTED, **options))


def _seen(results: Sequence[ToolResult]) -> list[tuple[Any, ...]]:
    """What a batch gave, but for the timings."""
    return [
        (
            r.call.id,
            r.call.name,
            dict(r.call.arguments),
            r.status,
            r.content,
            [t.name for t in r.tool_references],
            r.search.names if r.search else None,
            r.search.error if r.search else None,
        )
        for r in results
    ]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = tracing.configure(tracer_provider=provider, queries="text")
    try:
        yield exporter
    finally:
        tracing.restore(previous)
        provider.shutdown()


def _spans(exporter: InMemorySpanExporter) -> list[tuple[str, dict[str, Any]]]:
    """The spans recorded since the last call, by name and attributes (without the measured times)."""
    found = [
        (s.name, {k: v for k, v in (s.attributes or {}).items() if not k.endswith("latency_ms")})
        for s in exporter.get_finished_spans()
    ]
    exporter.clear()
    return found


def _everything() -> list[Any]:
    factorial = provider_safe_name("math.factorial")
    return [
        call("lookup_record", key="k1", id="ok"),
        call("explode_widget", widget="w", id="raises"),
        call("sleepy_report", seconds=2.5, id="slow-sync"),
        call("async_stock_price", symbol="ACME", id="async-ok"),
        call("async_translate", text="hello", id="slow-async"),
        call("async_broken_feed", url="http://feed", id="async-raises"),
        call("async_stock_price", symbol="ACME", market="NYSE", id="bad-signature"),
        call("final_answer", text="done", id="direct"),
        call("unrenderable_value", id="unrenderable"),
        call("hidden_archive", year=1999, id="undiscovered"),
        call("forbidden_delete", confirm=True, id="outside"),
        call("no_such_tool", id="unknown"),
        call("unimplemented_fax", number="1", id="no-implementation"),
        call("lookup_record", key=7, id="schema"),
        {"id": "not-json", "type": "function", "function": {"name": "lookup_record", "arguments": "{not json"}},
        call(factorial, n=5, id="found-this-turn"),  # by the alias the search below teaches the session
        search("factorial of an integer", 3, id="search"),
        call("tool_search", query=5, id="bad-search"),
    ]


EXPECTED = {
    "ok": ResultStatus.OK,
    "raises": ResultStatus.ERROR,
    "slow-sync": ResultStatus.TIMEOUT,
    "async-ok": ResultStatus.OK,
    "slow-async": ResultStatus.TIMEOUT,
    "async-raises": ResultStatus.ERROR,
    "bad-signature": ResultStatus.ERROR,
    "direct": ResultStatus.OK,
    "unrenderable": ResultStatus.ERROR,
    "undiscovered": ResultStatus.NOT_DISCOVERED,
    "outside": ResultStatus.NOT_AVAILABLE,
    "unknown": ResultStatus.NOT_AVAILABLE,
    "no-implementation": ResultStatus.NOT_AVAILABLE,
    "schema": ResultStatus.INVALID_ARGUMENTS,
    "not-json": ResultStatus.INVALID_ARGUMENTS,
    "found-this-turn": ResultStatus.OK,
    "search": ResultStatus.SEARCH,
    "bad-search": ResultStatus.SEARCH_ERROR,
}


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "one-by-one"])
def test_one_batch_of_every_kind_of_call_gives_the_same_in_sync_and_async(
    index: ToolIndex, spans: InMemorySpanExporter, parallel: bool
) -> None:
    # a timeout far above what the quick tools take, so a loaded machine cannot make one of them time out
    config = ExecutorConfig(tool_timeout=1.0, parallel_tool_calls=parallel, return_direct=frozenset({"final_answer"}))
    seen: dict[Driver, Any] = {}
    for driver in DRIVERS:
        log = UsageLog(index.catalog.hash, privacy="raw")
        session = _session(index, f"every-{driver}")
        results = _batch(driver, session, _everything(), config=config, usage=UsageRecorder(log))
        executor = ToolExecutor(IMPLEMENTED, config=config)
        direct = [r.call.id for r in results if executor.is_return_direct(session, r.call.name)]
        seen[driver] = (
            _seen(results),
            sorted(session.discovered),
            [(e.query, e.called) for e in log],
            direct,
            _spans(spans),
        )
        by_id = {r.call.id: r for r in results}
        assert {i: r.status for i, r in by_id.items()} == EXPECTED, driver
        assert [r.call.id for r in results] == [c["id"] if isinstance(c, Mapping) else c.id for c in _everything()]
        assert by_id["ok"].value == {"key": "k1", "found": True}
        assert by_id["raises"].content == "Tool 'explode_widget' failed: ValueError: widget w is glued"
        assert by_id["slow-sync"].content == (
            "Tool 'sleepy_report' timed out after 1 s and was abandoned; try simpler arguments or another tool."
        )
        assert by_id["async-raises"].content == "Tool 'async_broken_feed' failed: ConnectionError: feed is down"
        assert "unexpected keyword argument 'market'" in by_id["bad-signature"].content
        assert by_id["unrenderable"].content == "Tool 'unrenderable_value' failed: RuntimeError: cannot dump this value"
        assert by_id["undiscovered"].content.startswith("Tool 'hidden_archive' is not loaded yet. Call tool_search")
        assert by_id["outside"].content.startswith("Tool 'forbidden_delete' is not available.")
        assert by_id["no-implementation"].content == (
            "Tool 'unimplemented_fax' has no implementation in this application; use another tool."
        )
        assert "key: 7 is not of type 'string'" in by_id["schema"].content
        assert "not valid JSON" in by_id["not-json"].content
        assert by_id["found-this-turn"].call.name == "math.factorial" and by_id["found-this-turn"].content == "120"
        assert direct == ["direct"]
    assert seen["sync"] == seen["async"]
    _, discovered, usage, _, recorded = seen["sync"]
    assert "math.factorial" in discovered and "hidden_archive" not in discovered
    assert usage == [("factorial of an integer", "math.factorial")]
    tool_spans = [attrs["gen_ai.tool.call.id"] for name, attrs in recorded if name.startswith("execute_tool ")]
    assert tool_spans == [i for i, status in EXPECTED.items() if not status.name.startswith("SEARCH")]
    assert [name for name, _ in recorded if not name.startswith("execute_tool ")] == ["retrieval"] * 2


@pytest.mark.parametrize("driver", DRIVERS)
def test_one_by_one_a_call_after_an_abandoned_one_still_runs(index: ToolIndex, driver: Driver) -> None:
    # The abandoned call keeps its thread: the next one must not wait behind it and time out unrun.
    config = ExecutorConfig(tool_timeout=1.0, parallel_tool_calls=False)
    calls = [call("sleepy_report", seconds=2.5, id="slow"), call("lookup_record", key="k", id="next")]
    slow, following = _batch(driver, _session(index, f"abandoned-{driver}"), calls, config=config)
    assert (slow.status, following.status) == (ResultStatus.TIMEOUT, ResultStatus.OK)


def test_abandoned_calls_in_asyncio_leave_later_calls_and_the_applications_threads_free() -> None:
    # A long-running async app: sync tools that hang are abandoned at their timeout but keep their threads. More of
    # them than asyncio's default executor has workers (at most 32) must not leave later calls waiting behind them
    # (to time out unrun), nor the application's own asyncio.to_thread work.
    gate = threading.Event()

    def stuck(n: int) -> str:
        """Wait for an upstream that does not answer."""
        gate.wait(30)
        return "late"

    def quick(n: int) -> str:
        """Answer at once."""
        return f"quick {n}"

    tools = [Tool.from_callable(stuck), Tool.from_callable(quick)]
    session = SessionManager(ToolIndex.build(tools, backend="regex")).create("hung")
    session.discover(["stuck", "quick"])
    functions = {"stuck": stuck, "quick": quick}

    async def app() -> tuple[list[ToolResult], ToolResult, int]:
        hung = [call("stuck", n=i, id=f"s{i}") for i in range(33)]
        abandoned = await ahandle_tool_calls(session, hung, functions, config=ExecutorConfig(tool_timeout=0.2))
        (answered,) = await ahandle_tool_calls(session, [call("quick", n=1, id="q")], functions,
                                               config=ExecutorConfig(tool_timeout=10.0))
        own = await asyncio.wait_for(asyncio.to_thread(lambda: 7), 10.0)
        return abandoned, answered, own

    try:
        abandoned, answered, own = asyncio.run(app())
    finally:
        gate.set()
    assert {r.status for r in abandoned} == {ResultStatus.TIMEOUT}
    assert (answered.status, answered.content, own) == (ResultStatus.OK, "quick 1", 7)


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_sync_tool_sees_the_callers_context_variables(driver: Driver) -> None:
    # As if called directly: a request id (or a tracing span) the application set is visible in the tool's thread.
    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")

    def whose(n: int) -> str:
        """Say which request this call serves."""
        return request_id.get()

    session = SessionManager(ToolIndex.build([Tool.from_callable(whose)], backend="regex")).create(f"ctx-{driver}")
    session.discover(["whose"])
    calls = [call("whose", n=1, id="a"), call("whose", n=2, id="b")]
    request_id.set("req-42")
    if driver == "sync":
        results = handle_tool_calls(session, calls, {"whose": whose}, config=ExecutorConfig(tool_timeout=10.0))
    else:
        results = asyncio.run(ahandle_tool_calls(session, calls, {"whose": whose},
                                                 config=ExecutorConfig(tool_timeout=10.0)))
    assert [r.content for r in results] == ["req-42", "req-42"]


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "one-by-one"])
def test_parallel_calls_run_together_and_the_others_one_after_another(
    index: ToolIndex, driver: Driver, parallel: bool
) -> None:
    # Two calls that each wait for the other at a barrier: they pass only when they run at the same time.
    barrier = threading.Barrier(2, timeout=1.0)

    def meet(side: str) -> str:
        barrier.wait()
        return side

    tool = Tool.from_callable(meet)
    session = SessionManager(ToolIndex.build([tool], backend="bm25")).create(f"meet-{driver}")
    session.discover(["meet"])
    calls = [call("meet", side="left", id="l"), call("meet", side="right", id="r")]
    config = ExecutorConfig(tool_timeout=None, parallel_tool_calls=parallel)
    if driver == "sync":
        results = handle_tool_calls(session, calls, {"meet": meet}, config=config)
    else:
        results = asyncio.run(ahandle_tool_calls(session, calls, {"meet": meet}, config=config))
    expected = [ResultStatus.OK] * 2 if parallel else [ResultStatus.ERROR] * 2
    assert [r.status for r in results] == expected
    if parallel:
        assert [r.content for r in results] == ["left", "right"]
    else:
        assert "BrokenBarrierError" in results[0].content


def test_augmented_values_reach_the_consumer_in_call_order_in_both(
    index: ToolIndex, spans: InMemorySpanExporter
) -> None:
    calls = [
        call("lookup_record", key="k1", call_reason="the user asked for k1", id="a"),
        call("lookup_record", key="k2", id="missing-reason"),
        call("async_stock_price", symbol="ACME", call_reason="a price was asked", id="b"),
    ]
    seen = {}
    for driver in DRIVERS:
        consumer = Consumer()
        results = _batch(driver, _session(index, f"augment-{driver}"), calls, augment=Why, on_augment=consumer)
        assert [r.status for r in results] == [ResultStatus.OK, ResultStatus.INVALID_ARGUMENTS, ResultStatus.OK]
        assert results[0].call.arguments == {"key": "k1"}  # the tool's own arguments only
        seen[driver] = (_seen(results), consumer.got, _spans(spans))
    assert seen["sync"] == seen["async"]
    assert seen["sync"][1] == [
        ("lookup_record", {"call_reason": "the user asked for k1"}, "a"),
        ("async_stock_price", {"call_reason": "a price was asked"}, "b"),
    ]


def test_an_async_consumer_is_awaited_by_the_async_driver_and_refused_by_the_sync_one(index: ToolIndex) -> None:
    got: list[str] = []

    async def consumer(tool: str, values: Mapping[str, Any], call_id: str) -> None:
        await asyncio.sleep(0)
        got.append(call_id)

    calls = [call("lookup_record", key="k1", call_reason="asked", id="a")]
    [result] = _batch("async", _session(index, "async-consumer"), calls, augment=Why, on_augment=consumer)
    assert result.status is ResultStatus.OK and got == ["a"]
    message = r"^an async on_augment needs arun\(\) / ahandle_tool_calls\(\); run\(\) calls it as is$"
    with pytest.raises(ArgumentTypeError, match=message):
        _batch("sync", _session(index, "sync-consumer"), calls, augment=Why, on_augment=consumer)


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_return_direct_tool_ends_the_run_in_both_loops(index: ToolIndex, driver: Driver) -> None:
    model = ScriptedModel([[call("final_answer", text="42")], "never asked"])
    session = _session(index, f"direct-{driver}")
    options: dict[str, Any] = {"session": session, "functions": IMPLEMENTED, "count_tokens": False}
    options["return_direct"] = frozenset({"final_answer"})
    result = run(model, "x", **options) if driver == "sync" else asyncio.run(arun(model, "x", **options))
    assert (result.outcome, result.output) == (LoopOutcome.RETURN_DIRECT, "FINAL: 42")


def test_the_helpers_keep_their_signatures_docstrings_and_errors(index: ToolIndex) -> None:
    sync_parameters = inspect.signature(handle_tool_calls).parameters
    assert list(sync_parameters) == [
        "session", "calls", "functions", "metatool", "config", "usage", "augment", "on_augment",
    ]
    assert inspect.signature(ahandle_tool_calls).parameters == sync_parameters
    assert inspect.iscoroutinefunction(ahandle_tool_calls) and not inspect.iscoroutinefunction(handle_tool_calls)
    assert (handle_tool_calls.__name__, ahandle_tool_calls.__name__) == ("handle_tool_calls", "ahandle_tool_calls")
    assert (handle_tool_calls.__doc__ or "").startswith("Run one batch of tool calls: every tool_search first")
    assert (ahandle_tool_calls.__doc__ or "").startswith("`handle_tool_calls` for asyncio")
    session = _session(index, "errors")
    with pytest.raises(TypeError, match=r"^handle_tool_calls\(\) missing 1 required positional argument: 'calls'$"):
        handle_tool_calls(session)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^ahandle_tool_calls\(\) missing 1 required positional argument: 'calls'$"):
        asyncio.run(ahandle_tool_calls(session))  # type: ignore[call-arg]
    with pytest.raises(ArgumentTypeError, match=r"^handle_tool_calls: calls must be a list of tool calls"):
        handle_tool_calls(session, "lookup_record")
    with pytest.raises(ArgumentTypeError, match=r"^ahandle_tool_calls: session must be a Session"):
        asyncio.run(ahandle_tool_calls("s", []))  # type: ignore[arg-type]
    assert handle_tool_calls(session, []) == [] == asyncio.run(ahandle_tool_calls(session, []))


def test_a_batch_of_neutral_calls_keeps_its_order_and_ids(index: ToolIndex) -> None:
    calls = [ToolCall(f"c{i}", "lookup_record", {"key": f"k{i}"}) for i in range(5)]
    for driver in DRIVERS:
        results = _batch(driver, _session(index, f"order-{driver}"), calls)
        assert [(r.call.id, r.status, r.value["key"]) for r in results] == [
            (f"c{i}", ResultStatus.OK, f"k{i}") for i in range(5)
        ]


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ failed")


def unprintable_failure(item: str) -> str:
    """Fail with an exception whose message cannot be read."""
    raise _Unprintable()


async def cancelled_fetch(url: str) -> str:
    """Fetch a page, but the fetch is cancelled underneath."""
    raise asyncio.CancelledError


def weather_now(city: str) -> str:
    """Current weather for a city."""
    return "sunny"


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_call_that_fails_oddly_fails_alone(driver: Driver) -> None:
    # Before: a tool that ended cancelled (a BaseException) or whose exception's __str__ raised ended the whole turn;
    # the other calls' results were lost after they ran.
    functions = {fn.__name__: fn for fn in (unprintable_failure, cancelled_fetch, weather_now)}
    odd_index = ToolIndex.build([Tool.from_callable(fn) for fn in functions.values()], backend="bm25")
    session = SessionManager(odd_index).create("odd")
    session.discover(list(functions))
    calls = [call("weather_now", city="Paris", id="ok"), call("unprintable_failure", item="x", id="str"),
             call("cancelled_fetch", url="https://example.com", id="cancel")]
    if driver == "sync":
        results = handle_tool_calls(session, calls, functions)
    else:
        results = asyncio.run(ahandle_tool_calls(session, calls, functions))
    assert [(r.call.id, r.status, r.content) for r in results] == [
        ("ok", ResultStatus.OK, "sunny"),
        ("str", ResultStatus.ERROR, "Tool 'unprintable_failure' failed: _Unprintable: (its message could not be read)"),
        ("cancel", ResultStatus.ERROR, "Tool 'cancelled_fetch' failed: ToolCancelledError: the tool was cancelled "
                                       "before it returned"),
    ]


def dump_logs(size: int, char: str = "x") -> str:
    """Dump the server logs."""
    DUMPED.append(size)
    return char * size


DUMPED: list[int] = []


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_result_over_max_result_bytes_is_an_error_saying_the_call_ran(driver: Driver) -> None:
    # Before: no bound, so a huge result went to the model whole (and the loop's token count raised on it).
    session = SessionManager(ToolIndex.build([Tool.from_callable(dump_logs)], backend="bm25")).create("big")
    session.discover(["dump_logs"])
    config = ExecutorConfig(max_result_bytes=1_000)
    calls = [call("dump_logs", size=1_000), call("dump_logs", size=600, char="é"), call("dump_logs", size=1_001)]
    DUMPED.clear()
    if driver == "sync":
        results = handle_tool_calls(session, calls, [dump_logs], config=config)
    else:
        results = asyncio.run(ahandle_tool_calls(session, calls, [dump_logs], config=config))
    assert sorted(DUMPED) == [600, 1_000, 1_001]  # every call ran
    assert [r.status for r in results] == [ResultStatus.OK, ResultStatus.ERROR, ResultStatus.ERROR]
    assert results[1].content == (  # 600 characters, 1,200 bytes: the bound is on bytes
        "Tool 'dump_logs' ran, but its result (1,200 bytes) is 200 bytes over the limit of 1,000 bytes, so it was "
        "dropped. Do not repeat the same call to see it: ask for less (narrower arguments: a filter, a page or a "
        "limit, if the tool has one)."
    )
    assert "(1,001 bytes) is 1 bytes over" in results[2].content and results[2].value is None
    unbounded = handle_tool_calls(session, calls[2:], [dump_logs], config=ExecutorConfig(max_result_bytes=None))
    assert unbounded[0].status is ResultStatus.OK and len(unbounded[0].content) == 1_001


def test_a_run_with_a_huge_result_and_a_huge_prompt_finishes() -> None:
    # Before: counting the request's tokens raised "Input too long to encode safely" after the tools had run.
    session = SessionManager(ToolIndex.build([Tool.from_callable(dump_logs)], backend="bm25")).create("huge")
    session.pin(["dump_logs"])
    model = ScriptedModel([[call("dump_logs", size=1_000_000), call("dump_logs", size=1_000_001)], "done"])
    result = run(model, "y" * 1_000_000, session=session, functions=[dump_logs])
    assert result.outcome is LoopOutcome.COMPLETED
    # 1,000,000 bytes is the default limit: at it passes, one byte over does not
    assert [r.status for r in result.tool_results] == [ResultStatus.OK, ResultStatus.ERROR]
    assert result.requests[1].tokens is not None and result.requests[1].tokens.messages > 250_000


@pytest.mark.parametrize(
    ("settings", "error", "said"),
    [
        ({"return_direct": "final_answer"}, ArgumentTypeError, r"return_direct takes a collection of tool names, not a "
         r"single string \('final_answer'\); pass \{'final_answer'\}"),
        ({"return_direct": None}, ArgumentTypeError, "return_direct must be a collection of tool names"),
        ({"return_direct": [1]}, ArgumentTypeError, "return_direct holds 1"),
        ({"tool_timeout": "5"}, ArgumentTypeError, "tool_timeout must be a number of seconds"),
        ({"tool_timeout": True}, ArgumentTypeError, "tool_timeout must be a number of seconds"),
        ({"tool_timeout": float("nan")}, InvalidArgumentError, "tool_timeout must be positive"),
        ({"max_result_bytes": "1000"}, ArgumentTypeError, "max_result_bytes must be a whole number of bytes"),
        ({"max_result_bytes": True}, ArgumentTypeError, "max_result_bytes must be a whole number of bytes"),
        ({"max_result_bytes": 0}, InvalidArgumentError, "max_result_bytes must be at least 1"),
        ({"parallel_tool_calls": "no"}, ArgumentTypeError, "parallel_tool_calls must be True or False"),
    ],
)
def test_execution_settings_of_the_wrong_kind_are_refused_by_name(
    settings: dict[str, Any], error: type[Exception], said: str
) -> None:
    # Before: "final_answer" became a set of its characters; None and "5" gave bare TypeErrors naming nothing.
    for make in (ExecutorConfig, LoopConfig):
        with pytest.raises(error, match=said):
            make(**settings)
    assert ExecutorConfig().max_result_bytes == LoopConfig().max_result_bytes == 1_000_000


def test_numbers_of_numpy_and_the_like_are_settings_too() -> None:
    import numpy as np

    # numbers.Real / Integral, as before the kinds were checked (a value read from a numpy config array)
    for make in (ExecutorConfig, LoopConfig):
        config = make(tool_timeout=np.float32(2.5), max_result_bytes=np.int64(4096))
        assert config.tool_timeout == 2.5 and config.max_result_bytes == 4096
