"""The framework plug-ins against the frameworks' own rights and async paths: a tool the application disables for
a caller (the Agents SDK's `is_enabled`, a LangChain middleware that filters `request.tools`) is never offered,
sent or run; an async `on_augment` is awaited under `ainvoke` and `Runner.run`; Pydantic AI's strategy checks its
options at once and builds off the event loop, once for runs that search a new tool set together; a turn of the
Agents SDK reads its session once, and tool_search asks the tools' own async checks together; an older LangChain is
named as such. Real frameworks, the real `openai` client against the local wire-format server, a real
redis-server."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from agents import (
    Agent,
    FunctionTool,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from fakes import FakeLLMServer, Turn, toy_tools
from fakes.toy_tools import RAN
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import BaseModel
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import Tool as PydanticTool
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.tools import ToolDefinition
from redis_server import RedisServer

import toolsearch
from toolsearch import (
    ArgumentTypeError,
    BackendError,
    Hit,
    InvalidArgumentError,
    Ranking,
    Session,
    SessionManager,
    Tool,
    ToolIndex,
)
from toolsearch.backends import BACKENDS, BackendSpec, register_backend
from toolsearch.integrations.langchain import ToolSearchMiddleware
from toolsearch.integrations.openai_agents import AgentToolSearch
from toolsearch.integrations.pydantic_ai import ToolSearchStrategy, tool_search
from toolsearch.stores import store_from_url

set_tracing_disabled(True)  # no trace exporter: nothing may leave the machine


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    RAN.clear()
    with FakeLLMServer() as fake:
        yield fake


def delete_account(user: str) -> str:
    """Delete a user account permanently."""
    RAN.append("delete_account")
    return "deleted"


def _search_then_delete(server: FakeLLMServer, search_name: str = "tool_search") -> None:
    server.enqueue(
        Turn(tool_calls=[(search_name, {"query": "delete account"}, "s1")]),
        Turn(tool_calls=[("delete_account", {"user": "bob"}, "c1")]),
        Turn(text="done"),
    )


# --- OpenAI Agents SDK: a tool's own is_enabled is the caller's rights ----------------------------------------


@dataclass
class Caller:
    role: str
    toolsearch_session: Session


def admins_only(ctx: RunContextWrapper[Any], agent: Any) -> bool:
    return bool(ctx.context.role == "admin")


async def admins_only_async(ctx: RunContextWrapper[Any], agent: Any) -> bool:
    await asyncio.sleep(0)
    return bool(ctx.context.role == "admin")


def _agents_setup(server: FakeLLMServer, check: Any) -> tuple[AgentToolSearch, Agent[Any]]:
    delete = function_tool(delete_account, is_enabled=check)
    search = AgentToolSearch([delete, function_tool(toy_tools.get_weather)])
    model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=server.async_openai())
    return search, Agent(name="assistant", model=model, tools=list(search.tools))


@pytest.mark.parametrize("check", [admins_only, admins_only_async], ids=["sync", "async"])
def test_a_tool_disabled_for_the_caller_is_never_offered_sent_or_run(server: FakeLLMServer, check: Any) -> None:
    search, agent = _agents_setup(server, check)
    _search_then_delete(server)
    guest = Caller("guest", search.session("guest"))
    Runner.run_sync(agent, "delete bob", context=guest, run_config=search.run_config())
    found, refused = server.requests[1].tool_results()[0].text, server.requests[2].tool_results()[0].text
    assert "delete_account" not in found
    assert [r.tool_names for r in server.requests] == [["tool_search"]] * 3
    assert "is not available" in refused and "just loaded" not in refused
    assert RAN == [] and guest.toolsearch_session.discovered == ()
    # the same agent for an admin: found, sent and run
    _search_then_delete(server)
    Runner.run_sync(agent, "delete bob", context=Caller("admin", search.session("admin")),
                    run_config=search.run_config())
    assert "delete_account" in server.requests[4].tool_results()[0].text
    assert server.requests[4].tool_names == ["tool_search", "delete_account"]
    assert RAN == ["delete_account"]


def test_a_tool_the_session_found_stays_disabled_for_a_caller_without_the_right(server: FakeLLMServer) -> None:
    search, agent = _agents_setup(server, admins_only)
    shared = search.session("shared")
    server.enqueue(Turn(tool_calls=[("tool_search", {"query": "delete account"}, "s1")]), Turn(text="found"))
    Runner.run_sync(agent, "find it", context=Caller("admin", shared), run_config=search.run_config())
    assert shared.discovered == ("delete_account",)
    server.enqueue(Turn(tool_calls=[("delete_account", {"user": "bob"}, "c1")]), Turn(text="done"))
    Runner.run_sync(agent, "delete bob", context=Caller("guest", shared), run_config=search.run_config())
    assert server.requests[2].tool_names == ["tool_search"]  # discovered, yet not the guest's
    assert "is not available" in server.requests[3].tool_results()[0].text
    assert RAN == []


def test_a_tool_switched_off_for_everyone_is_never_found(server: FakeLLMServer) -> None:
    search, agent = _agents_setup(server, False)
    _search_then_delete(server)
    session = search.session("u1")
    Runner.run_sync(agent, "delete bob", context=Caller("admin", session), run_config=search.run_config())
    assert "delete_account" not in server.requests[1].tool_results()[0].text
    assert "is not available" in server.requests[2].tool_results()[0].text
    assert session.discovered == () and RAN == []


def _many_tools(count: int) -> list[FunctionTool]:
    async def run(ctx: Any, arguments: str) -> str:
        return "ok"

    return [
        FunctionTool(name=f"tool_{i}", description=f"Task {i} for accounts and invoices",
                     params_json_schema={"type": "object", "properties": {}}, on_invoke_tool=run)
        for i in range(count)
    ]


@pytest.mark.slow
def test_a_turn_reads_its_session_once_for_all_its_tools(redis_server: RedisServer) -> None:
    tools = _many_tools(40)
    index = ToolIndex.build([Tool(t.name, t.description) for t in tools], "bm25")
    manager = SessionManager(index, store=store_from_url(redis_server.url))
    search = AgentToolSearch(tools, pinned=["tool_0"], sessions=manager)
    agent = Agent(name="assistant", tools=search.tools)
    session = search.session("u1")
    ctx = RunContextWrapper(context=session)
    client = redis_server.client()

    def commands() -> int:
        return int(client.info("stats")["total_commands_processed"])

    before = commands()
    enabled = asyncio.run(agent.get_all_tools(ctx))  # what the SDK asks before each model call
    spent = commands() - before - 1  # less the INFO that asked
    assert [t.name for t in enabled] == ["tool_0", "tool_search"]
    assert spent <= 2, spent  # one read of the session, not one per tool (40 before)
    session.discover(["tool_7"])  # the next turn reads it again: what a search found is sent
    assert [t.name for t in asyncio.run(agent.get_all_tools(ctx))] == ["tool_0", "tool_search", "tool_7"]


def test_run_config_takes_the_not_found_behaviour_it_needs_and_refuses_another() -> None:
    search = AgentToolSearch([function_tool(toy_tools.get_weather)])
    config = search.run_config(tool_not_found_behavior="return_error_to_model", workflow_name="w")
    assert config.tool_not_found_behavior == "return_error_to_model" and config.workflow_name == "w"
    with pytest.raises(InvalidArgumentError, match=r"tool_not_found_behavior='raise_error'.*leave the option out"):
        search.run_config(tool_not_found_behavior="raise_error")


# --- an async on_augment under the frameworks' async paths ---------------------------------------------------


class Why(BaseModel):
    reason: str


def _augmented_turns(server: FakeLLMServer) -> None:
    server.enqueue(
        Turn(tool_calls=[("tool_search", {"query": "weather forecast"}, "s1")]),
        Turn(tool_calls=[("get_weather", {"city": "Paris", "reason": "asked"}, "c1")]),
        Turn(text="done"),
    )


def _consumer() -> tuple[list[tuple[str, dict[str, Any]]], Any]:
    got: list[tuple[str, dict[str, Any]]] = []

    async def on_augment(name: str, values: Mapping[str, Any], call_id: str) -> None:
        await asyncio.sleep(0)  # an async store, say
        got.append((name, dict(values)))

    return got, on_augment


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_agents_runs_await_an_async_on_augment(server: FakeLLMServer, mode: str) -> None:
    got, on_augment = _consumer()
    search = AgentToolSearch([function_tool(toy_tools.get_weather)], augment=Why, on_augment=on_augment)
    model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=server.async_openai())
    agent = Agent(name="assistant", model=model, tools=list(search.tools))
    _augmented_turns(server)
    session = search.session("u1")
    if mode == "async":
        asyncio.run(Runner.run(agent, "weather", context=session, run_config=search.run_config()))
    else:  # run_sync drives the same async tools on its own loop
        Runner.run_sync(agent, "weather", context=session, run_config=search.run_config())
    assert server.requests[2].tool_results()[0].text == "sunny in Paris"
    assert got == [("get_weather", {"reason": "asked"})] and RAN == ["get_weather"]


def _chat_model(server: FakeLLMServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-test", base_url=server.openai_base_url, api_key="test-key",  # type: ignore[arg-type]
                      max_retries=0, use_responses_api=False)


def test_langchain_ainvoke_awaits_an_async_on_augment(server: FakeLLMServer) -> None:
    got, on_augment = _consumer()
    middleware = ToolSearchMiddleware([tool(toy_tools.get_weather)], augment=Why, on_augment=on_augment)
    agent = create_agent(_chat_model(server), middleware=[middleware])
    _augmented_turns(server)
    asyncio.run(agent.ainvoke({"messages": [{"role": "user", "content": "weather"}]}))
    assert server.requests[2].tool_results()[0].text == "sunny in Paris"
    assert got == [("get_weather", {"reason": "asked"})] and RAN == ["get_weather"]


def test_langchain_invoke_with_an_async_on_augment_says_to_use_ainvoke(server: FakeLLMServer) -> None:
    got, on_augment = _consumer()
    middleware = ToolSearchMiddleware([tool(toy_tools.get_weather)], augment=Why, on_augment=on_augment)
    agent = create_agent(_chat_model(server), middleware=[middleware])
    _augmented_turns(server)
    with pytest.raises(ArgumentTypeError, match="run the agent with ainvoke / astream"):
        agent.invoke({"messages": [{"role": "user", "content": "weather"}]})
    assert got == [] and RAN == []


# --- LangChain: a middleware before this one decides which tools a user has -------------------------------------


@dataclass
class Role:
    role: str


class AdminToolsForAdmins(AgentMiddleware):  # type: ignore[type-arg]
    """LangChain's per-user tool filter: admin tools leave the model request for anyone else."""

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        if request.runtime.context.role != "admin":
            request = request.override(tools=[t for t in request.tools if getattr(t, "name", "") != "delete_account"])
        return handler(request)


