"""The bm25 backend: field boosts, stemming, identifier splitting, the Lucene subset and its files."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import tantivy
from hypothesis import given, settings
from hypothesis import strategies as st

from toolsearch import BackendError, IndexFormatError, Tool, ToolIndex, lucene
from toolsearch.backends import bm25
from toolsearch.backends._base import TIE_DEPTH
from toolsearch.backends.bm25 import looks_like_lucene, split_words
from toolsearch.entities import split_entities
from toolsearch.evaluation import evaluate, load_queries


def _tool(name: str, description: str = "", namespace: str | None = None, **params: dict[str, object]) -> Tool:
    return Tool(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": params},
        namespace=namespace,
    )


TOOLS = [
    _tool("getUserById", "Look up a user account record.", "accounts", user_id={"type": "string"}),
    _tool("delete_user", "Remove a user account permanently.", "accounts"),
    _tool("send_email", "Send an email message to recipients.", "mail", subject={"type": "string"}),
    _tool("send_sms", "Send a text message to a phone number.", "phone", body={"type": "string"}),
    _tool("weather.forecast", "Weather forecasts for the coming days.", "weather"),
    _tool("weather.history", "Historical weather observations for past dates.", "weather"),
    _tool(
        "create_invoice",
        "Create an invoice for a customer.",
        "billing",
        currency={"type": "string", "enum": ["USD", "EUR", "JPY"], "description": "Invoice currency"},
    ),
    _tool("email_stats", "Statistics about mailbox volume.", "mail"),
]


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    return ToolIndex.build(TOOLS, backend="bm25")


def names(index: ToolIndex, query: str, k: int = 5) -> list[str]:
    return index.search(query, k).names


# --- analysis ------------------------------------------------------------------------------------


def test_split_words_matches_identifier_breaks() -> None:
    assert split_words("getUserById") == "get User By Id"
    assert split_words("HTTPServer utf8 v2Api") == "HTTP Server utf 8 v 2 Api"
    assert split_words("plain words stay") == "plain words stay"


def test_identifier_forms_meet(index: ToolIndex) -> None:
    assert names(index, "get user by id")[0] == "getUserById"
    assert names(index, "get_user_by_id")[0] == "getUserById"
    assert names(index, "GetUserByID")[0] == "getUserById"
    assert names(index, "weather forecast")[0] == "weather.forecast"


def test_stemming(index: ToolIndex) -> None:
    assert names(index, "forecasting")[0] == "weather.forecast"
    assert names(index, "sending emails")[0] == "send_email"


def test_parameters_and_enum_values_are_searchable(index: ToolIndex) -> None:
    assert names(index, "jpy")[0] == "create_invoice"
    assert names(index, "subject")[0] == "send_email"


def test_exact_name_gets_a_bonus(index: ToolIndex) -> None:
    # email_stats shares every word with the query's other tools; its exact name still wins.
    assert names(index, "email_stats")[0] == "email_stats"
    assert names(index, "weather.history")[0] == "weather.history"
    assert names(index, "use `send_sms` please")[0] == "send_sms"


def test_filler_words_do_not_rank(index: ToolIndex) -> None:
    assert names(index, "could you please help me send an email")[0] == "send_email"
    # only filler: its words are still searched (here they match nothing), never "no words"
    assert index.search("what can you do", 5).notes == ("no tool matched these words; try other words or synonyms",)


def test_non_english_and_symbols_do_not_raise(index: ToolIndex) -> None:
    for query in ["天気予報", "météo demain", "¿¡!?", "::", "100%", "a/b\\c", "x^2 + 3x - 4 = 0"]:
        result = index.search(query, 5)
        assert not any("syntax" in n for n in result.notes)


# --- query syntax --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "What's the weather in Paris?",
        "Find the roots of x^2 + 5x + 6 = 0 (a quadratic)",
        'Train a model using the "Wine Quality" dataset.',
        "Send an e-mail to bob@example.com: subject 'hi'",
        "temperature -5 degrees and 3 - 2",
        "I need to fix my C++ code; what's wrong?",
        "Look up the user's name and address",
        "1) book a flight 2) reserve a hotel",
        "and or not",
        # a field name followed by a space is a label in prose, not a field restriction
        "Please transcribe this record: Patient name: John Smith, Age: 35, Gender: Male",
        "Calculate the heat exchanger's effectiveness with these parameters: flow rate 100 kg/s",
        # an operator-looking word or two inside a long request does not make it a query language
        "I need information about the ethics of artificial intelligence, then convert the logical "
        "expression A AND B into conjunctive normal form and explain each step",
        "Please compile the source code 'main.java' into machine code for the x86 architecture "
        "with -O2 optimisation and tell me how long it took",
    ],
)
def test_sentences_are_plain(query: str) -> None:
    assert not looks_like_lucene(query)


@pytest.mark.parametrize(
    "query",
    [
        "name:weather",
        "description:invoice",
        "+send -sms",
        '+"send email"',
        "emial~",
        "forecast~1",
        "weath*",
        "send AND email",
        "email OR sms",
        "NOT weather",
        "(send OR create) +email",
        "name:",
        "the weather tools namespace:weather",  # short: any mark counts
        "+forecast -history description:daily name:weather tags:public OR hourly",  # long, mostly syntax
    ],
)
def test_lucene_attempts_are_recognised(query: str) -> None:
    assert looks_like_lucene(query)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("abcANDORT :+-~*&|()\"'1 \n")), max_size=40))
def test_the_quick_test_passes_every_query_with_a_mark(query: str) -> None:
    # looks_like_lucene answers "plain" without scanning when the quick test finds nothing; it must never
    # miss a mark the full pattern would find.
    if lucene._LUCENE_HINT.search(query):
        assert lucene._MAY_MARK.search(query)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('abcxNamet :^1.2()"+ \n')), max_size=30))
def test_the_quick_test_passes_every_boost_and_field_clause_query(query: str) -> None:
    # the boost mark and the capitalised-field rule are checked apart from _LUCENE_HINT (see looks_like_lucene)
    if lucene._BOOST_HINT.search(query) or lucene._fields_only(query):
        assert lucene._MAY_MARK.search(query)


def test_field_restriction(index: ToolIndex) -> None:
    # "email" is in send_email's name and in email_stats' name; description:mailbox only in one.
    assert names(index, "description:mailbox") == ["email_stats"]
    assert set(names(index, "name:email")) == {"send_email", "email_stats"}
    assert names(index, "params:subject") == ["send_email"]
    assert names(index, "parameters:jpy") == ["create_invoice"]
    assert set(names(index, "namespace:weather")) == {"weather.forecast", "weather.history"}


def test_must_and_must_not(index: ToolIndex) -> None:
    assert names(index, "+send -sms") == ["send_email"]
    assert set(names(index, "+user -delete")) == {"getUserById"}
    assert names(index, "message NOT email") == ["send_sms"]
    assert names(index, "send AND message AND phone") == ["send_sms"]
    assert set(names(index, "sms OR invoice")) == {"send_sms", "create_invoice"}


def test_phrase(index: ToolIndex) -> None:
    assert names(index, '+"text message"') == ["send_sms"]
    assert names(index, '+"message text"') == []  # word order matters
    assert names(index, '+"message text"~2') == ["send_sms"]  # unless slop allows it
    # a phrase keeps the gaps of removed stop words: "account permanently" != "remove ... account"
    assert names(index, '+"remove a user account"') == ["delete_user"]


def test_fuzzy_and_prefix(index: ToolIndex) -> None:
    assert names(index, "emial~")[0] in {"send_email", "email_stats"}
    assert names(index, "invoce~1") == ["create_invoice"]
    assert names(index, "invoce") == []  # without ~ no match
    assert names(index, "forec*")[0] == "weather.forecast"


def test_groups_and_boosts(index: ToolIndex) -> None:
    assert set(names(index, "+(sms OR invoice) +send")) == {"send_sms"}
    assert names(index, "email^5 sms -invoice")[0] in {"send_email", "email_stats"}
    assert names(index, "email sms^5 -invoice")[0] == "send_sms"


@pytest.mark.parametrize(
    "query",
    [
        "name:",
        "AND send",
        "send AND NOT",
        "+send OR",
        "(send OR) -sms",
        "+send description:",
        '+"send email',
        "(send OR email",
        "send) +email",
        'weather AND ("forecast',
    ],
)
def test_syntax_errors_fall_back_with_a_note(index: ToolIndex, query: str) -> None:
    result = index.search(query, 5)
    assert any("syntax not understood" in n and "plain text" in n for n in result.notes), result.notes


def test_syntax_error_still_searches_the_words(index: ToolIndex) -> None:
    result = index.search("invoice AND OR", 5)
    assert result.names[:1] == ["create_invoice"]


@pytest.mark.parametrize(
    "query",
    ['"send email', "1) send email", "+ email", "name: email", 'name:"send email"', "send - email -sms"],
)
def test_forgiving_parsing_has_no_note(index: ToolIndex, query: str) -> None:
    result = index.search(query, 5)
    assert result.names and not result.notes, (result.names, result.notes)


def test_only_excluded_words(index: ToolIndex) -> None:
    result = index.search("-email -sms", 5)
    assert result.names == [] and "only excludes" in result.notes[0]


def test_no_match_is_never_silent(index: ToolIndex) -> None:
    result = index.search("xylophone", 5)
    assert result.names == [] and "no tool matched" in result.notes[0]


def test_allowed_filter_combines_with_scoring(index: ToolIndex) -> None:
    allowed = {"send_sms", "weather.history"}
    assert index.search("send email message", 5, allowed=allowed).names == ["send_sms"]
    # the same frozen set is cached; a different one is not confused with it
    assert index.search("send email message", 5, allowed=allowed).names == ["send_sms"]
    assert index.search("send email message", 5, allowed={"send_email"}).names == ["send_email"]
    assert index.search("+send -sms", 5, allowed=allowed).names == []


@pytest.mark.parametrize("size", [1500, 300, 40, 3])
def test_allowed_subset_ranks_exactly_as_the_whole_ranking_restricted(
    bfcl_bm25: ToolIndex, bfcl_dir: Path, size: int
) -> None:
    """Large subsets are searched by reading the unfiltered ranking deep enough, small ones with a filter
    query: either way the hits are the whole catalog's ranking restricted to the subset."""
    import random

    index = bfcl_bm25
    names = index.catalog.names
    rng = random.Random(size)
    allowed = frozenset(rng.sample(names, size))
    labelled = load_queries(bfcl_dir / "queries.jsonl", limit=40, seed=size)
    queries = [q.query for q in labelled] + ["weather", "get"]
    for query in queries:
        whole = index.backend.search(query, len(names)).hits
        expected = [(h.name, round(h.score, 5)) for h in whole if h.name in allowed][:7]
        got = [(h.name, round(h.score, 5)) for h in index.search(query, 7, allowed=allowed).hits]
        assert got == expected, query
    # a subset far down one query's ranking: the first pages read hold none of it
    whole = [h.name for h in index.backend.search("get data", len(names)).hits]
    deep = frozenset(whole[len(whole) // 2 :][:size])
    expected_deep = [n for n in whole if n in deep][:7]
    assert index.search("get data", 7, allowed=deep).names == expected_deep


@pytest.fixture(scope="module")
def bfcl_bm25(bfcl_tools: list[Tool]) -> ToolIndex:
    return ToolIndex.build(bfcl_tools, backend="bm25")


# --- options, persistence, updates ---------------------------------------------------------------


def test_options_are_validated() -> None:
    with pytest.raises(BackendError, match="unknown bm25 option 'boost'"):
        bm25.create(boost={"name": 2})
    with pytest.raises(BackendError, match="unknown bm25 field 'title'"):
        bm25.create(boosts={"title": 2})
    with pytest.raises(BackendError, match=">= 0"):
        bm25.create(boosts={"name": -1})
    with pytest.raises(BackendError, match="exact_name_boost"):
        bm25.create(exact_name_boost="high")


def test_boosts_shape_ranking_and_the_index_key() -> None:
    tools = [
        _tool("alpha", "ledger ledger ledger ledger"),
        _tool("ledger_tool", "something else entirely"),
    ]
    by_name = ToolIndex.build(tools, backend="bm25", boosts={"name": 5.0, "all": 0.1, "description": 0.0})
    by_text = ToolIndex.build(tools, backend="bm25", boosts={"name": 0.0, "all": 0.1, "description": 5.0})
    assert by_name.search("ledger", 2).names[0] == "ledger_tool"
    assert by_text.search("ledger", 2).names[0] == "alpha"
    assert by_name.key != by_text.key
    assert by_name.backend.describe()["boosts"]["name"] == 5.0


def test_saved_index_is_memory_mapped_not_rebuilt(index: ToolIndex, tmp_path: Path) -> None:
    folder = index.save(tmp_path / "idx")
    files = sorted(p.name for p in (folder / "backend" / "tantivy").iterdir())
    assert "meta.json" in files and not any(f.endswith(".lock") for f in files)
    layout = json.loads((folder / "backend" / "bm25.json").read_text())
    assert layout["layout"] == bm25.LAYOUT_VERSION
    loaded = ToolIndex.load(folder)
    assert loaded.backend._folder == folder.resolve() / "backend" / "tantivy"  # type: ignore[attr-defined]
    assert loaded.search("forecasting", 3).names == index.search("forecasting", 3).names


def test_saving_an_empty_backend(tmp_path: Path) -> None:
    empty = bm25.create()
    empty.save(tmp_path)
    loaded = bm25.load(tmp_path, [])
    assert loaded.search("anything", 5).hits == []
    loaded.add(TOOLS[:1])
    assert [h.name for h in loaded.search("user", 5).hits] == ["getUserById"]


def test_load_rejects_broken_files(index: ToolIndex, tmp_path: Path) -> None:
    folder = tmp_path / "b"
    folder.mkdir()
    index.backend.save(folder)
    with pytest.raises(IndexFormatError, match="holds 8 tools but the catalog has 2"):
        bm25.load(folder, TOOLS[:2])
    (folder / "bm25.json").write_text('{"layout": 99}')
    with pytest.raises(IndexFormatError, match="layout 99"):
        bm25.load(folder, TOOLS)
    (folder / "bm25.json").write_text("{not json")
    with pytest.raises(IndexFormatError, match="corrupt"):
        bm25.load(folder, TOOLS)
    (folder / "bm25.json").unlink()
    with pytest.raises(IndexFormatError, match=r"bm25\.json is missing"):
        bm25.load(folder, TOOLS)


def test_corrupt_tantivy_files_give_a_clear_error(index: ToolIndex, tmp_path: Path) -> None:
    folder = tmp_path / "b"
    folder.mkdir()
    index.backend.save(folder)
    (folder / "tantivy" / "meta.json").write_text("garbage")
    with pytest.raises(IndexFormatError, match="rebuild"):
        bm25.load(folder, TOOLS)


def test_updates_after_save_keep_working(tmp_path: Path) -> None:
    built = ToolIndex.build(TOOLS, backend="bm25")
    built.save(tmp_path / "one")
    built.upsert([_tool("translate", "Translate text between languages.")])
    built.save(tmp_path / "two")
    assert ToolIndex.load(tmp_path / "one").search("translate", 3).names == []
    assert ToolIndex.load(tmp_path / "two").search("translate", 3).names == ["translate"]


def _threads(prefix: str) -> int:
    count = 0
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            count += (task / "comm").read_text().startswith(prefix)
    return count


def test_a_built_index_holds_no_writer(tmp_path: Path) -> None:
    # Before: a built index kept tantivy's writer open for its life: its lock, four merge threads, an indexer and a
    # segment updater, and megabytes of arena, per index. A changed one keeps it until it is saved.
    def writer_free(index: ToolIndex) -> bool:
        try:
            tantivy.Index.open(str(index.backend._folder)).writer(heap_size=15_000_000).rollback()  # type: ignore[attr-defined]
        except ValueError as exc:
            assert "LockBusy" in str(exc)
            return False
        return True

    before = _threads("merge_thread")
    built = [ToolIndex.build(TOOLS, backend="bm25") for _ in range(3)]
    assert [writer_free(index) for index in built] == [True, True, True]
    built[0].upsert([_tool("translate", "Translate text between languages.")])
    assert not writer_free(built[0])
    built[0].save(tmp_path / "saved")
    assert writer_free(built[0])
    deadline = time.monotonic() + 30  # threads end shortly after their writer: wait for them, do not time them
    while _threads("merge_thread") > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _threads("merge_thread") == before
    assert built[0].search("translate", 1).names == ["translate"]


class _Interrupted(Sequence[Tool]):
    """Tools whose reading stops at the third (as a Ctrl-C would, two tools into the change)."""

    def __init__(self, tools: list[Tool]) -> None:
        self.tools = tools

    def __len__(self) -> int:
        return len(self.tools)

    def __getitem__(self, i: int) -> Tool:  # type: ignore[override]
        return self.tools[i]

    def __iter__(self) -> Iterator[Tool]:
        for i, tool in enumerate(self.tools):
            if i == 2:
                raise KeyboardInterrupt
            yield tool


def test_a_change_interrupted_midway_leaves_nothing_of_itself() -> None:
    # Before: the tools added before the interruption stayed in the open writer, and the next change committed them.
    backend = bm25.create()
    backend.add(TOOLS)
    extra = [_tool(f"half_{i}", f"Half added tool number {i}.") for i in range(4)]
    with pytest.raises(KeyboardInterrupt):
        backend.add(_Interrupted(extra))
    backend.add([_tool("translate", "Translate text between languages.")])
    assert [h.name for h in backend.search("half added tool", 5).hits] == []
    assert [h.name for h in backend.search("translate", 1).hits] == ["translate"]
    assert len(backend) == len(TOOLS) + 1


def test_hits_name_the_tools_of_the_current_commit() -> None:
    # Hit names are cached by document address; a commit reuses addresses for other tools.
    backend = bm25.create()
    backend.add([_tool("old_one", "Send an email message."), _tool("old_two", "Send an email reply.")])
    assert {h.name for h in backend.search("send email", 5).hits} == {"old_one", "old_two"}
    backend.remove(["old_one", "old_two"])
    backend.add([_tool("new_one", "Send an email message."), _tool("new_two", "Send an email reply.")])
    assert {h.name for h in backend.search("send email", 5).hits} == {"new_one", "new_two"}
    assert {h.name for h in backend.search("send email", 5, frozenset({"new_two"})).hits} == {"new_two"}


def test_searches_run_while_tools_are_updated() -> None:
    live = ToolIndex.build(TOOLS, backend="bm25")
    errors: list[BaseException] = []
    stop = threading.Event()

    def searcher() -> None:
        try:
            while not stop.is_set():
                assert live.search("send email", 3).names
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=searcher)
    thread.start()
    try:
        for i in range(20):
            live.upsert([_tool(f"extra_{i}", f"Extra tool number {i} that sends email.")])
            live.remove([f"extra_{i - 1}"])
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert "extra_19" in live.search("extra tool", 5).names


# --- quality guard (the full comparison with peers lives in benchmarks/) -------------------------


def test_quality_on_a_public_dataset(bfcl_bm25: ToolIndex, bfcl_dir: Path) -> None:
    """BFCL, built from the bfcl-eval package: these 300 queries score 0.764 / 0.815; the floor sits between that
    and the peer bm25s (0.660 / 0.735 on all 2,351, benchmarks/results/retrieval.md)."""
    queries = load_queries(bfcl_dir / "queries.jsonl", limit=300, seed=0)
    scores = evaluate(lambda q: bfcl_bm25.search(q[:1000], 10).names, queries)
    assert scores["nDCG@10"] > 0.74 and scores["R@5"] > 0.79, scores


# --- the pruned plain query ranks exactly as the whole query -------------------------------------


@pytest.fixture(scope="module")
def variants_bm25(bfcl_dir: Path) -> ToolIndex:
    """bfcl's tools and variants of them: many tools share most of their words, so ties abound."""
    from benchmarks.lib import Dataset
    from benchmarks.lib.synth import plan_catalog

    return ToolIndex.build(plan_catalog([Dataset(bfcl_dir)], 6_000, seed=3).tools(), backend="bm25")


def _whole_ranking(index: ToolIndex, query: str, limit: int) -> list[tuple[str, float]]:
    """The ranking of the whole query in one tantivy search (every word and the exact-name bonus for every
    word of the query in one union), as it was searched before the words ran apart."""
    backend = index.backend
    assert isinstance(backend, bm25.Bm25Backend)
    if looks_like_lucene(query):
        whole = backend._group(bm25._Parser(query).parse(), bm25._Expansions())
    else:
        prose, values = split_entities(query)
        tokens = backend._tokens(prose, drop_filler=True) or backend._tokens(prose)
        weak = [t for t in backend._tokens(values) if t not in tokens] if values else []
        light = [tantivy.Query.boost_query(q, bm25.VALUE_WEIGHT) for q in backend._terms(weak, backend._fields)]
        exact = backend._exact_name([c.strip(bm25._NAME_TRIM).lower() for c in [query, *query.split()]])
        plain_weak = backend._terms(weak, backend._fields)
        terms = [*backend._terms(tokens, backend._fields), *(light if tokens else plain_weak)]
        whole = bm25._any_of([*terms, *([exact] if exact is not None else [])])
    searcher = backend._searcher
    # Read past `limit` (through any tie with the limit-th), since the backend breaks ties by name before its cut.
    deep = searcher.search(whole, limit + TIE_DEPTH).hits
    found = [(searcher.doc(a).get_first("id"), float(s)) for s, a in deep]
    return sorted(found, key=lambda pair: (-pair[1], pair[0]))[:limit]


def test_plain_queries_rank_exactly_as_the_whole_query(variants_bm25: ToolIndex, bfcl_dir: Path) -> None:
    """The words are searched apart from the exact-name bonus (so tantivy can prune them) and merged:
    names, order and scores must be those of the single query, ties included, at every depth."""
    index = variants_bm25
    names = index.catalog.names
    queries = [q.query[:1000] for q in load_queries(bfcl_dir / "queries.jsonl", limit=60, seed=1)]
    queries += names[::400]  # a whole name: the bonus tool ranks first
    queries += [f"please run {names[i]} then {names[i + 1].upper()} on the data" for i in range(7, len(names), 500)]
    queries += ["the", "what can you do?", "get", "name:weather", "+get -user"]
    bonus_on_top = 0
    for query in queries:
        for k in (1, 10, 60):
            got = [(h.name, h.score) for h in index.backend.search(query, k).hits]
            assert got == _whole_ranking(index, query, k), (query, k)
        bonus_on_top += query in names and index.search(query, 1).names == [query]
    assert bonus_on_top == len(names[::400])


def test_subsets_rank_exactly_as_the_whole_query_filtered(variants_bm25: ToolIndex) -> None:
    index = variants_bm25
    names = index.catalog.names
    allowed = frozenset(names[::3]) | {names[10], names[11]}
    for query in ["get the weather forecast", names[10], f"call {names[11]} for the current weather", "get"]:
        expected = [(n, s) for n, s in _whole_ranking(index, query, len(names)) if n in allowed][:8]
        assert [(h.name, h.score) for h in index.backend.search(query, 8, allowed).hits] == expected, query


# --- the bound on a query's work -----------------------------------------------------------------


def _common_word_catalog() -> list[Tool]:
    """200 tools that all fetch records, a few about invoices: `fetch` and `record` are in every tool."""
    topics = ["invoice", "weather", "shipment", "payroll"]
    return [_tool(f"tool_{i}", f"Fetch a record about {topics[i % 4]} number {i}.") for i in range(200)]


def test_a_search_past_the_postings_bound_leaves_out_its_commonest_words(tmp_path: Path) -> None:
    tools = _common_word_catalog()
    exact = ToolIndex.build(tools, backend="bm25", max_postings=None)
    bounded = ToolIndex.build(tools, backend="bm25", max_postings=300)
    query = "Please FETCH the invoice records"
    full = exact.search(query, 10)
    assert not full.notes
    result = bounded.search(query, 10)
    # "fetch" and "record" hold 200 postings in each of two fields: both give way, "invoice" stays
    assert len(result.notes) == 1, result.notes
    note = result.notes[0]
    assert "most common words (FETCH, records;" in note and "100% or more of the 200 tools" in note, note
    assert "300 postings" in note
    assert [(h.name, h.score) for h in result.hits] == [(h.name, h.score) for h in exact.search("invoice", 10).hits]
    # the rare word ranks as it did: the top tools are the invoice ones either way (all 50 tie: the first by name)
    assert set(result.names) == set(full.names) == set(sorted(f"tool_{i}" for i in range(0, 200, 4))[:10])
    # a query of common words only keeps one of them
    only_common = bounded.search("fetch record", 5)
    assert only_common.names and len(only_common.notes) == 1
    # the bound is part of the index: saved and loaded, it still applies
    loaded = ToolIndex.load(bounded.save(tmp_path / "bounded"))
    assert loaded.search(query, 10).notes == result.notes
    assert bounded.key != exact.key


def test_the_default_bound_is_far_above_real_catalogs(variants_bm25: ToolIndex, bfcl_dir: Path) -> None:
    """Within the bound the search is exact: the default leaves real requests whole, over 6,000 tools of bfcl's
    words (its tools and their variants; a few of its requests match no word at all, and say so instead)."""
    index = variants_bm25
    for q in load_queries(bfcl_dir / "queries.jsonl", limit=300, seed=0):
        notes = index.search(q.query[:1000], 10).notes
        assert not [n for n in notes if "postings" in n or "common words" in n], (q.query, notes)
    assert "max_postings" not in index.backend.describe()  # the default is not written: older keys stay


def test_max_postings_is_validated() -> None:
    for wrong in (0, -5, 2.5, "many", True):
        with pytest.raises(BackendError, match="max_postings must be a whole number >= 1 or None"):
            bm25.create(max_postings=wrong)
    assert bm25.create(max_postings=None).describe()["max_postings"] is None
