"""Shared pieces of the end-to-end tests: a catalog with dotted names, tool implementations,
models wired to the fake server, scripted-model policies and exact checks of the `tools` arrays."""

from __future__ import annotations

import asyncio
import functools
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from toolsearch import Tool, provider_safe_name

from .llm_server import GEMINI, OPENAI_CHAT, OPENAI_RESPONSES, FakeLLMServer, Request, Turn

OPENAI_CHAT_FORMAT = "openai_chat"
OPENAI_RESPONSES_FORMAT = "openai_responses"
ANTHROPIC_FORMAT = "anthropic"
GEMINI_FORMAT = "gemini"


# --- catalog and implementations --------------------------------------------------------------


def _factorial(n: int) -> int:
    """Compute the factorial n! of a non-negative integer.

    Args:
        n: The non-negative integer.
    """
    result = 1
    for i in range(2, n + 1):
        result *= i
    return result


def _gcd(a: int, b: int) -> int:
    """Greatest common divisor of two integers.

    Args:
        a: First integer.
        b: Second integer.
    """
    while b:
        a, b = b, a % b
    return abs(a)


DOTTED_TOOLS = (
    Tool.from_callable(_factorial, name="math.factorial", namespace="math"),
    Tool.from_callable(_gcd, name="math.gcd", namespace="math"),
)


def catalog_tools(demo_tools: Sequence[Tool]) -> list[Tool]:
    """The demo catalog plus two dotted-name tools (not valid provider tool names as they are)."""
    return [*demo_tools, *DOTTED_TOOLS]


NEVER = threading.Event()  # never set: a tool waiting on it is always slower than its timeout


class Rendezvous:
    """Tool implementations that prove calls ran together by order of events, not by a clock.

    Each tool of a pair waits until the other has started, records that it met it, then blocks
    until the executor abandons it at its timeout. Run together, both meet; run one after another,
    they never do: an async tool is cancelled at its timeout while still waiting, and a sync one
    waits at a barrier for at most `patience` (less than the tool timeout), so it has given up,
    breaking the barrier, before a sequential executor can even start the second call. `close()`
    frees whatever is still blocked.
    """

    def __init__(self, *names: str, patience: float) -> None:
        self.names = names
        self.patience = patience
        self.met: list[str] = []
        self._lock = threading.Lock()
        self._barrier = threading.Barrier(len(names))
        self._release = threading.Event()
        self._started: dict[str, asyncio.Event] = {}

    def _meet(self, name: str) -> None:
        with self._lock:
            self.met.append(name)

    def sync_tool(self, name: str) -> Callable[..., Any]:
        def tool(**arguments: Any) -> str:
            try:
                self._barrier.wait(timeout=self.patience)
            except threading.BrokenBarrierError:
                return "never met"
            self._meet(name)
            self._release.wait(30)
            return "released"

        return tool

    def async_tool(self, name: str) -> Callable[..., Any]:
        async def tool(**arguments: Any) -> str:
            started = {n: self._started.setdefault(n, asyncio.Event()) for n in self.names}
            started[name].set()
            for other in self.names:
                await started[other].wait()
            self._meet(name)
            await asyncio.Event().wait()  # until the executor cancels it at its timeout
            return "released"

        return tool

    def close(self) -> None:
        self._barrier.abort()
        self._release.set()


