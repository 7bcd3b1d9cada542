"""The regex backend: field tiers, the length cap, the time budget and the plain-words fallback."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolsearch import BackendError, InvalidQueryError, QueryTimeoutError, Tool, ToolIndex
from toolsearch.backends import regex as regex_backend


def _tool(name: str, description: str = "", namespace: str | None = None, **params: dict[str, object]) -> Tool:
    return Tool(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": params},
        namespace=namespace,
    )


TOOLS = [
    _tool("invoice_pdf", "Render a document.", "billing"),  # "invoice" in the name
    _tool("render_doc", "Render an Invoice as a document.", "docs"),  # in the description
    _tool("print_page", "Print a page.", "docs", source={"type": "string", "description": "An invoice ID"}),  # param
    _tool("send_mail", "Send mail. Mail goes out at once; mail is queued.", "mail"),
    _tool("mail_merge", "Merge a template.", "mail"),
    _tool(
        "set_mode",
        "Switch the device mode.",
        "devices",
        mode={"type": "string", "enum": ["turbo", "eco"]},
    ),
    _tool("météo_locale", "Prévisions météo pour une ville.", "weather"),
]


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    return ToolIndex.build(TOOLS, backend="regex")


def names(index: ToolIndex, query: str, k: int = 10) -> list[str]:
    return index.search(query, k).names


def test_name_beats_description_beats_parameters(index: ToolIndex) -> None:
    assert names(index, "invoice") == ["invoice_pdf", "render_doc", "print_page"]


def test_more_distinct_matches_rank_higher_within_a_tier(index: ToolIndex) -> None:
    # both have "mail" in the name; send_mail's description also matches
    assert names(index, "mail")[:2] == ["send_mail", "mail_merge"]
    # distinct strings count, so "mail|queued" puts the tool matching both first among equals
    result = index.search("mail|queue", 10)
    assert result.names[0] == "send_mail" and result.hits[0].score > result.hits[1].score


def test_case_insensitive_and_unicode(index: ToolIndex) -> None:
    assert names(index, "INVOICE")[0] == "invoice_pdf"
    assert names(index, "MÉTÉO")[0] == "météo_locale"
    assert names(index, r"pr[ée]visions")[0] == "météo_locale"


def test_anchors_apply_per_field_and_line(index: ToolIndex) -> None:
    assert names(index, "^mail_") == ["mail_merge"]
    assert names(index, "_mail$") == ["send_mail"]
    assert names(index, r"^render\b") == ["render_doc", "invoice_pdf"]  # name, then description
    # names are also searched as words: "send mail" is the split form of send_mail
    assert names(index, "^send mail$") == ["send_mail"]


def test_enum_values_and_namespaces(index: ToolIndex) -> None:
    assert names(index, "turbo") == ["set_mode"]
    assert names(index, "^devices$") == ["set_mode"]


def test_allowed_subset_gives_the_same_order(index: ToolIndex) -> None:
    everything = names(index, "invoice|mail")
    subset = {"print_page", "mail_merge", "send_mail"}
    assert names(index, "invoice|mail", 10) and index.search("invoice|mail", 10, allowed=subset).names == [
        n for n in everything if n in subset
    ]


# --- bad patterns --------------------------------------------------------------------------------


def test_length_cap(index: ToolIndex) -> None:
    with pytest.raises(InvalidQueryError, match="limit is 200"):
        index.search("a" * 201, 5)
    short = ToolIndex.build(TOOLS, backend="regex", max_pattern_chars=10)
    with pytest.raises(InvalidQueryError, match="limit is 10"):
        short.search("invoice|mail", 5)
    assert short.search("invoice", 5).names


@pytest.mark.parametrize("pattern", ["(abc", "[a-", "*invoice", "invoice(", r"a{2,1}"])
def test_invalid_pattern_explains_itself(index: ToolIndex, pattern: str) -> None:
    with pytest.raises(InvalidQueryError, match="invalid regular expression") as err:
        index.search(pattern, 5)
    assert "backslash" in str(err.value) and "plain words" in str(err.value)


@pytest.mark.parametrize("pattern", ["(invoice)?", "mail|", "x*", "(?:)"])
def test_pattern_matching_empty_text_is_refused(index: ToolIndex, pattern: str) -> None:
    with pytest.raises(InvalidQueryError, match="matches empty text"):
        index.search(pattern, 5)


def test_words_that_are_not_a_regex_fall_back_to_any_word(index: ToolIndex) -> None:
    result = index.search("render an invoice (pdf", 5)
    assert result.names[0] in {"invoice_pdf", "render_doc"}
    assert "not a valid regular expression" in result.notes[0] and "any of its words" in result.notes[0]


def test_plain_sentence_without_literal_match_falls_back(index: ToolIndex) -> None:
    result = index.search("please send the mail now", 5)
    assert result.names[0] == "send_mail"  # matches "send" and "mail", the most words
    assert "matched no tool" in result.notes[0]


def test_no_match_is_never_silent(index: ToolIndex) -> None:
    result = index.search("xylophone", 5)
    assert result.names == [] and "broader pattern" in result.notes[0]


def test_catastrophic_pattern_times_out() -> None:
    index = ToolIndex.build([*TOOLS, _tool("long", "a" * 40_000 + "!")], backend="regex", timeout_seconds=0.1)
    for pattern in ["(a+)+$", "(a|aa)+$", r"(\w+\s?)+$"]:
        # the raise is the proof the budget was enforced (the per-test timeout catches a hang)
        with pytest.raises(QueryTimeoutError, match="simpler pattern"):
            index.search(pattern, 5)
    assert issubclass(QueryTimeoutError, InvalidQueryError)  # callers that catch bad queries catch it too


def test_time_spent_off_cpu_does_not_count_against_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    # A busy machine: the searching thread waits 5 s of wall-clock time between any two steps. A
    # plain word alternation still costs milliseconds of its own CPU time, so it must answer, not time out
    # (the benchmark's 4,076-tool catalog lost a quarter of its tasks to such refusals under load).
    import time as real_time
    from types import SimpleNamespace

    wall = [real_time.monotonic()]

    def slow_wall_clock() -> float:
        wall[0] += 5.0
        return wall[0]

    busy = SimpleNamespace(monotonic=slow_wall_clock, thread_time=real_time.thread_time)
    monkeypatch.setattr(regex_backend, "time", busy)
    filler = [_tool(f"filler_{i}", f"Filler tool number {i} for padding the catalog.") for i in range(2_000)]
    catalog = [*TOOLS, *filler]
    index = ToolIndex.build(catalog, backend="regex", timeout_seconds=1.0)
    result = index.search(r"\b(?:invoice|mail|weather|forecast|template)\b", 5)
    assert {"invoice_pdf", "send_mail", "mail_merge"} <= set(result.names)


# --- options and persistence ---------------------------------------------------------------------


def test_options_are_validated() -> None:
    with pytest.raises(BackendError, match="unknown regex option 'timeout'"):
        regex_backend.create(timeout=1)
    with pytest.raises(BackendError, match="max_pattern_chars"):
        regex_backend.create(max_pattern_chars=0)
    with pytest.raises(BackendError, match="timeout_seconds"):
        regex_backend.create(timeout_seconds=-1)


def test_options_survive_save_and_load(tmp_path: Path) -> None:
    index = ToolIndex.build(TOOLS, backend="regex", max_pattern_chars=50, timeout_seconds=0.5)
    loaded = ToolIndex.load(index.save(tmp_path / "idx"))
    assert loaded.backend.describe() == {"max_pattern_chars": 50, "timeout_seconds": 0.5}
    with pytest.raises(InvalidQueryError, match="limit is 50"):
        loaded.search("x" * 51, 5)
    assert loaded.search("invoice", 5).names == index.search("invoice", 5).names


def test_replaced_tool_is_matched_on_its_new_text() -> None:
    backend = regex_backend.create()
    backend.add(TOOLS)
    backend.add([_tool("set_mode", "Switch the fan speed.")])
    assert [h.name for h in backend.search("turbo", 5).hits] == []
    assert [h.name for h in backend.search("fan speed", 5).hits] == ["set_mode"]
    backend.remove(["set_mode", "unknown"])
    assert [h.name for h in backend.search("fan", 5).hits] == []


@pytest.mark.parametrize("pattern", ["((((a{100}){100}){100}){100})", "a{5000}", "(x{40}){40}"])
def test_counted_repeats_that_would_blow_up_at_compile_time_are_refused(index: ToolIndex, pattern: str) -> None:
    with pytest.raises(InvalidQueryError, match="counted repeats"):
        index.search(pattern)


def test_small_counted_repeats_still_work(index: ToolIndex) -> None:
    assert isinstance(index.search(r"\d{4}-\d{2}|weather").hits, tuple)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [("^(?=.*weather)(?=.*city)", ["get_weather"]), ("(?=.*send)(?=.*email)", ["send_email"])],
)
def test_a_pattern_of_lookaheads_alone_matches_the_tools_it_describes(pattern: str, expected: list[str]) -> None:
    tools = [
        Tool("get_weather", "Current weather for a city"),
        Tool("send_email", "Send an email"),
        Tool("get_weather_alerts", "Severe weather alerts"),
    ]
    result = ToolIndex.build(tools, "regex").search(pattern, k=5)
    assert result.names == expected and not result.notes


def test_the_reverse_flag_is_refused() -> None:
    tools = [Tool("get_weather", "Current weather"), Tool("get_weather_alerts", "Severe weather alerts")]
    index = ToolIndex.build(tools, "regex")
    for pattern in ("(?r)weather", "(?r:weather)s"):
        with pytest.raises(InvalidQueryError, match=r"REVERSE flag \(\(\?r\)\).*remove \(\?r\)"):
            index.search(pattern, k=5)