def test_langchain_never_sends_offers_or_runs_a_tool_an_earlier_middleware_withheld(server: FakeLLMServer) -> None:
    search = ToolSearchMiddleware([tool(delete_account), tool(toy_tools.get_weather)])
    agent = create_agent(_chat_model(server), middleware=[AdminToolsForAdmins(), search], context_schema=Role,
                         checkpointer=InMemorySaver())
    _search_then_delete(server)
    result = agent.invoke({"messages": [{"role": "user", "content": "delete bob"}]},
                          {"configurable": {"thread_id": "guest"}}, context=Role("guest"))
    assert [r.tool_names for r in server.requests] == [["tool_search"]] * 3
    assert "delete_account" not in server.requests[1].tool_results()[0].text
    assert "is not available" in server.requests[2].tool_results()[0].text
    assert RAN == [] and result["toolsearch_withheld"] == ["delete_account"]
    _search_then_delete(server)
    result = agent.invoke({"messages": [{"role": "user", "content": "delete bob"}]},
                          {"configurable": {"thread_id": "admin"}}, context=Role("admin"))
    assert server.requests[4].tool_names == ["tool_search", "delete_account"]
    assert RAN == ["delete_account"] and not result.get("toolsearch_withheld")


# --- Pydantic AI: options checked at once, indexes built off the event loop -----------------------------------


