"""The tool_search meta-tool: definition per session and backend, argument checks, compact results."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import pytest

from toolsearch import Catalog, Hit, InvalidQueryError, Ranking, Tool, ToolIndex
from toolsearch.backends import get_backend_spec
from toolsearch.metatool import ToolSearchMetaTool, one_line_summary, query_help, system_prompt_suffix
from toolsearch.session import SessionManager

TOOLS = [
    Tool("weather_current", "Current weather conditions for a city. Uses live station data.", namespace="weather"),
    Tool("weather_forecast", "Multi-day weather forecast for a city.", namespace="weather"),
    Tool("email_send", "Send an email message to recipients.", namespace="email"),
    Tool("email_search", "Search the mailbox for email messages.", namespace="email"),
    Tool("calculator", "Evaluate an arithmetic expression."),
]


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    return ToolIndex.build(TOOLS, backend="bm25")


@pytest.fixture()
def manager(index: ToolIndex) -> SessionManager:
    return SessionManager(index)


class StaticBackend:
    """A third-party backend (the Protocol needs no subclassing) with a chosen name and canned hits."""

    def __init__(self, name: str, *, fail: str | None = None, query_syntax: str | None = None) -> None:
        self.name = name
        self.fail = fail
        self.tools: list[str] = []
        if query_syntax is not None:
            self.query_syntax = query_syntax

    def add(self, tools: Sequence[Tool]) -> None:
        self.tools.extend(t.name for t in tools)

    def remove(self, names: Collection[str]) -> None:
        self.tools = [n for n in self.tools if n not in set(names)]

    def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
        if self.fail:
            raise InvalidQueryError(self.fail)
        names = [n for n in self.tools if allowed is None or n in allowed]
        return Ranking([Hit(n, 1.0 / (i + 1)) for i, n in enumerate(names[:k])])

    def save(self, folder: Path) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {}


def _index_with(backend: StaticBackend) -> ToolIndex:
    backend.add(TOOLS)
    return ToolIndex(Catalog(TOOLS), backend)


# --- definition ----------------------------------------------------------------------------------


def test_definition_parameters(manager: SessionManager) -> None:
    meta = ToolSearchMetaTool()
    tool = meta.definition(manager.create("s"))
    schema = tool.input_schema
    assert tool.name == "tool_search"
    assert schema["required"] == ["query"]
    assert schema["properties"]["max_results"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 10,
        "default": 5,
        "description": "How many tools to return (1-10, default 5).",
    }
    assert schema["properties"]["namespace"]["enum"] == ["weather", "email"]
    assert meta.definition(manager.create("t")) is tool  # cached per backend and namespaces


def test_namespace_enum_follows_the_allowed_subset(manager: SessionManager) -> None:
    session = manager.create("s", allowed=["email_send", "calculator"])
    assert ToolSearchMetaTool().definition(session).input_schema["properties"]["namespace"]["enum"] == ["email"]


def test_no_namespace_parameter_without_namespaces(manager: SessionManager) -> None:
    session = manager.create("s", allowed=["calculator"])
    assert "namespace" not in ToolSearchMetaTool().definition(session).input_schema["properties"]


def test_too_many_namespaces_become_a_free_string(manager: SessionManager) -> None:
    prop = ToolSearchMetaTool(namespace_enum_limit=1).definition(manager.create("s")).input_schema["properties"]
    assert "enum" not in prop["namespace"] and "system prompt" in prop["namespace"]["description"]


def test_custom_name_and_result_limits(manager: SessionManager) -> None:
    meta = ToolSearchMetaTool("find_tools", default_results=3, max_results=4)
    tool = meta.definition(manager.create("s"))
    assert tool.name == "find_tools"
    assert tool.input_schema["properties"]["max_results"]["maximum"] == 4
    with pytest.raises(ValueError):
        ToolSearchMetaTool(default_results=11)


def test_query_description_tells_the_backend_syntax(manager: SessionManager) -> None:
    bm25 = ToolSearchMetaTool().definition(manager.create("s")).input_schema["properties"]["query"]["description"]
    assert "Lucene" in bm25 and "namespace:" in bm25
    for name, marker in (("regex", "regular expression"), ("vector", "natural-language"), ("hybrid", "semantic")):
        session = SessionManager(_index_with(StaticBackend(name))).create("s")
        text = ToolSearchMetaTool().definition(session).input_schema["properties"]["query"]["description"]
        assert marker in text and text == query_help(name)[0] == get_backend_spec(name).query_syntax
    custom = SessionManager(_index_with(StaticBackend("mine", query_syntax="SQL LIKE patterns"))).create("s")
    assert ToolSearchMetaTool().definition(custom).input_schema["properties"]["query"]["description"] == (
        "SQL LIKE patterns"
    )


# --- bad input becomes instructive text ------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "`query` is required"),
        ({"query": "   "}, "`query` is empty"),
        ({"query": ["a"]}, "`query`"),
        ({"query": "email", "max_results": 0}, "between 1 and 10 (got 0)"),
        ({"query": "email", "max_results": 11}, "between 1 and 10 (got 11)"),
        ({"query": "email", "max_results": "many"}, "`max_results`"),
        ({"query": "email", "namespace": "crm"}, "unknown namespace 'crm'. Use one of: weather, email"),
        ("{not json", "not valid JSON"),
        ('["a list"]', "must be a JSON object"),
    ],
)
def test_bad_arguments_return_instructive_text(manager: SessionManager, arguments: Any, expected: str) -> None:
    session = manager.create("s")
    outcome = ToolSearchMetaTool().run(session, arguments)
    assert not outcome.ok and outcome.result is None
    assert expected in outcome.text
    assert '{"query": "<what you need>", "max_results": 5}' in outcome.text or "namespace" in expected
    assert session.discovered == ()


def test_a_bad_query_says_what_was_wrong_and_how_to_search() -> None:
    backend = StaticBackend("regex", fail="unbalanced parenthesis at position 3")
    session = SessionManager(_index_with(backend)).create("s")
    outcome = ToolSearchMetaTool().run(session, {"query": "get("})
    assert not outcome.ok
    assert "unbalanced parenthesis" in outcome.text and "escape special characters" in outcome.text


def test_over_long_query_is_refused_with_advice(manager: SessionManager) -> None:
    outcome = ToolSearchMetaTool().run(manager.create("s"), {"query": "weather " * 300})
    assert not outcome.ok and "limit is 1000" in outcome.text


def test_bm25_syntax_errors_fall_back_with_a_note(manager: SessionManager) -> None:
    outcome = ToolSearchMetaTool().run(manager.create("s"), {"query": 'weather AND ("forecast'})
    assert outcome.ok and outcome.result is not None
    assert "weather_forecast" in outcome.result.names
    assert "Note:" in outcome.text


def test_no_hits_is_never_a_silent_empty_list(manager: SessionManager) -> None:
    outcome = ToolSearchMetaTool().run(manager.create("s"), {"query": "zzzqqq"})
    assert outcome.ok and outcome.result is not None and not outcome.result.hits
    assert "No tools matched 'zzzqqq'" in outcome.text and "other words" in outcome.text


# --- results -------------------------------------------------------------------------------------


def test_results_are_compact_and_hits_become_discovered(manager: SessionManager) -> None:
    session = manager.create("s")
    outcome = ToolSearchMetaTool().run(session, '{"query": "weather", "max_results": 2}')  # unknown keys: test_intake_*
    assert outcome.ok and outcome.max_results == 2
    lines = outcome.text.splitlines()
    assert lines[0].startswith("Found 2 tool(s) for 'weather'")
    assert len(lines) == 3
    assert lines[1].startswith("- weather_") and "(score " in lines[1]
    assert "Uses live station data" not in outcome.text  # one line per tool: the first sentence
    assert set(session.discovered) == {"weather_current", "weather_forecast"}
    assert [t.name for t in outcome.tools] == outcome.result.names  # type: ignore[union-attr]


def test_a_repeated_search_pages_on_past_loaded_tools(manager: SessionManager) -> None:
    session = manager.create("s", pinned=["email_send"])
    first = ToolSearchMetaTool().run(session, {"query": "weather email", "max_results": 1})
    assert first.result is not None and len(first.result.names) == 1
    top = first.result.names[0]
    assert top != "email_send"  # pinned: already loaded, so never repeated
    again = ToolSearchMetaTool().run(session, {"query": "weather email", "max_results": 1})
    assert again.result is not None and again.result.names != [top]
    note = again.text.splitlines()[-1]
    assert top in again.already_loaded and note.startswith("Already loaded, not repeated: ") and top in note
    assert again.result.names[0] in session.discovered
    # a search whose every match is loaded says so instead of "no tools matched"
    for _ in range(5):
        ToolSearchMetaTool().run(session, {"query": "weather email", "max_results": 1})
    done = ToolSearchMetaTool().run(session, {"query": "weather email"})
    assert done.result is not None and done.result.names == []
    assert done.text.startswith("No new tools for 'weather email': its best matches are already loaded")
    assert set(done.already_loaded) == {"weather_current", "weather_forecast", "email_send", "email_search"}


def test_skip_loaded_can_be_turned_off(manager: SessionManager) -> None:
    session = manager.create("s")
    tool = ToolSearchMetaTool(skip_loaded=False)
    first = tool.run(session, {"query": "weather", "max_results": 1})
    again = tool.run(session, {"query": "weather", "max_results": 1})
    assert first.result is not None and again.result is not None
    assert again.result.names == first.result.names and again.already_loaded == ()


def test_namespace_filter(manager: SessionManager) -> None:
    outcome = ToolSearchMetaTool().run(manager.create("s"), {"query": "search send", "namespace": "email"})
    assert outcome.result is not None and outcome.namespace == "email"
    assert set(outcome.result.names) <= {"email_send", "email_search"}
    assert "in namespace 'email'" in outcome.text


def test_eviction_is_reported(index: ToolIndex) -> None:
    session = SessionManager(index, max_discovered=1).create("s")
    session.discover(["calculator"])
    outcome = ToolSearchMetaTool().run(session, {"query": "email send", "max_results": 1})
    assert "unloaded: calculator" in outcome.text


def test_one_line_summary() -> None:
    assert one_line_summary("Send mail. Also does more.") == "Send mail."
    assert one_line_summary("") == "(no description)"
    assert one_line_summary("x" * 500).endswith("…") and len(one_line_summary("x" * 500)) == 160


# --- system prompt suffix ------------------------------------------------------------------------


def test_system_prompt_suffix(manager: SessionManager) -> None:
    session = manager.create("s")
    text = system_prompt_suffix(session)
    assert "`tool_search`" in text and "Tool namespaces: weather, email." in text
    assert "namespaces" not in system_prompt_suffix(session, list_namespaces=False)
    custom = system_prompt_suffix(
        session, metatool=ToolSearchMetaTool("find"), template="Use {tool}.{namespaces}", max_namespaces=1
    )
    assert custom == "Use find. Tool namespaces: weather and 1 more."


def test_results_can_name_tools_by_the_alias_the_model_sees(manager: SessionManager) -> None:
    session = manager.create("s")
    outcome = ToolSearchMetaTool().run(session, {"query": "weather", "max_results": 1}, alias=str.upper)
    assert "- WEATHER_" in outcome.text
    assert outcome.result is not None and outcome.result.names[0].startswith("weather_")


# --- what a search leaves out ----------------------------------------------------------------------


def test_hits_below_the_relative_floor_are_left_out_with_a_note() -> None:
    sessions = SessionManager(_index_with(StaticBackend("static")))  # scores 1, 1/2, 1/3, 1/4, 1/5 in catalog order
    meta = ToolSearchMetaTool()
    session = sessions.create("floor")
    outcome = meta.run(session, {"query": "anything", "max_results": 5}, min_relative_score=0.3)
    assert [t.name for t in outcome.tools] == ["weather_current", "weather_forecast", "email_send"]
    assert set(session.discovered) == {"weather_current", "weather_forecast", "email_send"}
    assert "2 weaker match(es) left out (scores below 30% of the best match's)" in outcome.text
    every = meta.run(sessions.create("no-floor"), {"query": "anything", "max_results": 5})
    assert len(every.tools) == 5 and "weaker" not in every.text


def test_withheld_tools_are_left_out_named_and_never_discovered() -> None:
    sessions = SessionManager(_index_with(StaticBackend("static")))
    session = sessions.create("withheld")
    why = {"weather_forecast": "its own parameter 'reason' collides", "calculator": "never ranked high enough"}
    outcome = ToolSearchMetaTool().run(session, {"query": "anything", "max_results": 2}, withheld=why)
    assert [t.name for t in outcome.tools] == ["weather_current", "email_send"]  # the slot is filled by the next
    assert "weather_forecast" not in session.discovered
    assert "weather_forecast left out: its own parameter 'reason' collides" in outcome.text
    assert "calculator" not in outcome.text  # ranked below what would have been shown: nothing to say
