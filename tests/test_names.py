"""A request that names a tool outright gets that tool first, on every backend (toolsearch.names, ToolIndex)."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolsearch import Tool, ToolIndex
from toolsearch.demo import demo_tools
from toolsearch.names import NameTable

TOOLS = [
    Tool("getDemographics", "Demographic breakdown of a region's population by age and income."),
    Tool(
        "getAudienceDemographics",
        "Audience demographics of a campaign: age, gender, income, interests and demographics by region.",
    ),
    Tool("get_gene_therapy_info", "Information about a gene therapy."),
    Tool("gene_expression_profile", "Gene expression profile of a tissue sample, gene therapy research included."),
    Tool("math.factorial", "Factorial of a non-negative integer."),
    Tool("calculate_factorial_sum", "Sum of the factorials of a list of integers, factorial by factorial."),
    Tool("get_weather", "Current weather for a city."),
    Tool("get_weather_forecast", "Weather forecast for a city over the next days: weather, rain, wind."),
    Tool("calculator", "Evaluate an arithmetic expression."),
    Tool("email_send_message", "Send an email message to recipients with a subject and body."),
    Tool("analytics_track_event", "Track an analytics event such as a page view (e.g. ana, example.com)."),
]


def test_the_table_finds_identifiers_as_written_and_requests_that_are_only_a_name() -> None:
    table = NameTable(t.name for t in TOOLS)
    assert table.named("getDemographics") == ["getDemographics"]
    assert table.named("get demographics") == ["getDemographics"]
    assert table.named("I need get gene therapy info now") == ["get_gene_therapy_info"]
    assert table.named("use (math.factorial), please") == ["math.factorial"]
    assert table.named("Can you run calculator for me?") == ["calculator"]
    assert table.named("getAudienceDemographics") == ["getAudienceDemographics"]
    # the longer name wins where two overlap; identifiers in different places are all named
    assert table.named("Can you run get weather forecast for me?") == ["get_weather_forecast"]
    assert table.named("get_weather, then math.factorial") == ["get_weather", "math.factorial"]
    # an ordinary word or phrase used in passing names nothing: the backend ranks such requests
    assert table.named("a calculator app that adds numbers") == []
    assert table.named("get the weather") == []
    assert table.named("get weather forecast for Paris") == []
    assert table.named("calculators") == []
    # a name holding digits, and a request whose values are set aside
    assert NameTable(["getVO2Max", "ad4mat"]).named("estimate vo 2 max") == []
    assert NameTable(["getVO2Max", "ad4mat"]).named("I need ad 4 mat now") == ["ad4mat"]
    assert table.named("email_send_message to ana@example.com") == ["email_send_message"]


def test_a_namespaced_tool_is_named_by_its_own_name_too(tmp_path: Path) -> None:
    tools = [
        Tool("github__create_issue", "Open an issue in a repository.", namespace="github"),
        Tool("gitlab__create_issue", "Open an issue in a project.", namespace="gitlab"),
        Tool("github__list_pull_requests", "List a repository's pull requests.", namespace="github"),
        Tool("search_issues", "Search issues and pull requests by words in their title."),
    ]
    index = ToolIndex.build(tools, "bm25")
    assert index.search("use list_pull_requests for octo/repo", 2).names[0] == "github__list_pull_requests"
    assert sorted(index.search("create_issue", 2).names) == ["github__create_issue", "gitlab__create_issue"]
    # a stored index reads the namespaces from its name table, without parsing a tool
    loaded = ToolIndex.load(index.save(tmp_path / "ix"))
    assert loaded.search("list pull requests", 1).names == ["github__list_pull_requests"]


def test_a_pattern_names_a_tool_only_when_it_is_the_name() -> None:
    table = NameTable(t.name for t in TOOLS)
    assert table.named("get_weather", whole_only=True) == ["get_weather"]
    assert table.named("get_weather|calculator", whole_only=True) == []


NAMED = ["getDemographics", "get demographics", "I need getDemographics now", "Can you run get demographics for me?"]


@pytest.mark.parametrize(("backend", "query"), [*(("bm25", q) for q in NAMED), ("regex", "getDemographics")])
def test_the_named_tool_comes_first(backend: str, query: str) -> None:
    # regex queries are patterns: only the bare name names a tool there
    assert ToolIndex.build(TOOLS, backend).search(query, 3).names[0] == "getDemographics"


def test_named_tools_respect_the_allowed_subset() -> None:
    index = ToolIndex.build(TOOLS, "bm25")
    assert "getDemographics" not in index.search("getDemographics", 3, allowed=["getAudienceDemographics"]).names


def test_a_value_in_the_request_never_outweighs_its_words() -> None:
    index = ToolIndex.build(TOOLS, "bm25")
    assert index.search("Email ana@example.com that the message is ready", 3).names[0] == "email_send_message"
    # the address alone still finds what its words match: a value is weighed lightly, not dropped
    assert index.search("ana@example.com", 3).names[0] == "analytics_track_event"


def test_a_message_body_is_a_value_and_an_ordinary_clause_is_not() -> None:
    from toolsearch.entities import split_entities

    assert split_entities("Email ana@example.com that the report is ready") == (
        "Email   that ", "ana@example.com the report is ready"
    )
    assert split_entities("tell the team saying we ship today. Then book a room")[1] == "we ship today"
    assert split_entities("Find the file that contains the budget") == ("Find the file that contains the budget", "")
    assert split_entities("convert mp3 to wav on ec2 with base64") == ("convert mp3 to wav on ec2 with base64", "")
    assert split_entities("refund order #12345 of $30.50 from 2024-01-05")[1] == "#12345 $30.50 2024-01-05"


def test_a_lucene_query_is_not_read_as_a_sentence() -> None:
    index = ToolIndex.build(TOOLS, "bm25")
    assert "get_weather" not in index.search("weather -get_weather", 5).names


def test_a_request_to_send_a_message_is_read_as_one() -> None:
    from toolsearch.entities import send_request

    assert send_request("Email ana@example.com that the report is ready") == "Email ana@example.com that"
    body = "please text Bob saying I'm late. Then book a room"
    assert send_request(body) == "please text Bob saying. Then book a room"
    # a question, a writing task and a request that names the action are not read so
    assert send_request("Can you tell me the weather so that I know what to wear") is None
    assert send_request("write a blog post that ranks well") is None
    assert send_request("Send an email to Bob that the build is green") is None


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["bm25", "vector", "hybrid"])
def test_the_readme_request_finds_a_sending_tool_first(backend: str) -> None:
    # the README's request over the bundled catalog: its body ("the report is ready") reads as a draft or a
    # report, and a piece of its address as analytics; the request is to send an e-mail
    index = ToolIndex.build(demo_tools(), backend)
    first = index.search("Email ana@example.com that the report is ready", 3).names[0]
    assert first.startswith("email_send_"), first
    if backend != "bm25":  # bm25 reads the words alone: sending a draft matches them as well
        assert first == "email_send_message"


# --- a name written as a call, possessive, URL or inside text without spaces ---------------------------------------

VERBATIM = [
    Tool("get_weather", "Current conditions."),
    Tool("weather_forecast_city", "Get the weather forecast for a city such as Paris, with temperature and rain."),
    Tool("send_email", "Send an email"),
]


@pytest.mark.parametrize(
    "query",
    [
        "call get_weather(city='Paris') for the weather in Paris",
        "get_weather's output for Paris weather forecast",
        "get_weather?city=Paris weather forecast",
        "请用get_weather查询巴黎天气预报",
        "see [get_weather](docs) for the weather forecast",
    ],
)
def test_a_name_inside_a_chunk_is_named(query: str) -> None:
    assert NameTable([t.name for t in VERBATIM]).named(query) == ["get_weather"]
    for backend in ("bm25", "hybrid"):
        assert ToolIndex.build(VERBATIM, backend).search(query, k=1).names == ["get_weather"]


@pytest.mark.parametrize(
    "query",
    ["what's the weather(today) forecast?", "weather-forecast for paris", "my_get_weather(city) please"],
)
def test_a_run_of_one_word_or_a_longer_identifier_names_nothing(query: str) -> None:
    assert NameTable(["get_weather", "weather", "forecast", "weather-forecast-city"]).named(query) == []


# --- names that differ only by case or Unicode normalisation ---------------------------------------------------------

NFC_NAME, NFD_NAME = "caf\u00e9_menu", "cafe\u0301_menu"
CASED = [
    Tool("get_weather", "Current weather for a city"),
    Tool("Get_Weather", "Historical weather archive for a city"),
    Tool("send_email", "Send an SMS"),
    Tool("Send_Email", "Send an email"),
    Tool(NFC_NAME, "menu"),
    Tool(NFD_NAME, "menu"),
]


def test_the_exact_spelling_is_named_before_a_case_or_normalisation_variant() -> None:
    table = NameTable([t.name for t in CASED])
    assert table.named("Get_Weather") == ["Get_Weather"]
    assert table.named("use get_weather now") == ["get_weather"]
    assert table.named("call Send_Email(to='x')") == ["Send_Email"]
    assert table.named(NFD_NAME) == [NFD_NAME]
    assert set(table.named("GET_WEATHER")) == {"get_weather", "Get_Weather"}  # neither spelled exactly: both


@pytest.mark.parametrize("backend", ["bm25", "regex", pytest.param("hybrid", marks=pytest.mark.slow)])
def test_a_query_that_is_exactly_a_name_ranks_that_spelling_first(backend: str) -> None:
    index = ToolIndex.build([t for t in CASED if t.name != NFD_NAME], backend)  # a catalog refuses both forms
    for query in ("Get_Weather", "get_weather", "send_email", "Send_Email", NFC_NAME):
        assert index.search(query, k=2).names[0] == query