def test_pydantic_tool_search_checks_its_options_before_any_run() -> None:
    with pytest.raises(BackendError, match="unknown backend 'vektor'"):
        tool_search("vektor")
    with pytest.raises(BackendError, match="unknown bm25 option 'nope'"):
        tool_search(nope=1)


def test_pydantic_tool_search_passes_the_capabilitys_own_settings_through(server: FakeLLMServer) -> None:
    capability = tool_search(tools="all", tool_description="Find the tool for a task.")
    assert capability.tools == "all" and capability.tool_description == "Find the tool for a task."
    model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=server.async_openai()))
    agent = PydanticAgent(model, tools=[PydanticTool(toy_tools.get_weather)], capabilities=[capability])
    server.enqueue(Turn(tool_calls=[("search_tools", {"queries": ["weather forecast"]}, "s1")]),
                   Turn(tool_calls=[("get_weather", {"city": "Paris"}, "c1")]), Turn(text="Sunny."))
    assert agent.run_sync("weather in Paris").output == "Sunny."
    first = server.requests[0]
    assert first.tool_names == ["search_tools"]  # tools="all" deferred the plain tool
    assert first.tool("search_tools")["function"]["description"] == "Find the tool for a task."
    assert RAN == ["get_weather"]


class _ThreadProbe:
    """A backend that notes the thread it is built in (and ranks by shared words)."""

    name = "threadprobe"
    built_in: ClassVar[list[int]] = []

    def __init__(self, **options: Any) -> None:
        self.tools: dict[str, set[str]] = {}

    def add(self, tools: Sequence[Tool]) -> None:
        if tools:
            _ThreadProbe.built_in.append(threading.get_ident())
        for t in tools:
            self.tools[t.name] = set(f"{t.name} {t.description}".replace("_", " ").lower().split())

    def remove(self, names: Sequence[str]) -> None:
        for name in names:
            self.tools.pop(name, None)

    def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
        words = set(query.lower().split())
        hits = [Hit(n, float(len(words & w))) for n, w in self.tools.items()
                if (allowed is None or n in allowed) and words & w]
        return Ranking(sorted(hits, key=lambda h: -h.score)[:k])

    def save(self, folder: Path) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {}


