"""Queries and options a model or a caller may send that used to escape, mislead or cost without bound (audit 55)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from toolsearch import BackendError, IndexStore, InvalidQueryError, Tool, ToolIndex
from toolsearch.backends import bm25 as bm25_module
from toolsearch.backends._base import TIE_DEPTH
from toolsearch.embeddings import CallableEmbedder
from toolsearch.executor import ToolExecutor
from toolsearch.lucene import looks_like_lucene
from toolsearch.metatool import ToolSearchMetaTool
from toolsearch.providers import ScriptedModel, reply, search
from toolsearch.providers._base import ToolCall
from toolsearch.session import SessionManager

MAIL = [
    Tool("email_send_draft", "Send a saved email draft."),
    Tool("email_create_draft", "Create an email draft to send later."),
    Tool("email_send_message", "Send an email message to recipients."),
    Tool("email_get_message", "Read one email message."),
    Tool("calendar_create_event", "Create a calendar event."),
    Tool("calendar_list_events", "List the events of a calendar."),
    Tool("payments_refund_payment", "Refund a payment to the customer."),
    Tool("stats_top_5", "List the top 5 products."),
    Tool("get_weather", "Weather forecast for a city."),
]

# Words each keep one direction of the fake embedding: a text's vector is the sum of its words' directions, so two
# tools with one description embed alike (a tie), and a query that says "draft" is nearest the draft tools.
_DIRECTIONS = ["draft", "email", "message", "calendar", "refund", "weather", "frob", "widget"]


def keyword_vectors(texts: list[str]) -> np.ndarray:
    out = np.full((len(texts), len(_DIRECTIONS) + 1), 0.05, dtype=np.float32)
    for row, text in enumerate(texts):
        lowered = text.lower()
        for column, word in enumerate(_DIRECTIONS):
            out[row, column] += 3.0 * lowered.count(word)
    return out


def keyword_embedder() -> CallableEmbedder:
    return CallableEmbedder(keyword_vectors, "keywords-9", len(_DIRECTIONS) + 1)


# --- F1/F2: every regex failure is an InvalidQueryError that says what to do ------------------------------------


@pytest.fixture(scope="module")
def regex_index() -> ToolIndex:
    return ToolIndex.build(MAIL, "regex")


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("(?V1)email", r"VERSION0 and VERSION1 flags are mutually incompatible\. Remove inline flags"),
        ("(?iV1)email", r"VERSION0 and VERSION1 flags are mutually incompatible"),
        ("(?u)(?a)mail", r"ASCII, LOCALE and UNICODE flags are mutually incompatible\. Remove inline flags"),
        ("(?L)(?u)mail", r"ASCII, LOCALE and UNICODE flags are mutually incompatible"),
        ("(?R)", r"calls a group or itself with \(\?R\); recursion.*not supported"),
        ("(?0)mail", r"with \(\?0\)"),
        ("(mail)(?1)", r"with \(\?1\).*write the repeated part out"),
        ("(mail)(?-1)", r"with \(\?-1\)"),
        ("(?P<m>mail)(?&m)", r"with \(\?&m\)"),
        ("(?P<m>mail)(?P>m)", r"with \(\?P>m\)"),
    ],
)
def test_inline_flags_and_recursion_are_refused_saying_what_to_do(
    regex_index: ToolIndex, pattern: str, says: str
) -> None:
    # Before: ValueError ("VERSION0 and VERSION1 flags are mutually incompatible") or MemoryError after ~0.6 GB.
    with pytest.raises(InvalidQueryError, match=says) as err:
        regex_index.search(pattern, 3)
    assert repr(pattern) in str(err.value)


@pytest.mark.parametrize(
    "pattern",
    [
        "(?x)(a{ 10 }){ 200 }",  # spaced counts: the unspaced form is refused as counted repeats
        "(?x)a{1#hidden\n000}",  # a comment inside the braces: read as a{1000}
        "(?x:(a{ 10 }){ 200 })",  # scoped
        "(?ix)mail",
    ],
)
def test_verbose_mode_is_refused_before_compiling(regex_index: ToolIndex, pattern: str) -> None:
    # Before: `(?x)((a{ 100 }){ 100 }){ 300 }` compiled to 846 MB and `(?x)(a{ 1000000 }){ 9 }` ran out of memory.
    with pytest.raises(InvalidQueryError, match=r"verbose mode.*remove the x flag"):
        regex_index.search(pattern, 3)


def test_spaced_counted_repeats_count_too(regex_index: ToolIndex) -> None:
    with pytest.raises(InvalidQueryError, match="counted repeats"):
        regex_index.search("(a{ 40 }){ 40 }", 3)


@pytest.mark.parametrize(
    "pattern", ["(?a)mail", "(?u)mail", "(?V0)email", "(?i-x:mail)", r"\(?R\)|mail", "(?a:send)(?u:_email)"]
)
def test_harmless_flags_and_escaped_lookalikes_still_search(regex_index: ToolIndex, pattern: str) -> None:
    # Scoped charset flags, one per group, are harmless: the regex module runs them (refused before, as "charset
    # flags together").
    assert isinstance(regex_index.search(pattern, 3).hits, tuple)


def test_a_refused_pattern_reaches_the_model_as_a_result_not_an_exception(regex_index: ToolIndex) -> None:
    from toolsearch import run

    manager = SessionManager(regex_index)
    for pattern in ("(?V1)email", "(?R)", "(?x)(a{ 10 }){ 200 }"):
        session = manager.create(f"s-{pattern}")
        text = ToolSearchMetaTool().run(session, {"query": pattern}).text
        assert text.startswith(f"tool_search could not run the query {pattern!r}"), text
        call = ToolCall(id="c1", name="tool_search", arguments={"query": pattern})
        (result,) = ToolExecutor().execute(session, [call])
        assert result.status == "search_error"
    # Before: the loop ended with ValueError instead of giving the model the error and going on.
    outcome = run(ScriptedModel([reply(search("(?V1)email")), "done"]), "find an email tool",
                  session=manager.create("loop"))
    assert outcome.output == "done"


# --- F3: hybrid keeps Lucene constraints whatever notes bm25 adds ----------------------------------------------


@pytest.mark.parametrize("query", ["+email -draft^300", "email^200 -draft", "+email -draft^3"])
def test_hybrid_keeps_exclusions_when_bm25_adds_a_note(query: str) -> None:
    index = ToolIndex.build(MAIL, "hybrid", embedder=keyword_embedder(), cache=False)
    result = index.search(query, 6)
    # Before: a boost over 100 (lowered, with a note) made hybrid drop the constraints: the draft tools came first.
    assert result.names and not [n for n in result.names if "draft" in n], (query, result.names)
    assert set(result.names) <= {h.name for h in index.backend.lexical.search(query, 50).hits}  # type: ignore[attr-defined]


def test_a_query_bm25_fell_back_from_is_not_held_to_bm25s_hits() -> None:
    assert bm25_module.lucene_reading("name:(email") is None  # not understood: plain words
    assert bm25_module.lucene_reading("send an email") is None
    assert bm25_module.lucene_reading("+email -draft^300") == (frozenset({"required", "excluded"}), False)
    assert bm25_module.lucene_reading("email^2") == (frozenset(), False)  # Lucene without constraints
    index = ToolIndex.build(_with_frob(), "hybrid", embedder=keyword_embedder(), cache=False)
    # bm25 searched `name:(weather frob` as plain words (finding get_weather only): the dense half's tool stays.
    assert "factory_frobnicate" in index.search("name:(weather frob", 3).names


# --- F4: term^N boosts, and a field in any case, are query syntax ------------------------------------------------


@pytest.fixture(scope="module")
def bm25_index() -> ToolIndex:
    return ToolIndex.build(MAIL, "bm25")


def test_a_boost_alone_is_query_syntax_and_applies(bm25_index: ToolIndex) -> None:
    assert looks_like_lucene("calendar^10 email") and looks_like_lucene("refund^5") and looks_like_lucene('"a b"^2')
    assert not looks_like_lucene("solve x^2 = 4") and not looks_like_lucene("2^10")  # formulas stay prose
    plain = bm25_index.search("calendar email", 3)
    boosted = bm25_index.search("calendar email^10", 3)
    # Before: `calendar email^10` ranked exactly as `calendar email` (the boost ignored, "10" searched as a word).
    assert plain.names[0].startswith("calendar_") and boosted.names[0].startswith("email_")
    assert bm25_index.search("calendar^10 email", 3).names[0].startswith("calendar_")
    # `refund^5` boosts refund; it does not search for the word "5" (which would bring stats_top_5)
    assert bm25_index.search("refund^5", 5).names == ["payments_refund_payment"]


def test_a_capitalised_field_is_a_field_in_a_query_of_field_clauses(bm25_index: ToolIndex) -> None:
    assert looks_like_lucene("Name:email") and not looks_like_lucene("Name: John")
    assert looks_like_lucene("Name:email Description:send") and looks_like_lucene('Name:"send email"')
    assert bm25_index.search("Name:draft", 5).names == bm25_index.search("name:draft", 5).names
    assert set(bm25_index.search("Name:draft", 5).names) == {"email_send_draft", "email_create_draft"}
    # a query that is Lucene by another mark reads a capitalised field as a field too (as bm25 always did)
    assert bm25_index.search("Name:draft -create", 5).names == ["email_send_draft"]


# --- F6: options that would break every search are refused when the index is built -------------------------------


@pytest.mark.parametrize(
    ("backend", "options", "says"),
    [
        ("bm25", {"exact_name_boost": float("nan")}, "exact_name_boost must be a finite number >= 0, got nan"),
        ("bm25", {"exact_name_boost": float("inf")}, "exact_name_boost must be a finite number"),
        ("bm25", {"boosts": {"name": float("inf")}}, "bm25 boost for 'name' must be a finite number >= 0, got inf"),
        ("bm25", {"boosts": {"all": float("nan")}}, "bm25 boost for 'all' must be a finite number"),
        ("regex", {"timeout_seconds": float("inf")}, "timeout_seconds must be a finite number > 0"),
        ("regex", {"timeout_seconds": float("nan")}, "timeout_seconds must be a finite number > 0"),
        ("vector", {"ef_search": "fast", "hnsw_threshold": 1}, "ef_search must be a positive integer, got 'fast'"),
        ("vector", {"ef_search": 0}, "ef_search must be a positive integer"),
    ],
)
def test_non_finite_or_mistyped_options_are_refused_at_build(
    backend: str, options: dict[str, object], says: str
) -> None:
    extra = {"embedder": keyword_embedder(), "cache": False} if backend == "vector" else {}
    with pytest.raises(BackendError, match=re.escape(says)):
        ToolIndex.build(MAIL[:3], backend, **options, **extra)


# --- F7: ties broken by name before the cut at k, on every backend ----------------------------------------------

COPIES = [
    Tool("tool_frob", "Frobnicate the widgets of a factory"),
    Tool("tool.frob", "Frobnicate the widgets of a factory"),
    Tool("send_email", "Send an email"),
    Tool("get_weather", "Weather forecast for a city"),
]


@pytest.mark.parametrize("backend", ["bm25", "regex", "vector", "hybrid"])
def test_the_first_of_tied_tools_does_not_depend_on_k(backend: str) -> None:
    extra = {"embedder": keyword_embedder(), "cache": False} if backend in ("vector", "hybrid") else {}
    index = ToolIndex.build(COPIES, backend, **extra)
    query = "frobnicate widgets" if backend != "regex" else "frobnicate"
    # Before: bm25 and vector gave ['tool_frob'] at k=1 and ['tool.frob', 'tool_frob'] at k=2; regex kept catalog order.
    assert index.search(query, 1).names == ["tool.frob"]
    assert index.search(query, 2).names == ["tool.frob", "tool_frob"]
    within = index.search(query, 1, allowed=["tool_frob", "tool.frob", "send_email"]).names
    assert within == ["tool.frob"]


def test_bm25_breaks_ties_by_name_in_every_path() -> None:
    # 60 tools alike but for a name word (the same length: equal scores), in a catalog large enough that a small
    # allowed set is searched with tantivy's filter query, and a large one by reading the unfiltered ranking.
    alike = [Tool(f"relay_{c}{d}", "Relay a signal to the station") for c in "zyxwvu" for d in "jihgfedcba"]
    filler = [Tool(f"filler_{i}", f"Unrelated helper {i} for chores") for i in range(2_500)]
    index = ToolIndex.build([*alike, *filler], "bm25")
    by_name = sorted(t.name for t in alike)
    for k in (1, 3, 10):
        assert index.search("relay signal", k).names == by_name[:k]
        assert index.search("relay signal", k, allowed=by_name[-5:]).names == by_name[-5:][:k]  # filter query
        assert index.search("relay signal", k, allowed=[*by_name[::2], *(f"filler_{i}" for i in range(1_500))]).names \
            == by_name[::2][:k]  # the unfiltered ranking, read deep enough for the allowed ones


# --- F8: repeated Lucene terms count once; prefix and fuzzy expansions are capped --------------------------------


def test_a_repeated_prefix_term_counts_once(bm25_index: ToolIndex) -> None:
    once = bm25_index.search("calend*", 5)
    many = bm25_index.search("calend* " * 120, 5)  # 960 characters
    # Before: each copy built its own prefix query (250 of them took 2.5 s at 4,076 tools) and added to the score.
    assert [(h.name, h.score) for h in many.hits] == [(h.name, h.score) for h in once.hits] and not many.notes
    once = bm25_index.search("(calend* email)", 5)
    many = bm25_index.search("(calend* email) " * 60, 5)  # a repeated group counts once too (each its own object)
    assert [(h.name, h.score) for h in many.hits] == [(h.name, h.score) for h in once.hits] and not many.notes


def test_prefix_and_fuzzy_words_past_the_cap_are_searched_as_whole_words(bm25_index: ToolIndex) -> None:
    filler = " ".join([f"q{a}{b}*" for a in "bcdfg" for b in "hjklmnpqrstv"][:40])  # 40 prefixes matching nothing
    assert bm25_index.search(f"calend* {filler}", 5).names[:2] == ["calendar_create_event", "calendar_list_events"]
    late = bm25_index.search(f"{filler} calend*", 5)
    assert late.names == []  # the 41st prefix was searched as the whole word "calend"
    assert any(f"more than {bm25_module.MAX_EXPANSIONS} prefix (word*) or fuzzy (word~) words" in n for n in late.notes)


# --- regression audit of 5daec23 (F1-F4) ------------------------------------------------------------------------
# F1: units, formulas and capitalised labels in a request stay prose; hybrid holds to bm25's tools only for a
# constraint.


@pytest.mark.parametrize(
    "query",
    [
        "convert 500 ft^2 to m^2",
        "area of a room in km^2",
        "what is 3 ft^2 in cm^2",
        "3 feet^2 in metres",  # a word's power after a number: a unit
        "expand (x+1)^2",
        "compute (a+b)^2 for a=3 b=4",
        "simplify (x-2)^3",
        "Name:John Smith add contact",
        "Name:John",  # a value in capitals is a label's
        "create a contact Name:Alice Email:alice@example.com",
        "Tags:urgent create a task",
        "Server:prod-01 restart",
        "Server:db-2 reboot",
        "Description:quarterly report upload",
    ],
)
def test_units_formulas_and_capitalised_labels_stay_prose(query: str) -> None:
    # Before: each was read as Lucene (a boost mark after `)` or a two-letter unit, a field in any case).
    assert not looks_like_lucene(query)
    assert bm25_module.lucene_reading(query) is None


def test_boosts_and_lower_case_fields_are_still_marks() -> None:
    for query in ("email^10", '"a phrase"^2', "calendar^10 email", "refund^5", "name:email", "name:John",
                  "Server:db-2 +reboot", "(send OR create)^2 +email"):
        assert looks_like_lucene(query), query


def _with_frob() -> list[Tool]:
    # "frob" is a direction of the fake embedding, and a word bm25 does not find in "Frobnicate" (another stem)
    return [*MAIL, Tool("factory_frobnicate", "Frobnicate the widgets of a factory.")]


def test_hybrid_keeps_to_bm25s_tools_only_for_a_constraint() -> None:
    index = ToolIndex.build(_with_frob(), "hybrid", embedder=keyword_embedder(), cache=False)
    # A boost constrains nothing: the dense half's tool stays. Before: only bm25's tools (get_weather) came back.
    assert "factory_frobnicate" in index.search("weather^2 frob", 3).names
    assert index.search("weather^2 frob", 3).names[0] == "get_weather"
    # A constraint still holds to bm25's tools, and so does a word only bm25 reads (`weath*`, `wether~`)
    assert index.search("+weather frob", 3).names == ["get_weather"]
    assert index.search("weath* frob", 3).names == index.search("wether~ frob", 3).names == ["get_weather"]
    assert bm25_module.lucene_reading("weather^2 frob") == (frozenset(), False)
    assert bm25_module.lucene_reading("weath* frob") == (frozenset(), True)
    assert bm25_module.lucene_reading("weather (x+1)^2") is None  # prose
    # A capitalised label is prose: the dense half answers. Before: a `field` constraint that no tool met, so
    # hybrid answered nothing ("no tool matched these words").
    assert index.search("Server:prod-01 restart the frob", 3).names[:1] == ["factory_frobnicate"]


# F2: ties broken by name without reading up to 1,000 hits past k.


def _names_read(
    searched: ToolIndex | bm25_module.Bm25Backend, query: str, k: int, allowed: frozenset[str] | None = None
) -> tuple[list[str], int]:
    """A bm25 search's names, and how many hits it read: each hit read has its name looked up once, into a cache
    that starts afresh here."""
    backend = searched.backend if isinstance(searched, ToolIndex) else searched
    assert isinstance(backend, bm25_module.Bm25Backend)
    backend._name_cache = (None, {})
    names = [h.name for h in backend.search(query, k, allowed).hits]
    return names, len(backend._name_cache[1])


def _look_alikes(count: int) -> list[Tool]:
    # One template, as generated OpenAPI servers look: every tool scores alike for "get record by id". Shuffled, so
    # the catalog's order is not the names'.
    tools = [Tool(f"svc{i:04d}_get_record", "Get a record by id.") for i in range(count)]
    return [tools[(i * 7919) % count] for i in range(count)]


def test_bm25_reads_no_hit_past_k_on_an_index_built_in_name_order() -> None:
    tools = [*_look_alikes(2_500), *MAIL]  # (past 2,000 tools a small allowed set is searched with a filter query)
    index = ToolIndex.build(tools, "bm25")
    by_name = sorted(t.name for t in tools if t.name.startswith("svc"))
    for query in ("get record by id", "fetch the record", "record*", '+"get a record"', "name:record"):
        for k in (1, 3, 10):
            names, read = _names_read(index, query, k)
            # Before: 1,000 tied hits past k were read (2-10x the search's time); and with a tie of 1,500 the
            # first hits depended on the catalog's order past them.
            assert names == by_name[:k] and read == k, (query, k, read)
    names, read = _names_read(index, "send an email", 2)  # no tie: before, one hit past k was read
    assert names == index.search("send an email", 5).names[:2] and read == 2
    # within an allowed set: the filter query (a small set in a large catalog) reads no hit past k either, and the
    # unfiltered ranking is read only up to the k-th allowed hit (before: on through 1,000 more tied ones)
    names, read = _names_read(index, "get record by id", 4, frozenset(by_name[-5:]))
    assert names == by_name[-5:][:4] and read == 4
    names, read = _names_read(index, "get record by id", 3, frozenset(by_name[::2]))
    assert names == by_name[::2][:3] and read <= 2 * 3


def test_bm25_within_an_allowed_set_stops_at_the_last_hit_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    tools = [Tool(f"tool_{i:03d}", "invoice " * (1 + i % 7) + f"filler{i} word{i}") for i in range(400)]
    backend = ToolIndex.build(tools, "bm25").backend
    assert isinstance(backend, bm25_module.Bm25Backend)
    full = [h.name for h in backend.search("invoice", 400).hits]
    # 200 of 400 tools: the first page read is 50 deep, and its last hit is the 5th allowed one
    allowed = frozenset([*full[:4], full[49], *full[60:255]])
    limits: list[int] = []  # the depth of each search of the unfiltered ranking
    top = bm25_module._top

    def counted(searcher: Any, compiled: bm25_module._Compiled, limit: int) -> list[tuple[float, Any]]:
        limits.append(limit)
        return top(searcher, compiled, limit)

    monkeypatch.setattr(bm25_module, "_top", counted)
    names = [h.name for h in backend.search("invoice", 5, allowed).hits]
    assert names == [n for n in full if n in allowed][:5]
    # Before: the page was read to its end with 5 allowed hits in hand, and a 4x deeper one was searched too.
    assert limits == [50]


def test_bm25_keeps_name_order_through_removal_save_and_load(tmp_path: Path) -> None:
    index = ToolIndex.build(_look_alikes(300), "bm25")
    index.remove(["svc0000_get_record", "svc0002_get_record"])  # a re-index, or just deletes: order kept either way
    assert _names_read(index, "get record by id", 2) == (["svc0001_get_record", "svc0003_get_record"], 2)
    first = ["svc0000_get_record", "svc0001_get_record", "svc0002_get_record"]
    store = IndexStore(tmp_path / "store")
    name, _, _ = store.build(_look_alikes(300), backend="bm25")
    assert _names_read(store.open(name), "get record by id", 3) == (first, 3)
    # the mark is saved beside the files; an index saved without it (by an earlier release) is read through the tie
    tools = _look_alikes(300)
    folder = tmp_path / "bm25"
    folder.mkdir()
    ToolIndex.build(tools, "bm25").backend.save(folder)
    layout = folder / bm25_module.LAYOUT_FILE
    assert json.loads(layout.read_text())["name_order"] is True
    assert _names_read(bm25_module.load(folder, tools), "get record by id", 3) == (first, 3)
    layout.write_text(json.dumps({k: v for k, v in json.loads(layout.read_text()).items() if k != "name_order"}))
    names, read = _names_read(bm25_module.load(folder, tools), "get record by id", 3)
    assert names == first and 3 < read <= TIE_DEPTH


def test_bm25_reads_a_bounded_tie_after_tools_are_added() -> None:
    index = ToolIndex.build([*_look_alikes(300), Tool("zz_frob", "Frobnicate the widgets.")], "bm25")
    # added after the others, so not in name order: a tie is read through, to a depth that does not grow with k
    index.upsert([Tool("aaa0000_get_record", "Get a record by id."), Tool("aa_frob", "Frobnicate the widgets.")])
    assert _names_read(index, "frobnicate widgets", 1)[0] == ["aa_frob"]  # a small tie: by name, wherever added
    first = [_names_read(index, "get record by id", k) for k in (1, 2, 5, 20)]
    # Before: up to 1,000 hits past k were read (all 301 tied tools here).
    assert all(read <= 100 for _, read in first)
    assert [names for names, _ in first] == [first[-1][0][:k] for k in (1, 2, 5, 20)]  # the first hits do not move
    assert first[-1][0] == sorted(first[-1][0])


def test_vector_keeps_a_bounded_tie_past_n() -> None:
    copies = [Tool(f"copy{i:03d}_frob", "Frob the widgets.") for i in range(300)]  # one text: one vector
    index = ToolIndex.build([*copies, *MAIL], "vector", embedder=keyword_embedder(), cache=False)
    candidates = index.backend.candidates("frob widgets", 2)  # type: ignore[attr-defined]
    # Before: every tied copy up to 1,000 past n was searched for and scored (300 here).
    assert 2 < len(candidates) <= 100
    assert index.search("frob widgets", 2).names == ["copy000_frob", "copy001_frob"]


# F4: a character class's `(?` is text.


@pytest.mark.parametrize(
    "pattern",
    ["[(?x)]email", "calendar[(?1)]", "[(?R)]", "[ (?a) ](?u)mail", "[](?R)]mail", "[^](?x)]mail", r"[\[(?R)]",
     "(?#[)mail"],
)
def test_regex_reads_a_character_class_as_text(regex_index: ToolIndex, pattern: str) -> None:
    # Before: InvalidQueryError saying the pattern "turns on verbose mode", "calls a group or itself", or sets
    # "charset flags together", though inside a class `(?x)` is four characters.
    assert isinstance(regex_index.search(pattern, 3).hits, tuple)


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("[a](?R)", "calls a group"),
        ("[]](?R)", "calls a group"),  # the first `]` is a member
        (r"[\]](?x)mail", "verbose mode"),  # an escaped `]` does not end the class
        ("[[:alpha:]](?R)", "calls a group"),  # a POSIX class ends past its own `]`
        ("[[:alpha:][](?R)", "calls a group"),
        ("[[:alpha:](?#](?R)", "calls a group"),  # `(?#` inside that class is not a comment
        ("(?#[)(?R)]", "calls a group"),  # a `[` inside a comment opens no class
        ("(?u)[x](?a)mail", "ASCII, LOCALE and UNICODE flags are mutually incompatible"),
    ],
)
def test_regex_still_refuses_a_construct_beside_a_class(regex_index: ToolIndex, pattern: str, says: str) -> None:
    with pytest.raises(InvalidQueryError, match=says):
        regex_index.search(pattern, 3)
