"""ToolIndex (toolsearch.index): checked queries and k, filters, a third-party backend, updates and the key."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

import pytest
from fakes.core import ListBackend, weather

from toolsearch import (
    ArgumentTypeError,
    Catalog,
    DuplicateToolError,
    IndexStore,
    InvalidIndexNameError,
    InvalidQueryError,
    Ranking,
    Tool,
    ToolIndex,
)
from toolsearch.index import MAX_K, MAX_QUERY_CHARS, validate_k, validate_query


def test_validate_query_and_k() -> None:
    assert validate_query("  send mail \n") == "send mail"
    assert validate_query("x" * MAX_QUERY_CHARS) == "x" * MAX_QUERY_CHARS
    for bad, message in [
        ("", "empty"),
        ("  ", "empty"),
        ("x" * (MAX_QUERY_CHARS + 1), "limit is"),
        (None, "must be a string, got NoneType"),
        (b"x", "must be a string, got bytes"),
    ]:
        with pytest.raises(InvalidQueryError, match=message):
            validate_query(bad)
    assert validate_k(1) == 1 and validate_k(MAX_K) == MAX_K
    for bad_k in (0, -3, MAX_K + 1, 1.0, "3", True, None):
        with pytest.raises(InvalidQueryError, match="k \\(max results\\)"):
            validate_k(bad_k)

def test_index_with_a_third_party_backend() -> None:
    tools = [weather(), Tool("get_alerts", namespace="weather"), Tool("send_mail", namespace="mail")]
    index = ToolIndex(Catalog(tools), ListBackend())
    index.backend.add(tools)
    assert index.search("get", 5).names == ["get_weather", "get_alerts"]
    assert index.search("get", 1).names == ["get_weather"]
    assert index.search("_", 5, namespaces="mail").names == ["send_mail"]  # a single string is one namespace
    assert index.search("_", 5, namespaces=["weather"], allowed=["get_alerts", "send_mail"]).names == ["get_alerts"]
    result = index.search("_", 5, namespaces=["mail"], allowed=["get_alerts"])
    assert result.names == [] and result.notes == ("no tools are visible under the given filter",)
    with pytest.raises(InvalidQueryError, match="known namespaces: mail, weather"):
        index.search("x", 5, namespaces=["nope"])
    bare = ToolIndex(Catalog([Tool("a")]), ListBackend())
    with pytest.raises(InvalidQueryError, match="this catalog has no namespaces"):
        bare.search("a", 5, namespaces=["x"])

def test_index_updates_and_key() -> None:
    index = ToolIndex.build([weather(), Tool("now")], backend="regex")
    key = index.key
    index.upsert([Tool("later")])
    assert len(index) == 3 and index.key != key
    index.remove(["later", "not-there"])
    assert index.key == key and len(index) == 2
    index.sync([weather(), Tool("now", "changed")])
    assert index.catalog["now"].description == "changed"
    assert "regex" in repr(index) and index.backend_name == "regex"
    with pytest.raises(DuplicateToolError):
        index.upsert([Tool("x"), Tool("x")])
    assert "x" not in index.catalog

def test_cheap_checks_come_before_the_backend() -> None:
    # A backend that fails if asked anything: argument checks must answer without it (for the
    # vector and hybrid backends, without loading the model).
    from toolsearch import SessionManager, ToolSearchMetaTool

    class Untouchable(ListBackend):
        def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
            raise AssertionError("the backend was asked before the arguments were checked")

    backend = Untouchable()
    backend.add([weather()])
    index = ToolIndex(Catalog([weather()]), backend)
    for query, k in [("x" * (MAX_QUERY_CHARS + 1), 5), ("  ", 5), ("ok", 0), ("ok", MAX_K + 1), ("ok", "5")]:
        with pytest.raises(InvalidQueryError):
            index.search(query, k)  # type: ignore[arg-type]
    session = SessionManager(index).create("s1")
    meta = ToolSearchMetaTool()
    for arguments in [{"query": "x" * (MAX_QUERY_CHARS + 1)}, {"query": ""}, {"query": "ok", "max_results": 0},
                      {"query": "ok", "max_results": "many"}, {"max_results": 3}, "not json", [1, 2]]:
        outcome = meta.run(session, arguments)  # type: ignore[arg-type]
        assert not outcome.ok and "tool_search" in outcome.text
    with pytest.raises(InvalidIndexNameError):
        IndexStore(Path("unused")).build([Tool("bad name is fine")], "list-never-created", name="../x")


# --- a lone name or tool where a collection is expected ------------------------------------------------------------


def _three() -> ToolIndex:
    return ToolIndex.build(
        [Tool("send_email", "Send an email"), Tool("get_weather", "Weather for a city"), Tool("x", "Tool x")], "bm25"
    )


@pytest.mark.parametrize("names", ["send_email", "x_tool", b"send_email", None, 5])
def test_remove_refuses_a_lone_name_or_a_non_collection(names: object) -> None:
    index = _three()
    with pytest.raises(ArgumentTypeError, match=r"ToolIndex\.remove: names must be a list of tool names.*pass a list"):
        index.remove(names)  # type: ignore[arg-type]
    assert index.catalog.names == ["send_email", "get_weather", "x"]


def test_remove_refuses_an_item_that_is_not_a_name() -> None:
    index = _three()
    with pytest.raises(ArgumentTypeError, match=r"item 1 must be a tool name \(str\), got int"):
        index.remove(["get_weather", 5])  # type: ignore[list-item]
    with pytest.raises(ArgumentTypeError, match=r"got Tool \(pass its name, 'x'\)"):
        index.remove([index.catalog["x"]])  # type: ignore[list-item]
    assert len(index) == 3


@pytest.mark.parametrize("method", ["upsert", "sync"])
def test_upsert_and_sync_refuse_a_lone_tool(method: str) -> None:
    index = _three()
    expected = rf"ToolIndex\.{method}: tools must be a list of Tool, got Tool.*\[tool\]"
    with pytest.raises(ArgumentTypeError, match=expected):
        getattr(index, method)(Tool("new_tool", "A new tool"))
    with pytest.raises(ArgumentTypeError, match=rf"ToolIndex\.{method}: tools must be a list of Tool, got str"):
        getattr(index, method)("new_tool")
    assert len(index) == 3


def test_allowed_refuses_a_lone_name() -> None:
    index = _three()
    with pytest.raises(ArgumentTypeError, match=r"allowed must be a list of tool names, got str \('send_email'\)"):
        index.search("send an email", allowed="send_email")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match=r"allowed: item 0 must be a tool name"):
        index.resolve_filter(allowed=[index.catalog["x"]])  # type: ignore[list-item]
    assert index.search("send an email", allowed=["send_email"]).names == ["send_email"]
    assert index.search("send an email", allowed=frozenset({"send_email"})).names == ["send_email"]


# --- filters that let no tool through, namespaces read once, and a backend that ignores `allowed` (audit 55) -------

NAMESPACED = [
    Tool("email_send_message", "Send an email message", namespace="email"),
    Tool("email_create_draft", "Create an email draft", namespace="email"),
    Tool("get_weather", "Weather forecast for a city", namespace="weather"),
]


@pytest.mark.parametrize("backend", ["bm25", "regex"])
def test_an_allow_list_naming_no_tool_says_the_filter_lets_none_through(backend: str) -> None:
    index = ToolIndex.build(NAMESPACED, backend)
    result = index.search("send an email", allowed=["emial_send_message"])
    # Before: "no tool matched these words; try other words" (bm25), "try a broader pattern" (regex), nothing (vector).
    assert result.names == [] and result.notes == (
        "the filter lets no tool through: no tool of this index is named 'emial_send_message'; check the allowed "
        "names against the catalog",
    )
    many = index.search("send an email", allowed=[f"typo_{i}" for i in range(5)]).notes[0]
    assert "named 'typo_0', 'typo_1', 'typo_2' and 2 more" in many
    # one name the catalog has is enough for an ordinary search
    assert index.search("send an email", allowed=["emial_send_message", "email_send_message"]).names == [
        "email_send_message"
    ]


def test_namespaces_are_read_once_and_must_be_strings() -> None:
    index = ToolIndex.build(NAMESPACED, "bm25")
    expected = index.search("send an email", namespaces=["email"]).names
    # Before: a generator was used up by the unknown-namespace check, so the search found nothing.
    generator = (ns for ns in ["email"])
    assert index.search("send an email", namespaces=generator).names == expected != []  # type: ignore[arg-type]
    assert index.search("send an email", namespaces="email").names == expected  # one namespace
    with pytest.raises(ArgumentTypeError, match=r"namespaces must be a list of namespaces, got bytes \(b'email'\)"):
        index.search("send an email", namespaces=b"email")  # type: ignore[arg-type]  # before: "unknown namespace 97"
    with pytest.raises(ArgumentTypeError, match=r"namespaces: item 1 must be a namespace \(str\), got int"):
        index.search("send an email", namespaces=["email", 5])  # type: ignore[list-item]


class EveryMatch:
    """A third-party backend that forgets to honour `allowed`: it returns every tool that shares a word."""

    name = "every-match"

    def __init__(self) -> None:
        self.texts: dict[str, set[str]] = {}

    def add(self, tools: Sequence[Tool]) -> None:
        for tool in tools:
            self.texts[tool.name] = set(f"{tool.name} {tool.description}".lower().replace("_", " ").split())

    def remove(self, names: Collection[str]) -> None:
        pass

    def search(self, query: str, k: int, allowed: frozenset[str] | None = None) -> Ranking:
        from toolsearch import Hit

        words = set(query.lower().split())
        return Ranking([Hit(n, float(len(words & t))) for n, t in self.texts.items() if words & t][:k])

    def save(self, folder: Path) -> None:
        pass

    def describe(self) -> dict[str, object]:
        return {}


def test_a_backend_that_ignores_allowed_cannot_show_a_tool_outside_it() -> None:
    from toolsearch import SessionManager, ToolSearchMetaTool

    tools = [Tool("get_weather", "Weather forecast for a city"), Tool("delete_account", "Delete a user account")]
    index = ToolIndex(Catalog(tools), EveryMatch())
    index.backend.add(tools)  # type: ignore[attr-defined]
    # Before: ['delete_account'], a tool the caller may not see, and tool_search failed with ToolNotAllowedError.
    assert index.search("delete account", 5, allowed={"get_weather"}).names == []
    assert index.search("delete account weather", 5, allowed={"get_weather"}).names == ["get_weather"]
    assert index.search("delete account", 5, namespaces=None).names == ["delete_account"]  # no filter: all
    session = SessionManager(index).create("guest", allowed=["get_weather"])
    text = ToolSearchMetaTool().run(session, {"query": "delete account"}).text
    assert "delete_account" not in text and session.discovered == ()


def test_a_quoted_tool_name_on_regex_is_found_without_a_no_match_note() -> None:
    index = ToolIndex.build(NAMESPACED, "regex")
    for query in ('"email_send_message"', "`email_send_message`"):
        result = index.search(query, 3)
        # Before: [('email_send_message', 0.0)] with "no tool name, description or parameter matched".
        assert result.names == ["email_send_message"] and result.notes == (), (query, result.notes)
        assert result.hits[0].score > 0


def test_an_empty_namespace_string_means_no_filter() -> None:
    # Before 5daec23 `namespaces=""` meant no filter (as `tool_search` reads an empty namespace); 5daec23 made it
    # InvalidQueryError "unknown namespace ''", which an empty form field passed straight through now hit.
    index = ToolIndex.build(NAMESPACED, "bm25")
    everywhere = index.search("send an email", 2).names
    assert index.search("send an email", 2, namespaces="").names == everywhere != []
    assert index.search("weather forecast", 1, namespaces="").names == ["get_weather"]  # another namespace's tool
    assert index.resolve_filter(namespaces="") is None
    with pytest.raises(InvalidQueryError, match="unknown namespace ' '"):  # only "" is no filter
        index.search("send an email", namespaces=" ")
