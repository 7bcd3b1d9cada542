"""Intake through the search tool (audit 53): a catalog tool named like it, and arguments it does not take."""

from __future__ import annotations

import pytest

from toolsearch import (
    InvalidToolError,
    SessionManager,
    Tool,
    ToolIndex,
    handle_tool_calls,
    tools_for_request,
)
from toolsearch.executor import ToolExecutor
from toolsearch.integrations._gate import check_catalog
from toolsearch.metatool import ToolSearchMetaTool
from toolsearch.providers import ToolCall

WEB = Tool("tool_search", "Search the web for pages", {"type": "object", "properties": {"q": {"type": "string"}},
                                                       "required": ["q"]})
CLASH = "a catalog tool is named 'tool_search' like the search tool; rename it or pass metatool="


@pytest.fixture
def sessions() -> SessionManager:
    return SessionManager(ToolIndex.build([WEB, Tool("send_email", "Send an email")], "bm25"))


# --- F6: a catalog tool named like the search tool -------------------------------------------------------------------


def test_a_pinned_catalog_tool_named_like_the_search_tool_is_refused_by_the_core_entry_points(
    sessions: SessionManager,
) -> None:
    session = sessions.create("a", pinned=["tool_search"])
    # Before: ['tool_search', 'tool_search'] on every request, and the model's calls ran the search, never the tool.
    with pytest.raises(InvalidToolError, match=CLASH):
        tools_for_request(session, "openai_chat")
    ran: list[str] = []
    with pytest.raises(InvalidToolError, match=CLASH):
        handle_tool_calls(session, [ToolCall("c1", "tool_search", {"q": "cats"})],
                          functions={"tool_search": lambda q: ran.append(q)})
    with pytest.raises(InvalidToolError, match=CLASH):
        ToolExecutor({"tool_search": lambda q: "web results"}).execute(session, [ToolCall("c1", "send_email", {})])
    assert ran == []
    # the plug-ins' check is the same rule, in the same words
    with pytest.raises(InvalidToolError, match=CLASH):
        check_catalog(sessions.index, ["tool_search", "send_email"], ToolSearchMetaTool())


def test_a_search_never_offers_a_catalog_tool_named_like_it(sessions: SessionManager) -> None:
    session = sessions.create("b")
    outcome = ToolSearchMetaTool().run(session, {"query": "search the web for pages"})
    assert "tool_search" not in session.discovered
    assert "tool_search left out: a catalog tool named like the search tool cannot be offered" in outcome.text
    assert [t["function"]["name"] for t in tools_for_request(session, "openai_chat")] == ["tool_search"]


def test_a_search_tool_of_another_name_lets_the_catalog_tool_be_used(sessions: SessionManager) -> None:
    meta = ToolSearchMetaTool(name="find_tools")
    session = sessions.create("c", pinned=["tool_search"])
    names = [t["function"]["name"] for t in tools_for_request(session, "openai_chat", metatool=meta)]
    assert names == ["tool_search", "find_tools"]
    results = handle_tool_calls(session, [ToolCall("c1", "tool_search", {"q": "cats"})],
                                functions={"tool_search": lambda q: f"web results for {q}"}, metatool=meta)
    assert [r.content for r in results] == ["web results for cats"]


# --- F9: arguments tool_search does not take ----------------------------------------------------------------------


def test_unknown_arguments_are_answered_with_the_real_ones() -> None:
    tools = [Tool(f"{ns}_report_{i}", f"Create a {ns} report number {i}", namespace=ns)
             for ns in ("finance", "hr") for i in range(4)]
    session = SessionManager(ToolIndex.build(tools, "bm25")).create("s")
    outcome = ToolSearchMetaTool().run(session, {"query": "create report", "limit": 1, "namespaces": ["finance"]})
    # Before: ok, 5 tools from both namespaces loaded; the limit and the filter were dropped without a word.
    assert not outcome.ok and outcome.result is None and session.discovered == ()
    assert outcome.text.startswith(
        "tool_search error: unknown argument(s) `limit`, `namespaces` (did you mean `namespace`?); nothing was "
        "searched. Its arguments are `query`, `max_results`, `namespace` (only `query` is required)."
    )
    fixed = ToolSearchMetaTool().run(session, {"query": "create report", "max_results": 1, "namespace": "finance"})
    assert fixed.ok and fixed.result is not None and fixed.result.names == ["finance_report_0"]


def test_unknown_arguments_reach_the_model_as_a_tool_result_through_handle_tool_calls() -> None:
    session = SessionManager(ToolIndex.build([Tool("send_email", "Send an email")], "bm25")).create("s")
    (result,) = handle_tool_calls(session, [ToolCall("c1", "tool_search", {"q": "email"})], functions={})
    assert result.is_error and "unknown argument(s) `q`" in result.content
    assert "`query`, `max_results`" in result.content
    assert "namespace" not in result.content.split("Its arguments are")[1].split(".")[0]  # none in this catalog


def test_the_loop_refuses_the_clash_before_its_first_request(sessions: SessionManager) -> None:
    from toolsearch import ToolSearchLoop
    from toolsearch.providers import ScriptedModel

    model = ScriptedModel(["never asked"])
    loop = ToolSearchLoop(model, sessions)
    # Before: the first request went out with two tools named tool_search, which providers refuse.
    with pytest.raises(InvalidToolError, match=CLASH):
        loop.run("find me a web page", session_id="pinned", pinned=["tool_search"])
    assert model.requests == []


@pytest.mark.parametrize("mode", ["off", "auto"])
def test_in_direct_mode_a_catalog_tool_named_like_the_search_tool_is_called_as_itself(
    sessions: SessionManager, mode: str
) -> None:
    from toolsearch import run
    from toolsearch.providers import ScriptedModel, call

    model = ScriptedModel([call("tool_search", q="cats"), "done"])
    ran: list[str] = []
    result = run(model, "find cat pages", session=sessions.create(f"direct-{mode}"), tool_search=mode,
                 functions={"tool_search": lambda q: ran.append(q) or f"web results for {q}"})
    # Before: no search tool was sent, yet the call named tool_search ran the search and never the catalog tool.
    assert ran == ["cats"] and not result.searches
    assert [r.content for r in result.tool_results] == ["web results for cats"]
    assert sorted(t["function"]["name"] for t in model.payloads[0]["tools"]) == ["send_email", "tool_search"]