class Calls:
    """Thread-safe log of the Python tool implementations that actually ran."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.log: list[tuple[str, dict[str, Any]]] = []

    def add(self, name: str, arguments: Mapping[str, Any]) -> None:
        with self._lock:
            self.log.append((name, dict(arguments)))

    def names(self) -> list[str]:
        with self._lock:
            return [name for name, _ in self.log]


def implementations(calls: Calls) -> dict[str, Callable[..., Any]]:
    """Tool implementations keyed by catalog name; each logs its call to `calls`."""

    def weather_get_forecast(location: str, days: int = 3, units: str = "metric") -> dict[str, Any]:
        calls.add("weather_get_forecast", {"location": location, "days": days, "units": units})
        return {"location": location, "days": days, "forecast": ["sunny"] * days}

    def weather_get_current(location: str, units: str = "metric") -> str:
        calls.add("weather_get_current", {"location": location, "units": units})
        return f"{location}: 21C, clear"

    def factorial(n: int) -> int:
        calls.add("math.factorial", {"n": n})
        return _factorial(n)

    async def gcd(a: int, b: int) -> int:  # an async implementation, awaited by arun / run in a thread by run
        calls.add("math.gcd", {"a": a, "b": b})
        await asyncio.sleep(0)
        return _gcd(a, b)

    def email_send_message(**arguments: Any) -> str:
        calls.add("email_send_message", arguments)
        raise ConnectionError("SMTP server refused the connection")

    def weather_get_historical(**arguments: Any) -> str:
        calls.add("weather_get_historical", arguments)
        NEVER.wait(30)  # blocks past any tool timeout, whatever the machine's load
        return "too late"

    def sms_send_text(**arguments: Any) -> str:
        calls.add("sms_send_text", arguments)
        return "sent"

    return {
        "weather_get_forecast": weather_get_forecast,
        "weather_get_current": weather_get_current,
        "math.factorial": factorial,
        "math.gcd": gcd,
        "email_send_message": email_send_message,
        "weather_get_historical": weather_get_historical,
        "sms_send_text": sms_send_text,
    }


# --- models on the fake server ----------------------------------------------------------------


def make_model(kind: str, server: FakeLLMServer, *, asynchronous: bool = False) -> Any:
    """A toolsearch provider model wired to the fake server through the real SDK client."""
    from toolsearch.providers import AnthropicModel, GeminiModel, OpenAIChatModel, OpenAIResponsesModel

    if kind == OPENAI_CHAT_FORMAT:
        return OpenAIChatModel(server.async_openai() if asynchronous else server.openai(), "gpt-test")
    if kind == OPENAI_RESPONSES_FORMAT:
        return OpenAIResponsesModel(server.async_openai() if asynchronous else server.openai(), "gpt-test")
    if kind == ANTHROPIC_FORMAT:
        client = server.async_anthropic() if asynchronous else server.anthropic()
        return AnthropicModel(client, "claude-test", max_tokens=512)
    if kind == GEMINI_FORMAT:  # one client for both: GeminiModel's async calls go through its `.aio`
        return GeminiModel(server.gemini(), "gemini-test")
    raise ValueError(kind)


# --- scripted-model policies ------------------------------------------------------------------


def search(*queries: str, max_results: int | None = None) -> Turn:
    """One turn with a tool_search call per query (parallel searches when several)."""
    calls = []
    for query in queries:
        args: dict[str, Any] = {"query": query}
        if max_results is not None:
            args["max_results"] = max_results
        calls.append(("tool_search", args))
    return Turn(tool_calls=calls)


def call_found(*wanted: tuple[str, Mapping[str, Any]], text: str | None = None) -> Callable[[Request], Turn]:
    """A policy calling, for each (catalog name, arguments), the tool it finds in the request's
    tools under that name's provider-safe alias; it fails loudly when the tool was not sent."""

    def policy(request: Request) -> Turn:
        calls = []
        for name, arguments in wanted:
            alias = provider_safe_name(name)
            if alias not in request.callable_tool_names:
                raise AssertionError(f"{name!r} (alias {alias!r}) is not in the tools sent: {request.tool_names}")
            calls.append((alias, dict(arguments)))
        return Turn(text=text, tool_calls=calls)

    return policy


# --- exact checks of the tools arrays ---------------------------------------------------------


def wire_tool(tool: Mapping[str, Any]) -> tuple[str, str | None, Any, bool]:
    """(name, description, schema, deferred) of one tool as sent, whatever the provider's shape."""
    fn = tool["function"] if isinstance(tool.get("function"), Mapping) else tool
    name = fn.get("name") or tool.get("type")
    schema = next((fn[k] for k in ("parameters", "input_schema", "parameters_json_schema") if k in fn), None)
    return str(name), fn.get("description"), schema, bool(tool.get("defer_loading"))


def expected_tool(tool: Tool, *, deferred: bool = False) -> tuple[str, str | None, Any, bool]:
    return provider_safe_name(tool.name), tool.description, dict(tool.input_schema), deferred


def assert_tools(
    request: Request,
    *,
    pinned: Iterable[Tool] = (),
    search: Tool | Mapping[str, Any] | None = None,
    discovered: Iterable[Tool] = (),
    deferred: Iterable[Tool] = (),
) -> None:
    """The request carried exactly these tools, in this order, each with its full definition.

    Compares name (the provider-safe alias), description, full JSON schema and `defer_loading`
    of every tool. `search` is the meta-tool's Tool, or the exact wire dict of a provider-native form.
    """
    expected = [expected_tool(t) for t in pinned]
    if isinstance(search, Tool):
        expected.append(expected_tool(search))
    elif search is not None:
        expected.append(wire_tool(search))
    expected += [expected_tool(t) for t in discovered]
    expected += [expected_tool(t, deferred=True) for t in deferred]
    sent = [wire_tool(t) for t in request.tools]
    assert [s[0] for s in sent] == [e[0] for e in expected], "the tools sent differ"
    assert sent == expected, "a tool was sent with a different description or schema"


_PROVIDER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def assert_provider_safe_names(request: Request) -> None:
    """Every tool name in the tools array and in the history is one the provider accepts."""
    names = [n for n in request.tool_names if n != "tool_search" or request.tool("tool_search") is not None]
    names += [c.name for c in request.history_calls()]
    bad = [n for n in names if not _PROVIDER_NAME.match(n)]
    assert not bad, f"names the provider would reject: {bad}"


# --- request bodies against the SDKs' own parameter types -------------------------------------


@functools.cache
def _adapters(provider: str) -> tuple[Any, Any]:
    """(message/input item adapter, tool adapter) built from the installed SDK's param types."""
    import pydantic

    if provider == OPENAI_CHAT:
        from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam

        return pydantic.TypeAdapter(ChatCompletionMessageParam), pydantic.TypeAdapter(ChatCompletionToolUnionParam)
    if provider == OPENAI_RESPONSES:
        from openai.types.responses import ResponseInputItemParam, ToolParam

        return pydantic.TypeAdapter(ResponseInputItemParam), pydantic.TypeAdapter(ToolParam)
    if provider == GEMINI:
        from google.genai import types

        return pydantic.TypeAdapter(types.Content), pydantic.TypeAdapter(types.FunctionDeclaration)
    from anthropic.types import MessageParam, ToolUnionParam

    return pydantic.TypeAdapter(MessageParam), pydantic.TypeAdapter(ToolUnionParam)