@pytest.fixture
def threadprobe() -> Iterator[None]:
    register_backend(BackendSpec("threadprobe", create=lambda **o: _ThreadProbe(**o), load=lambda f, t, **o: None))
    _ThreadProbe.built_in.clear()
    yield
    BACKENDS.unregister("threadprobe")


def test_pydantic_searches_build_their_index_off_the_event_loop(server: FakeLLMServer, threadprobe: None) -> None:
    model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=server.async_openai()))
    tools = [PydanticTool(toy_tools.get_weather, defer_loading=True), PydanticTool(toy_tools.send_email,
                                                                                   defer_loading=True)]
    agent = PydanticAgent(model, tools=tools, capabilities=[tool_search("threadprobe")])
    server.enqueue(Turn(tool_calls=[("search_tools", {"queries": ["weather forecast"]}, "s1")]), Turn(text="ok"))
    loop_thread: list[int] = []

    async def run() -> str:
        loop_thread.append(threading.get_ident())
        return (await agent.run("weather in Paris")).output

    assert asyncio.run(run()) == "ok"
    assert '"get_weather"' in server.requests[1].tool_results()[0].text
    assert len(_ThreadProbe.built_in) == 1 and _ThreadProbe.built_in != loop_thread  # built in a worker thread


class _HeldBuild(_ThreadProbe):
    """A backend whose build holds until the test lets it end (and fails when asked to), so that searches of the
    same new tool set meet while it is under way."""

    name = "heldbuild"
    entered: ClassVar[list[int]] = []  # the threads that began a build
    release = threading.Event()
    fail = False

    def add(self, tools: Sequence[Tool]) -> None:
        if tools:
            _HeldBuild.entered.append(threading.get_ident())
            assert _HeldBuild.release.wait(60), "the test never let the build end"
            if _HeldBuild.fail:
                raise BackendError("the embedding service is down")
        super().add(tools)


@pytest.fixture
def heldbuild() -> Iterator[None]:
    register_backend(BackendSpec("heldbuild", create=lambda **o: _HeldBuild(**o), load=lambda f, t, **o: None))
    _HeldBuild.entered.clear()
    _HeldBuild.release.clear()
    _HeldBuild.fail = False
    yield
    _HeldBuild.release.set()
    BACKENDS.unregister("heldbuild")


def _parked(threads: Sequence[threading.Thread]) -> None:
    """Return once every thread is inside a held build or waiting (on another's build): where they meet."""
    held = _HeldBuild.add.__code__
    deadline = time.monotonic() + 60  # a guard against a hang, not a measurement

    def parked(frame: Any) -> bool:
        while frame is not None:
            code = frame.f_code
            if code is held or (code.co_name == "wait" and code.co_filename == threading.__file__):
                return True
            frame = frame.f_back
        return False

    while True:
        frames = sys._current_frames()
        if all(t.ident in frames and parked(frames[t.ident]) for t in threads):
            return
        assert time.monotonic() < deadline, "the searches never met at the build"
        time.sleep(0.005)


def _search_together(strategy: ToolSearchStrategy, definitions: list[ToolDefinition], runs: int) -> list[Any]:
    """What `runs` Pydantic AI runs searching the new tool set at once do (each search in a worker thread): each
    run's names, or the exception its search raised."""
    outcomes: list[Any] = [None] * runs

    def one(i: int) -> None:
        try:
            outcomes[i] = strategy.search(["weather forecast"], definitions)
        except Exception as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(runs)]
    for thread in threads:
        thread.start()
    _parked(threads)
    _HeldBuild.release.set()
    for thread in threads:
        thread.join()
    return outcomes


def _definitions() -> list[ToolDefinition]:
    return [
        ToolDefinition(name=f"tool_{i}", description=f"Task {i} for invoices",
                       parameters_json_schema={"type": "object", "properties": {}})
        for i in range(20)
    ] + [ToolDefinition(name="get_weather", description="The weather forecast for a city.",
                        parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}})]


def test_pydantic_runs_searching_a_new_tool_set_together_build_its_index_once(heldbuild: None) -> None:
    strategy = ToolSearchStrategy("heldbuild")
    definitions = _definitions()
    outcomes = _search_together(strategy, definitions, 6)
    assert outcomes == [["get_weather"]] * 6
    assert len(_HeldBuild.entered) == 1 and strategy.builds == 1  # the others waited for that build (6 before)
    assert strategy.search(["weather"], definitions) == ["get_weather"] and strategy.builds == 1  # cached


def test_pydantic_runs_waiting_on_a_failed_build_get_its_error_and_the_next_search_builds_again(
    heldbuild: None,
) -> None:
    strategy = ToolSearchStrategy("heldbuild")
    definitions = _definitions()
    _HeldBuild.fail = True
    outcomes = _search_together(strategy, definitions, 4)
    assert all(isinstance(o, BackendError) and "embedding service is down" in str(o) for o in outcomes), outcomes
    assert len(_HeldBuild.entered) == 1 and strategy.builds == 0
    _HeldBuild.fail = False  # the service is back: the failure was not cached
    assert strategy.search(["weather"], definitions) == ["get_weather"]
    assert len(_HeldBuild.entered) == 2 and strategy.builds == 1


def test_agents_tool_search_asks_the_tools_own_async_checks_together(server: FakeLLMServer) -> None:
    in_flight = 0
    peak: dict[str | None, int] = {}  # the most checks under way at once, by the tool call that asked them

    def rights(allows: bool) -> Any:
        async def check(ctx: RunContextWrapper[Any], agent: Any) -> bool:  # a round trip to a rights service
            nonlocal in_flight
            in_flight += 1
            asker = getattr(ctx, "tool_name", None)  # tool_search's context names it; the SDK's turn round's does not
            peak[asker] = max(peak.get(asker, 0), in_flight)
            await asyncio.sleep(0)
            in_flight -= 1
            return allows

        return check

    tools = [dataclasses.replace(t, is_enabled=rights(True)) for t in _many_tools(8)]
    tools.append(dataclasses.replace(function_tool(delete_account), is_enabled=rights(False)))
    search = AgentToolSearch(tools)
    model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=server.async_openai())
    agent = Agent(name="assistant", model=model, tools=list(search.tools))
    server.enqueue(Turn(tool_calls=[("tool_search", {"query": "delete account invoices"}, "s1")]), Turn(text="done"))
    Runner.run_sync(agent, "delete bob", context=search.session("u1"), run_config=search.run_config())
    assert peak["tool_search"] == 9  # all nine asked at once (one at a time before: 1)
    found = server.requests[1].tool_results()[0].text
    assert "tool_0" in found and "delete_account" not in found  # the one its own check disables stays out