def _drain(value: Any) -> Any:
    """pydantic validates `Iterable[...]` fields lazily; consume them so every error surfaces."""
    if isinstance(value, Mapping):
        return {k: _drain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_drain(v) for v in value]
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return value
    return [_drain(v) for v in value]


def assert_valid_request(request: Request) -> None:
    """Every message/input item and every tool of the body validates against the SDK's param types."""
    messages, tools = _adapters(request.provider)
    for item in request.messages:
        _drain(messages.validate_python(item))
    for tool in request.tools:
        _drain(tools.validate_python(tool))


def hits(index: Any, query: str, k: int = 5, **options: Any) -> list[str]:
    """What the index alone returns for a query (the ground truth for discovered tools)."""
    return list(index.search(query, k, **options).names)


# --- scenarios shared by the OpenAI and Anthropic end-to-end tests ----------------------------
#
# Each runs the real toolsearch loop through a real SDK client against the fake server, then checks
# what went over the wire (the exact tools of every request, the tool results) and what the loop
# reports. `kind` is a provider format: openai_chat, openai_responses or anthropic.


def _catalog(index: Any) -> Any:
    return index.catalog


def _all_valid(server: FakeLLMServer) -> None:
    # The SDK param-type check of whole bodies runs in its own tests (`assert_valid_request`).
    for request in server.requests:
        assert_provider_safe_names(request)


def scenario_multi_step_discovery(kind: str, server: FakeLLMServer, index: Any) -> None:
    """search → the found tools appear (full schemas) in the next request → called → answered."""
    from toolsearch.loop import LoopOutcome, run
    from toolsearch.metatool import ToolSearchMetaTool
    from toolsearch.session import SessionManager

    catalog = _catalog(index)
    session = SessionManager(index).create("multi-step")
    meta = ToolSearchMetaTool()
    found = hits(index, "weather forecast", 2)
    calls = Calls()
    server.enqueue(
        search("weather forecast", max_results=2),
        call_found(("weather_get_forecast", {"location": "Paris", "days": 2})),
        Turn(text="Sunny in Paris for the next two days."),
    )
    result = run(
        make_model(kind, server), "What's the weather in Paris?", session=session, functions=implementations(calls)
    )

    assert (result.outcome, result.output) == (LoopOutcome.COMPLETED, "Sunny in Paris for the next two days.")
    first, second, third = server.requests
    search_tool = meta.definition(session)
    assert_tools(first, search=search_tool)
    assert_tools(second, search=search_tool, discovered=[catalog[n] for n in found])
    assert_tools(third, search=search_tool, discovered=[catalog[n] for n in found])
    assert "tool_search" in first.system
    [search_result] = second.tool_results()
    assert all(name in search_result.text for name in found)
    [call_result] = third.tool_results()
    assert json.loads(call_result.text) == {"location": "Paris", "days": 2, "forecast": ["sunny", "sunny"]}
    assert calls.log == [("weather_get_forecast", {"location": "Paris", "days": 2, "units": "metric"})]
    assert session.discovered == tuple(found)

    assert [list(r.tool_names) for r in result.requests] == [
        ["tool_search"],
        ["tool_search", *found],
        ["tool_search", *found],
    ]
    [record] = result.searches
    assert (record.query, record.names, record.max_results, record.iteration) == ("weather forecast", found, 2, 1)
    assert record.latency_ms >= 0
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    # usage as the provider reported it (the fake counts len(body) // 4), and exact tool tokens growing
    assert [r.usage and r.usage.input_tokens for r in result.requests] == [len(q.raw) // 4 for q in server.requests]
    tool_tokens = result.tool_tokens
    assert 0 < tool_tokens[0] < tool_tokens[1] == tool_tokens[2]
    _all_valid(server)


def scenario_parallel_searches(kind: str, server: FakeLLMServer, index: Any) -> None:
    """Two tool_search calls in one turn: both run, both results go back, both hit sets are exposed."""
    from toolsearch.loop import run
    from toolsearch.metatool import ToolSearchMetaTool
    from toolsearch.session import SessionManager

    catalog = _catalog(index)
    session = SessionManager(index).create("parallel")
    weather, email = hits(index, "weather forecast", 2), hits(index, "send email", 2)
    server.enqueue(
        search("weather forecast", "send email", max_results=2),
        Turn(text="Both found."),
    )
    result = run(make_model(kind, server), "Weather, then an email.", session=session)
    assert result.output == "Both found."
    first, second = server.requests
    meta = ToolSearchMetaTool().definition(session)
    assert_tools(first, search=meta)
    discovered = list(dict.fromkeys([*weather, *email]))
    assert_tools(second, search=meta, discovered=[catalog[n] for n in discovered])
    call_ids = [c.id for c in second.history_calls()]
    results = second.tool_results()
    assert [r.call_id for r in results] == call_ids and len(call_ids) == 2
    assert all(n in results[0].text for n in weather) and all(n in results[1].text for n in email)
    assert [(s.query, s.names, s.iteration) for s in result.searches] == [
        ("weather forecast", weather, 1),
        ("send email", email, 1),
    ]
    assert session.discovered == tuple(discovered)
    _all_valid(server)


def scenario_same_turn_call(kind: str, server: FakeLLMServer, index: Any) -> None:
    """A tool found by a search is callable in that same turn; one the search did not find is not run."""
    from toolsearch.loop import ResultStatus, run
    from toolsearch.session import SessionManager

    session = SessionManager(index).create("same-turn")
    assert hits(index, "current weather", 1) == ["weather_get_current"]
    calls = Calls()
    server.enqueue(
        Turn(
            tool_calls=[
                ("tool_search", {"query": "current weather", "max_results": 1}),
                ("weather_get_current", {"location": "Oslo"}),
                ("sms_send_text", {"to": "+15550100", "body": "hi"}),  # allowed, but no search found it
            ]
        ),
        Turn(text="Oslo is clear."),
    )
    result = run(make_model(kind, server), "Weather in Oslo?", session=session, functions=implementations(calls))
    assert result.output == "Oslo is clear."
    search_result, weather, sms = server.requests[1].tool_results()
    assert "weather_get_current" in search_result.text
    assert weather.text == "Oslo: 21C, clear"
    assert "not loaded yet" in sms.text and "tool_search" in sms.text
    assert [r.status for r in result.tool_results] == [
        ResultStatus.SEARCH,
        ResultStatus.OK,
        ResultStatus.NOT_DISCOVERED,
    ]
    assert calls.names() == ["weather_get_current"]
    assert session.discovered == ("weather_get_current",)
    _all_valid(server)


def scenario_dotted_names(kind: str, server: FakeLLMServer, index: Any) -> None:
    """`math.factorial` goes over the wire as a safe alias and comes back as the catalog name."""
    from toolsearch.loop import run
    from toolsearch.metatool import ToolSearchMetaTool
    from toolsearch.session import SessionManager

    catalog = _catalog(index)
    session = SessionManager(index).create("dotted")
    alias = provider_safe_name("math.factorial")
    assert alias != "math.factorial"
    calls = Calls()
    server.enqueue(search("factorial"), call_found(("math.factorial", {"n": 5})), Turn(text="5! = 120"))
    result = run(make_model(kind, server), "What is 5!?", session=session, functions=implementations(calls))
    assert result.output == "5! = 120"
    first, second, third = server.requests
    assert first.tool_names == ["tool_search"]
    assert hits(index, "factorial") == ["math.factorial"]
    meta = ToolSearchMetaTool().definition(session)
    assert_tools(second, search=meta, discovered=[catalog["math.factorial"]])
    assert second.tool_names == ["tool_search", alias]
    assert [c.name for c in third.history_calls()] == ["tool_search", alias]  # the history replays the alias
    assert third.tool_results()[0].text == "120"
    assert calls.log == [("math.factorial", {"n": 5})]
    assert result.tool_results[-1].call.name == "math.factorial"  # mapped back for the caller
    assert [list(r.tool_names) for r in result.requests][1] == ["tool_search", "math.factorial"]
    for request in server.requests:
        assert "math.factorial" not in request.tool_names
    _all_valid(server)


def scenario_tool_errors(kind: str, server: FakeLLMServer, index: Any, *, raw_arguments: bool) -> None:
    """Failures of every kind go back to the model as tool results; nothing invalid runs."""
    from toolsearch.loop import ResultStatus, run
    from toolsearch.metatool import ToolSearchMetaTool
    from toolsearch.session import SessionManager

    catalog = _catalog(index)
    pinned = ["email_send_message", "weather_get_forecast", "weather_get_historical"]
    session = SessionManager(index).create("errors", pinned=pinned)
    calls = Calls()
    email = {"to": ["a@example.com"], "subject": "Hi", "body": "Hello"}
    bad_calls: list[Any] = [
        ("email_send_message", email),  # raises
        ("weather_get_forecast", {"days": 2}),  # required `location` missing
        ("weather_get_forecast", {"location": "Rome", "days": 99}),  # above the schema's maximum
        (
            "weather_get_historical",
            {"location": "Rome", "start_date": "2020-01-01", "end_date": "2020-01-02"},
        ),  # slower than the timeout
        ("crm_delete_contact", {"contact_id": "c1"}),  # allowed, never discovered
        ("no_such_tool", {}),  # not in the catalog
    ]
    expected = [
        ResultStatus.ERROR,
        ResultStatus.INVALID_ARGUMENTS,
        ResultStatus.INVALID_ARGUMENTS,
        ResultStatus.TIMEOUT,
        ResultStatus.NOT_DISCOVERED,
        ResultStatus.NOT_AVAILABLE,
    ]
    if raw_arguments:  # only OpenAI can send arguments that are not JSON at all
        bad_calls.append(("weather_get_forecast", '{"location": "Rome",'))
        expected.append(ResultStatus.INVALID_ARGUMENTS)
    server.enqueue(Turn(tool_calls=bad_calls), Turn(text="Sorry, several things failed."))
    result = run(
        make_model(kind, server),
        "Do it all.",
        session=session,
        functions=implementations(calls),
        tool_timeout=1.0,  # the slow tool blocks until abandoned; the others finish well within this
    )
    assert result.output == "Sorry, several things failed."
    assert [r.status for r in result.tool_results] == expected
    first, second = server.requests
    assert_tools(first, pinned=[catalog[n] for n in pinned], search=ToolSearchMetaTool().definition(session))
    texts = [r.text for r in second.tool_results()]
    assert len(texts) == len(expected)
    assert "ConnectionError" in texts[0] and "SMTP server refused" in texts[0]
    assert "location" in texts[1] and "required" in texts[1]
    assert "99" in texts[2]
    assert "timed out" in texts[3]
    assert "not loaded yet" in texts[4]
    assert "not available" in texts[5]
    if kind == ANTHROPIC_FORMAT:
        assert [r.is_error for r in second.tool_results()] == [True] * len(expected)
    # only the valid calls ran: the failing one and the slow one
    assert sorted(calls.names()) == ["email_send_message", "weather_get_historical"]
    _all_valid(server)


def scenario_parallel_errors_and_timeouts(
    kind: str, server: FakeLLMServer, index: Any, *, asynchronous: bool = False
) -> None:
    """One turn of parallel calls mixing a success, a raise, bad arguments, an undiscovered tool and two
    calls that time out: every result comes back in call order, and the two timeouts ran together
    (each met the other before the executor gave up on it; see `Rendezvous`)."""
    from toolsearch.loop import ResultStatus, arun, run
    from toolsearch.session import SessionManager

    pinned = ["email_send_message", "weather_get_forecast", "weather_get_current", "weather_get_historical"]
    session = SessionManager(index).create(f"parallel-errors-{kind}-{asynchronous}", pinned=pinned)
    calls = Calls()
    timeout = 2.0
    slow = Rendezvous("weather_get_current", "weather_get_historical", patience=timeout / 2)
    functions = implementations(calls)
    make = slow.async_tool if asynchronous else slow.sync_tool
    functions.update({name: make(name) for name in slow.names})
    history = {"location": "Rome", "start_date": "2020-01-01", "end_date": "2020-01-02"}
    server.enqueue(
        Turn(
            tool_calls=[
                ("weather_get_current", {"location": "Rome"}),  # times out, after meeting the other slow call
                ("email_send_message", {"to": ["a@example.com"], "subject": "Hi", "body": "Hello"}),  # raises
                ("weather_get_forecast", {"location": "Rome", "days": 1}),  # succeeds
                ("weather_get_forecast", {"days": 2}),  # required `location` missing
                ("weather_get_historical", history),  # times out, after meeting the other slow call
                ("crm_delete_contact", {"contact_id": "c1"}),  # never discovered
            ]
        ),
        Turn(text="Partly done."),
    )
    options: dict[str, Any] = {"session": session, "functions": functions, "tool_timeout": timeout}
    try:
        if asynchronous:
            result = asyncio.run(arun(make_model(kind, server, asynchronous=True), "Do it all.", **options))
        else:
            result = run(make_model(kind, server), "Do it all.", **options)
    finally:
        slow.close()
    assert result.output == "Partly done."
    assert [r.status for r in result.tool_results] == [
        ResultStatus.TIMEOUT,
        ResultStatus.ERROR,
        ResultStatus.OK,
        ResultStatus.INVALID_ARGUMENTS,
        ResultStatus.TIMEOUT,
        ResultStatus.NOT_DISCOVERED,
    ]
    # both slow calls were running at once: each met the other before the executor abandoned it
    assert sorted(slow.met) == sorted(slow.names)
    texts = [r.text for r in server.requests[1].tool_results()]
    assert "timed out" in texts[0] and "timed out" in texts[4]
    assert "SMTP server refused" in texts[1] and "Rome" in texts[2] and "location" in texts[3]
    assert sorted(calls.names()) == ["email_send_message", "weather_get_forecast"]
    _all_valid(server)


def scenario_empty_reply_then_continue(kind: str, server: FakeLLMServer, index: Any) -> None:
    """A model that answered with nothing, then a follow-up user turn: the history must still be a
    request the API accepts (no empty text block, no null assistant content)."""
    from toolsearch.loop import run
    from toolsearch.providers import Message
    from toolsearch.session import SessionManager

    session = SessionManager(index).create(f"empty-{kind}")
    server.enqueue(Turn(text=""), Turn(text="Here I am."))
    first = run(make_model(kind, server), "Hello?", session=session)
    assert first.output == ""
    second = run(make_model(kind, server), [*first.messages, Message("user", "Still there?")], session=session)
    assert second.output == "Here I am."
    assert server.requests[-1].user_texts()[-1].endswith("Still there?")
    _all_valid(server)


def scenario_iteration_guard(kind: str, server: FakeLLMServer, index: Any) -> None:
    """The request limit stops a model that never answers; identical repeated calls stop it too."""
    from toolsearch.loop import LoopOutcome, ResultStatus, run
    from toolsearch.session import SessionManager

    sessions = SessionManager(index)
    queries = iter(["weather", "email", "calendar", "slack", "github"])
    server.policy = lambda request: search(next(queries))
    result = run(make_model(kind, server), "Loop forever.", session=sessions.create("limit"), max_iterations=3)
    assert result.outcome == LoopOutcome.MAX_ITERATIONS
    assert len(server.requests) == 3 == len(result.requests)
    assert [s.query for s in result.searches] == ["weather", "email", "calendar"]

    server.reset()
    server.policy = lambda request: search("weather forecast")
    result = run(
        make_model(kind, server), "Repeat.", session=sessions.create("repeat"), max_identical_calls=2, max_iterations=10
    )
    assert result.outcome == LoopOutcome.REPEATED_CALL
    assert len(server.requests) == 3 == len(result.requests)
    assert len(result.searches) == 2
    assert result.tool_results[-1].status == ResultStatus.SKIPPED
    _all_valid(server)


def scenario_eviction(kind: str, server: FakeLLMServer, index: Any) -> None:
    """With a cap on discovered tools, the least recently used one leaves the tools array."""
    from toolsearch.loop import ResultStatus, run
    from toolsearch.metatool import ToolSearchMetaTool
    from toolsearch.session import SessionManager

    catalog = _catalog(index)
    session = SessionManager(index, max_discovered=2).create("evict")
    best, second_best = hits(index, "weather forecast", 2)
    calls = Calls()
    server.enqueue(
        search("weather forecast", max_results=2),
        search("factorial", max_results=1),
        Turn(tool_calls=[(second_best, {"location": "Nice"})]),  # evicted by now
        Turn(text="done"),
    )
    result = run(make_model(kind, server), "Weather and maths.", session=session, functions=implementations(calls))
    meta = ToolSearchMetaTool().definition(session)
    first, second, third, fourth = server.requests
    assert_tools(first, search=meta)
    assert_tools(second, search=meta, discovered=[catalog[best], catalog[second_best]])
    # the best weather hit was used more recently (best-first discovery), so the runner-up goes
    assert_tools(third, search=meta, discovered=[catalog[best], catalog["math.factorial"]])
    assert_tools(fourth, search=meta, discovered=[catalog[best], catalog["math.factorial"]])
    assert result.searches[1].evicted == (second_best,)
    assert second_best in third.tool_results()[0].text  # the model is told what was unloaded
    assert result.tool_results[-1].status == ResultStatus.NOT_DISCOVERED
    assert calls.log == []
    assert session.discovered == (best, "math.factorial")
    _all_valid(server)


def native_search_tool(session: Any) -> dict[str, Any]:
    """The Responses API's client-executed `tool_search` tool, as toolsearch sends it in native mode."""
    from toolsearch.metatool import ToolSearchMetaTool

    definition = ToolSearchMetaTool().definition(session)
    return {
        "type": "tool_search",
        "execution": "client",
        "description": definition.description,
        "parameters": dict(definition.input_schema),
    }


def scenario_native_eviction(kind: str, server: FakeLLMServer, index: Any) -> None:
    """Native tool search with a cap on discovered tools: a tool found, then evicted, stays referenced by
    the history's search result, so every request must still be one the API accepts (the strict server
    checks it), the model is told what was unloaded, and a call to the evicted tool is refused."""
    from toolsearch.loop import ResultStatus, run
    from toolsearch.metatool import ToolSearchMetaTool
    from toolsearch.session import SessionManager

    catalog = _catalog(index)
    session = SessionManager(index, max_discovered=2).create(f"native-evict-{kind}")
    best, second_best = hits(index, "weather forecast", 2)
    calls = Calls()
    server.enqueue(
        search("weather forecast", max_results=2),
        search("factorial", max_results=1),
        Turn(tool_calls=[(provider_safe_name(second_best), {"location": "Nice"})]),  # evicted by now
        Turn(text="done"),
    )
    result = run(
        make_model(kind, server),
        "Weather and maths.",
        session=session,
        functions=implementations(calls),
        tool_search_mode="native",
    )
    first, second, third, fourth = server.requests
    assert result.searches[1].evicted == (second_best,)
    assert session.discovered == (best, "math.factorial")
    assert result.tool_results[-1].status == ResultStatus.NOT_DISCOVERED
    assert calls.log == []
    [first_search] = second.tool_results()
    assert first_search.references == tuple(provider_safe_name(n) for n in (best, second_best))
    # native results carry references only, so the model learns of the eviction when it calls the tool
    assert (
        second_best in fourth.tool_results()[0].text or provider_safe_name(second_best) in fourth.tool_results()[0].text
    )
    if kind == ANTHROPIC_FORMAT:
        meta = ToolSearchMetaTool().definition(session)
        assert_tools(first, search=meta)
        assert_tools(second, search=meta, deferred=[catalog[best], catalog[second_best]])
        # the evicted tool is no longer discovered, but the first search result still holds a
        # tool_reference to it: its deferred definition must stay in `tools` or the API refuses
        # the request ("Tool reference ... not found in available tools")
        for request in (third, fourth):
            assert_tools(
                request, search=meta, deferred=[catalog[best], catalog["math.factorial"], catalog[second_best]]
            )
            references = {ref for r in _all_results(request) for ref in r.references}
            assert provider_safe_name(second_best) in references
            assert references <= set(request.deferred_tool_names)
    else:
        native = native_search_tool(session)
        # found tools travel in the tool_search_output items of the history, never in `tools`
        assert first.tools == second.tools == third.tools == fourth.tools == [native]
        outputs = [i for i in fourth["input"] if i.get("type") == "tool_search_output"]
        assert [[t["name"] for t in o["tools"]] for o in outputs] == [
            [provider_safe_name(best), provider_safe_name(second_best)],
            [provider_safe_name("math.factorial")],
        ]
    _all_valid(server)


def _all_results(request: Request) -> list[Any]:
    """Every tool result in a Messages request's history (not only the last turn's)."""
    from .llm_server import ToolResult

    out = []
    for message in request.messages:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                refs = tuple(
                    r["tool_name"]
                    for r in (inner if isinstance(inner, list) else [])
                    if r.get("type") == "tool_reference"
                )
                out.append(ToolResult(str(block.get("tool_use_id")), "", None, refs, block))
    return out


def scenario_allowed_subset(kind: str, server: FakeLLMServer, index: Any) -> None:
    """A session limited to some tools never sees, finds or runs the others."""
    from toolsearch.loop import ResultStatus, run
    from toolsearch.metatool import ToolSearchMetaTool
    from toolsearch.session import SessionManager

    catalog = _catalog(index)
    weather = [t.name for t in catalog if t.namespace == "weather"]
    session = SessionManager(index).create("limited", allowed=weather)
    calls = Calls()
    server.enqueue(
        search("factorial"),
        Turn(tool_calls=[("math.factorial", {"n": 4})]),  # a guessed name, outside the session
        Turn(text="I cannot compute that."),
    )
    result = run(make_model(kind, server), "4!?", session=session, functions=implementations(calls))
    _, second, third = server.requests
    meta = ToolSearchMetaTool().definition(session)
    assert_tools(second, search=meta)  # nothing found: nothing exposed
    assert "factorial" not in json.dumps(second.tools)
    assert result.searches[0].names == []
    assert [r.status for r in result.tool_results[1:]] == [ResultStatus.NOT_AVAILABLE]
    assert "not available" in third.tool_results()[0].text
    assert calls.log == []
    assert_tools(third, search=meta)
    _all_valid(server)


def scenario_auto_sends_a_small_subset_whole(kind: str, server: FakeLLMServer, index: Any) -> None:
    """tool_search="auto": a session whose allowed tools fit the token limit gets them all, no tool_search;
    a bigger one gets tool_search alone. Either way only allowed tools run."""
    from toolsearch.loop import ResultStatus, run, session_tool_tokens
    from toolsearch.metatool import ToolSearchMetaTool
    from toolsearch.session import SessionManager

    catalog = _catalog(index)
    small = ["math.factorial", "math.gcd", "weather_get_current"]
    manager = SessionManager(index)
    session = manager.create("small", allowed=small)
    limit = session_tool_tokens(session)
    calls = Calls()
    server.enqueue(
        call_found(("math.factorial", {"n": 5}), ("weather_get_current", {"location": "Oslo"})),
        Turn(tool_calls=[("email_send_message", {"to": ["a@b.c"], "subject": "x", "body": "y"})]),
        Turn(text="120, and 21C in Oslo."),
    )
    model = make_model(kind, server)
    result = run(
        model,
        "5! and Oslo?",
        session=session,
        functions=implementations(calls),
        tool_search="auto",
        direct_max_tokens=limit,
        system="Be brief.",
    )
    in_order = [t for t in catalog if t.name in small]  # catalog order
    for request in server.requests:
        assert_tools(request, pinned=in_order)
        assert request.system is None or "tool_search" not in request.system
    assert not result.tool_search and result.output == "120, and 21C in Oslo."
    assert calls.names() == ["math.factorial", "weather_get_current"]  # the email tool is outside the subset
    assert [r.status for r in result.tool_results][-1] is ResultStatus.NOT_AVAILABLE

    before = len(server.requests)
    server.enqueue(Turn(text="I would need to search."))
    bigger = manager.create("bigger", allowed=[*small, "weather_get_forecast"])
    result = run(model, "x", session=bigger, functions={}, tool_search="auto", direct_max_tokens=limit)
    assert result.tool_search
    assert_tools(server.requests[before], search=ToolSearchMetaTool().definition(bigger))
    _all_valid(server)


def scenario_evicted_alias_called_again(kind: str, server: FakeLLMServer, index: Any) -> None:
    """A dotted tool used, then evicted, then called again by its alias: an instructive result, no run."""
    from toolsearch.loop import ResultStatus, run
    from toolsearch.metatool import ToolSearchMetaTool
    from toolsearch.session import SessionManager

    catalog = _catalog(index)
    alias = provider_safe_name("math.factorial")
    session = SessionManager(index, max_discovered=1).create("evicted-alias")
    [weather] = hits(index, "weather forecast", 1)
    calls = Calls()
    server.enqueue(
        search("factorial", max_results=1),
        call_found(("math.factorial", {"n": 3})),
        search("weather forecast", max_results=1),
        Turn(tool_calls=[(alias, {"n": 4})]),  # the model remembers the alias; the tool is gone
        Turn(text="done"),
    )
    result = run(make_model(kind, server), "3! then weather", session=session, functions=implementations(calls))
    assert result.output == "done"
    meta = ToolSearchMetaTool().definition(session)
    requests = server.requests
    assert_tools(requests[1], search=meta, discovered=[catalog["math.factorial"]])
    assert_tools(requests[3], search=meta, discovered=[catalog[weather]])
    assert result.tool_results[-1].call.name == "math.factorial"
    assert result.tool_results[-1].status == ResultStatus.NOT_DISCOVERED
    assert "tool_search" in requests[4].tool_results()[0].text
    assert calls.log == [("math.factorial", {"n": 3})]
    _all_valid(server)


def scenario_sdk_param_types(kind: str, server: FakeLLMServer, index: Any, *, native: bool = False) -> None:
    """Every body the loop sent (parallel searches, a dotted call, an error) matches the SDK's param types."""
    from toolsearch.loop import run
    from toolsearch.session import SessionManager

    session = SessionManager(index).create("sdk-types", pinned=["email_send_message"])
    server.enqueue(
        search("factorial", "weather forecast", max_results=2),
        call_found(
            ("math.factorial", {"n": 3}), ("email_send_message", {"to": ["a@b.c"], "subject": "s", "body": "b"})
        ),
        Turn(text="done"),
    )
    run(
        make_model(kind, server),
        "go",
        session=session,
        system="Be brief.",
        functions=implementations(Calls()),
        tool_search_mode="native" if native else "schema",
    )
    assert len(server.requests) == 3
    for request in server.requests:
        assert_valid_request(request)


# --- concurrent sessions ----------------------------------------------------------------------

CONCURRENT_TOPICS: tuple[tuple[str, str, Callable[[int], dict[str, Any]]], ...] = (
    ("weather forecast", "weather_get_forecast", lambda i: {"location": f"City{i}", "days": 1}),
    ("factorial", "math.factorial", lambda i: {"n": i % 7}),
    ("greatest common divisor", "math.gcd", lambda i: {"a": 6 * i, "b": 4}),
)


def concurrent_prompt(i: int) -> str:
    return f"task {i}: {CONCURRENT_TOPICS[i % len(CONCURRENT_TOPICS)][0]}"


def concurrent_policy(request: Request) -> Turn:
    """Stateless: the conversation's first user message says which task it is, its length which step."""
    i = int(request.user_text.split(":")[0].removeprefix("task "))
    query, tool, arguments = CONCURRENT_TOPICS[i % len(CONCURRENT_TOPICS)]
    step = request.assistant_turns
    if step == 0:
        return Turn(tool_calls=[("tool_search", {"query": query, "max_results": 1})], delay=0.005)
    if step == 1:
        return Turn(tool_calls=[(provider_safe_name(tool), arguments(i))], delay=0.005)
    return Turn(text=f"task {i} -> {request.tool_results()[0].text}")


def expected_answer(i: int) -> str:
    _, tool, arguments = CONCURRENT_TOPICS[i % len(CONCURRENT_TOPICS)]
    args = arguments(i)
    if tool == "weather_get_forecast":
        value = json.dumps({"location": args["location"], "days": 1, "forecast": ["sunny"]})
    elif tool == "math.factorial":
        value = str(_factorial(args["n"]))
    else:
        value = str(_gcd(args["a"], args["b"]))
    return f"task {i} -> {value}"


def check_concurrent_sessions(server: FakeLLMServer, index: Any, sessions: Any, results: Sequence[Any], n: int) -> None:
    """Every session got its own answer and saw only its own discoveries, request by request."""
    from toolsearch.loop import LoopOutcome
    from toolsearch.metatool import ToolSearchMetaTool

    catalog = _catalog(index)
    assert [r.output for r in results] == [expected_answer(i) for i in range(n)]
    assert all(r.outcome == LoopOutcome.COMPLETED for r in results)
    by_task: dict[str, list[Request]] = {}
    for request in server.requests:
        by_task.setdefault(request.user_text, []).append(request)
    assert len(by_task) == n
    for i in range(n):
        query, tool, _ = CONCURRENT_TOPICS[i % len(CONCURRENT_TOPICS)]
        assert hits(index, query, 1) == [tool]
        first, second, third = by_task[concurrent_prompt(i)]
        session = sessions.get(f"user-{i}")
        meta = ToolSearchMetaTool().definition(session)
        assert_tools(first, search=meta)
        assert_tools(second, search=meta, discovered=[catalog[tool]])
        assert_tools(third, search=meta, discovered=[catalog[tool]])
        assert session.discovered == (tool,)
        assert results[i].session_id == f"user-{i}"
        assert [s.names for s in results[i].searches] == [[tool]]
    _all_valid(server)