# --- LangChain: a LangChain too old for the middleware is named as such ------------------------------------------


def _import_integration(tmp_path: Path, prelude: str, module: str = "langchain") -> tuple[str, str]:
    """The error class and message of `import toolsearch.integrations.<module>` in a fresh interpreter that runs
    `prelude` first, with `tmp_path` ahead of the installed packages."""
    probe = prelude + (
        "\nimport json\n"
        "try:\n"
        f"    import toolsearch.integrations.{module}\n"
        "    print(json.dumps(['imported', '']))\n"
        "except ImportError as exc:\n"
        "    print(json.dumps([type(exc).__name__, str(exc)]))\n"
    )
    root = Path(toolsearch.__file__).parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    kind, message = json.loads(proc.stdout.strip().splitlines()[-1])
    return kind, message


def test_an_older_langchain_is_named_with_its_version_and_the_upgrade(tmp_path: Path) -> None:
    # LangChain 1.2 as far as the middleware's import goes: everything but ExtendedModelResponse (new in 1.5)
    package = tmp_path / "langchain"
    (package / "agents").mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "1.2.0"\n')
    (package / "agents" / "__init__.py").write_text("")
    (package / "agents" / "middleware.py").write_text(
        "AgentState = dict\n"
        "class AgentMiddleware: pass\n"
        "class ModelRequest: pass\n"
        "class ModelResponse: pass\n"
    )
    kind, message = _import_integration(tmp_path, "")
    assert kind == "MissingDependencyError"
    assert message.startswith("LangChain 1.2.0 is installed, but toolsearch's `langchain` extra needs LangChain 1.5 "
                              "or later; upgrade it with: pip install -U 'toolsearch[langchain]'"), message
    assert "ExtendedModelResponse" in message and "not installed" not in message


def test_a_missing_langchain_is_said_to_be_missing(tmp_path: Path) -> None:
    kind, message = _import_integration(tmp_path, "import sys\nsys.modules['langchain'] = None  # not installed")
    assert kind == "MissingDependencyError"
    assert message == "langchain is not installed; install it with: pip install 'toolsearch[langchain]'"


@pytest.mark.parametrize(
    ("module", "package", "version", "expected"),
    [
        ("pydantic_ai", "pydantic_ai", "2.1.0",
         "Pydantic AI 2.1.0 is installed, but toolsearch's `pydantic-ai` extra needs Pydantic AI 2.60 or later; "
         "upgrade it with: pip install -U 'toolsearch[pydantic-ai]'"),
        ("openai_agents", "agents", "0.1.0",
         "the OpenAI Agents SDK 0.1.0 is installed, but toolsearch's `openai-agents` extra needs the OpenAI Agents SDK "
         "0.24 or later; upgrade it with: pip install -U 'toolsearch[openai-agents]'"),
    ],
)
def test_every_integration_names_an_older_release_with_the_upgrade(
    tmp_path: Path, module: str, package: str, version: str, expected: str
) -> None:
    # an old release: the package imports, the names the integration needs do not
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text(f'__version__ = "{version}"\n')
    kind, message = _import_integration(tmp_path, "", module)
    assert kind == "MissingDependencyError" and message.startswith(expected), message
    missing, missing_message = _import_integration(
        tmp_path, f"import sys\nsys.modules[{package!r}] = None  # not installed", module
    )
    assert missing == "MissingDependencyError" and "is not installed" in missing_message, missing_message
