"""The learned ranking signal over a real bm25 index: identity without evidence, learning, filters, noise, the loop."""

from __future__ import annotations

import math
import random
import time
from typing import Any

import pytest

import toolsearch
from toolsearch import SearchResult, Tool, ToolIndex
from toolsearch.demo import demo_tools
from toolsearch.learning import LearnedRanker, LearningIndex
from toolsearch.providers import ScriptedModel, call, search
from toolsearch.session import SessionManager
from toolsearch.usage import UsageLog, UsageRecorder

TOOLS = [
    Tool("payments_refund", "Return the funds of a captured card charge.", namespace="payments"),
    Tool("payments_charge", "Charge a customer card.", namespace="payments"),
    Tool("mail_send", "Send an email message to a customer.", namespace="mail"),
    Tool("mail_draft", "Draft an email message without sending it.", namespace="mail"),
    Tool("weather_now", "Current weather conditions for a city.", namespace="weather"),
    Tool("herramienta_correo", "Envía un correo electrónico."),
]
QUERIES = [
    "give the customer their money back",
    "customer wants money back for the card",
    "mail the customer the weather",
    "send an email message",
    "charge",
    "nothing in common whatsoever",
]


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    return ToolIndex.build(TOOLS, backend="bm25")


def learning(index: ToolIndex, log: UsageLog) -> LearningIndex:
    return LearningIndex(index, LearnedRanker(log, refresh_seconds=0))


def same(a: SearchResult, b: SearchResult) -> bool:
    return (a.query, a.hits, a.tools, a.backend, a.notes) == (b.query, b.hits, b.tools, b.backend, b.notes)


@pytest.mark.parametrize("k", [1, 3, 10])
@pytest.mark.parametrize("filters", [{}, {"allowed": ["mail_send", "payments_charge"]}, {"namespaces": ["mail"]}])
def test_an_empty_log_changes_nothing(index: ToolIndex, k: int, filters: dict[str, Any]) -> None:
    plain_and_learning = learning(index, UsageLog())
    for query in QUERIES:
        assert same(plain_and_learning.search(query, k, **filters), index.search(query, k, **filters))


def test_a_log_of_unrelated_queries_changes_nothing(index: ToolIndex) -> None:
    log = UsageLog()
    log.add("translate this paragraph into french", "herramienta_correo")
    log.add("book a flight to lisbon", "weather_now")
    learned = learning(index, log)
    for query in QUERIES[:5]:
        assert same(learned.search(query, 5), index.search(query, 5))


def test_learning_off_is_the_plain_index(index: ToolIndex) -> None:
    log = UsageLog()
    log.add("give the customer their money back", "payments_refund")
    learned = LearningIndex(index, log, enabled=False)
    assert same(learned.search(QUERIES[0], 5), index.search(QUERIES[0], 5))


def test_a_successful_call_lifts_its_tool_for_similar_queries(index: ToolIndex) -> None:
    query = "customer wants their money back"
    assert "payments_refund" not in index.search(query, 5).names
    log = UsageLog()
    log.add("give the customer their money back", "payments_refund")
    log.add("the customer wants the money back", "payments_refund")
    result = learning(index, log).search(query, 5)
    assert result.names[0] == "payments_refund"
    assert result.tools[0].name == "payments_refund"


def test_words_only_users_use_reach_a_tool_described_in_another_language(index: ToolIndex) -> None:
    assert "herramienta_correo" not in index.search("write to my accountant", 5).names
    log = UsageLog()
    for text in ("write to my accountant", "write a note to my accountant", "write to accountant today"):
        log.add(text, "herramienta_correo")
    assert learning(index, log).search("write to the accountant", 3).names[0] == "herramienta_correo"


def test_hits_only_use_found_say_so_and_not_that_nothing_matched(index: ToolIndex) -> None:
    # Words no tool holds: the backend finds nothing and says to try other words; what earlier users called is found.
    plain = index.search("zorglub my plumbus", 3)
    assert not plain.hits and any("no tool matched" in note for note in plain.notes)
    log = UsageLog()
    for text in ("zorglub my plumbus", "zorglub the plumbus", "zorglub plumbus now"):
        log.add(text, "weather_now")
    found = learning(index, log).search("zorglub plumbus", 3)
    assert found.names == ["weather_now"]
    assert not any("no tool matched" in note for note in found.notes)
    assert any("earlier requests" in note for note in found.notes)
    reordered = learning(index, log).search("zorglub plumbus weather", 3)  # the backend's own hits keep its notes
    assert reordered.hits and reordered.notes == index.search("zorglub plumbus weather", 3).notes


def test_learned_tools_never_escape_the_session_filter(index: ToolIndex) -> None:
    log = UsageLog()
    for _ in range(5):
        log.add("give the customer their money back", "payments_refund")
    learned = learning(index, log)
    assert learned.search("give the customer their money back", 5).names[0] == "payments_refund"
    assert "payments_refund" not in learned.search("give the customer their money back", 5, namespaces=["mail"]).names
    sessions = SessionManager(learned)
    session = sessions.create("limited", allowed=["mail_send", "mail_draft", "payments_charge"])
    found = session.search("give the customer their money back", 5)
    assert "payments_refund" not in found.names
    assert set(found.names) <= {"mail_send", "mail_draft", "payments_charge"}
    assert "payments_refund" not in session.discovered


def test_a_removed_tool_is_not_brought_back_by_old_votes(index: ToolIndex) -> None:
    log = UsageLog()
    for _ in range(3):
        log.add("write to my accountant", "herramienta_correo")
    learned = learning(ToolIndex.build(TOOLS, backend="bm25"), log)
    learned.remove(["herramienta_correo"])
    assert "herramienta_correo" not in learned.search("write to my accountant", 5).names


@pytest.mark.parametrize("backend", ["regex", "bm25"])
@pytest.mark.parametrize("updated", ["wrapped", "wrapper"])
def test_the_wrapper_and_its_index_see_every_update_either_makes(backend: str, updated: str) -> None:
    """A LearningIndex delegates to the index it wraps: an update through either is seen by both."""
    plain = ToolIndex.build([Tool("send_email", "send an email")], backend=backend)
    learned = learning(plain, UsageLog())
    target = plain if updated == "wrapped" else learned
    target.upsert([Tool("get_weather", "weather forecast")])
    assert plain.search("weather", 5).names == learned.search("weather", 5).names == ["get_weather"]
    assert len(learned) == len(plain) == 2 and learned.key == plain.key and learned.catalog is plain.catalog
    target.remove(["send_email"])
    assert plain.search("email", 5).names == learned.search("email", 5).names == []
    target.sync([Tool("send_sms", "send a text message")])
    assert learned.search("text message", 5).names == plain.search("text message", 5).names == ["send_sms"]
    assert learned.catalog.names == plain.catalog.names == ["send_sms"]


def test_a_few_wrong_calls_do_not_bury_the_right_tool(index: ToolIndex) -> None:
    log = UsageLog()
    for text, tool in [("weather in lisbon now", "weather_now"), ("email the team the agenda", "mail_send"),
                       ("draft a message to the board", "mail_draft"), ("charge the card on file", "payments_charge")]:
        log.add(text, tool)
    for _ in range(2):
        for text in ("customer wants the money back", "money back for a customer", "customer money back please",
                     "give a customer money back"):
            log.add(text, "payments_refund")
    log.add("the customer wants money back today", "weather_now")  # 2 wrong calls among 10
    log.add("customer asks for money back", "mail_draft")
    ranked = learning(index, log).search("customer wants their money back", 5).names
    assert ranked[0] == "payments_refund"
    assert ranked.index("weather_now") > 2 and ranked.index("mail_draft") > 2


def test_a_weakly_similar_wrong_call_leaves_a_strong_match_on_top(index: ToolIndex) -> None:
    log = UsageLog()
    log.add("weather message for lisbon", "weather_now")  # shares one word with the query below
    assert learning(index, log).search("send an email message", 5).names[0] == "mail_send"


def test_the_ranker_picks_up_new_entries(index: ToolIndex) -> None:
    log = UsageLog()
    learned = learning(index, log)
    assert not learned.ranker.signal("write to my accountant")
    log.add("write to my accountant", "herramienta_correo")
    signal = learned.ranker.signal("write to my accountant")
    assert set(signal.shares) == {"herramienta_correo"} and 0 < signal.confidence < 1


def test_the_loop_feeds_the_log_and_the_next_run_searches_better(index: ToolIndex) -> None:
    log = UsageLog(index.catalog.hash, privacy="raw")
    sessions = SessionManager(learning(index, log))
    recorder = UsageRecorder(log)
    refunds: list[str] = []

    def payments_refund() -> str:
        refunds.append("done")
        return "refunded"

    first = toolsearch.run(
        ScriptedModel([search("customer wants money back for the card"), call("payments_refund"), "Refunded."]),
        "The customer wants their money back",
        session=sessions.create("first"),
        functions={"payments_refund": payments_refund},
    )
    assert refunds == ["done"]
    assert first.searches[0].names.index("payments_refund") > 0  # found, but not first
    assert recorder.record_run(first) == 1
    assert [(e.query, e.called) for e in log] == [("customer wants money back for the card", "payments_refund")]

    second = toolsearch.run(
        ScriptedModel([search("customer wants money back for the card"), "Found it."]),
        "Another refund",
        session=sessions.create("second"),
    )
    assert second.searches[0].names[0] == "payments_refund"


def test_a_loop_given_a_recorder_feeds_the_log_itself(index: ToolIndex) -> None:
    log = UsageLog(index.catalog.hash, privacy="raw")
    sessions = SessionManager(learning(index, log))
    result = toolsearch.run(
        ScriptedModel([search("customer wants money back for the card"), call("payments_refund"), "Refunded."]),
        "The customer wants their money back",
        session=sessions.create("fed-by-the-loop"),
        functions={"payments_refund": lambda: "refunded"},
        usage=UsageRecorder(log),
    )
    assert result.output == "Refunded."
    assert [(e.query, e.called) for e in log] == [("customer wants money back for the card", "payments_refund")]


def test_failed_and_refused_calls_teach_nothing(index: ToolIndex) -> None:
    from toolsearch.executor import handle_tool_calls
    from toolsearch.providers import ToolCall

    log = UsageLog(index.catalog.hash, privacy="raw")
    recorder = UsageRecorder(log)
    session = SessionManager(index).create("byol")

    def payments_refund() -> str:
        raise RuntimeError("gateway down")

    calls = [ToolCall("s1", "tool_search", {"query": "customer wants money back for the card"})]
    handle_tool_calls(session, calls, {"payments_refund": payments_refund}, usage=recorder)
    handle_tool_calls(session, [ToolCall("c1", "payments_refund", {})], {"payments_refund": payments_refund},
                      usage=recorder)  # raised: not a success
    handle_tool_calls(session, [ToolCall("c2", "email_send_message", {})], {}, usage=recorder)  # never shown
    assert list(log) == []
    handle_tool_calls(session, [ToolCall("c3", "payments_refund", {})], {"payments_refund": lambda: "ok"},
                      usage=recorder)  # the same shown tool, now working: that is what is learned
    assert [(e.query, e.called) for e in log] == [("customer wants money back for the card", "payments_refund")]


def test_a_growing_log_is_recompiled(index: ToolIndex) -> None:
    log = UsageLog()
    log.add("write to my accountant", "herramienta_correo")
    ranker = LearnedRanker(log, refresh_seconds=1e-9)
    first = ranker.snapshot()
    log.add("write a note to my accountant", "herramienta_correo")
    assert first.version != log.version
    deadline = time.monotonic() + 30
    while ranker.snapshot().version != log.version and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ranker.snapshot().version == log.version
    assert len(ranker.snapshot().votes) == 2


def test_similarity_is_the_cosine_of_the_words_and_only_shared_words_vote() -> None:
    log = UsageLog(privacy="tokens")
    log.add("refund the card charge", "payments_refund")
    log.add("weather in lisbon", "weather_now")
    for _ in range(3):  # repeats of one query are one past query with three successes
        log.add("send invoice", "mail_send")
    everyone = LearnedRanker(log, min_similarity=0.0, refresh_seconds=0)
    # a query sharing no word with a past query gets no vote from it, even with no similarity floor
    signal = everyone.signal("refund a card")
    assert set(signal.shares) == {"payments_refund"}
    vote = refund_vote(everyone, "refund a card")
    assert 0 < vote < 1 and signal.confidence == pytest.approx(vote / (1 + vote))
    # the same query as a past one is similarity 1: one vote of weight 1 per success
    assert everyone.signal("send invoice").confidence == pytest.approx(3 / 4)
    # a floor above the query's similarity to every past query leaves the backend alone
    assert not LearnedRanker(log, min_similarity=0.99, refresh_seconds=0).signal("refund a card")


def refund_vote(ranker: LearnedRanker, query: str) -> float:
    """The vote of the one past query sharing words with `query`: its TF-IDF cosine, squared."""
    snap = ranker.snapshot()
    terms = ranker.log.terms(query)
    past = ranker.log.terms("refund the card charge")
    shared = set(terms) & set(past)
    dot = sum(snap.idf_sq[t] for t in shared)
    q_norm = math.sqrt(sum(snap.idf_sq.get(t, snap.unknown_idf_sq) for t in terms))
    p_norm = math.sqrt(sum(snap.idf_sq[t] for t in past))
    return float((dot / (q_norm * p_norm)) ** 2)


# --- the prior, calibrated on the log's own shown lists ----------------------------------------


def refund_searches(log: UsageLog, count: int, shown: list[str]) -> None:
    """`count` distinct searches for a refund, each showing `shown` and then calling payments_refund."""
    when = ["today", "now", "please", "quickly", "again", "twice", "soon", "later"]
    why = ["broken", "late", "missing", "wrong", "damaged", "cancelled", "duplicate", "unwanted"]
    for i in range(count):
        log.add(f"customer wants the money back {when[i % 8]} {why[i // 8 % 8]}", "payments_refund", shown)


def test_a_log_whose_votes_beat_the_backend_is_trusted_and_lifts_its_tool(index: ToolIndex) -> None:
    log = UsageLog()
    refund_searches(log, 60, ["payments_charge", "mail_send"])  # the backend never showed it: the model searched again
    learned = learning(index, log)
    calibration = learned.ranker.calibration
    assert calibration is not None and calibration.searches == 60
    assert calibration.prior != math.inf
    chosen, off = (calibration.exponent, calibration.prior), (calibration.exponent, math.inf)
    assert calibration.ndcg[chosen] == 1.0 and calibration.ndcg[off] == 0.0
    assert index.search("customer wants the money back today", 5).names[0] != "payments_refund"
    assert learned.search("customer wants the money back today", 5).names[0] == "payments_refund"


def test_a_log_showing_the_backend_already_right_turns_learning_off(index: ToolIndex) -> None:
    log = UsageLog()
    refund_searches(log, 60, ["payments_refund", "payments_charge"])  # the backend's first hit was called each time
    learned = learning(index, log)
    calibration = learned.ranker.calibration
    assert calibration is not None and calibration.prior == math.inf  # votes add nothing: ties go to the backend
    assert calibration.exponent == 2.0
    assert not learned.ranker.signal("customer wants the money back")
    for query in QUERIES:
        assert same(learned.search(query, 5), index.search(query, 5))


def test_too_few_searches_keep_the_fixed_prior_and_a_number_overrides_calibration(index: ToolIndex) -> None:
    from toolsearch.learning import DEFAULT_PRIOR, MIN_CALIBRATION

    few = UsageLog()
    refund_searches(few, MIN_CALIBRATION - 1, ["payments_charge", "payments_refund"])
    ranker = LearnedRanker(few, refresh_seconds=0)
    assert ranker.calibration is None and ranker.snapshot().prior == DEFAULT_PRIOR
    unshown = UsageLog()  # entries without a shown list (direct log.add, older logs) cannot calibrate
    for i in range(2 * MIN_CALIBRATION):
        unshown.add(f"customer wants the money back case {i}", "payments_refund")
    assert len({e.terms for e in unshown.entries()}) == 2 * MIN_CALIBRATION
    assert LearnedRanker(unshown, refresh_seconds=0).calibration is None
    trusted = UsageLog()
    refund_searches(trusted, 60, ["payments_refund"])  # calibrates to inf, but a fixed prior wins
    fixed = LearnedRanker(trusted, prior=1.0, refresh_seconds=0)
    signal = fixed.signal("customer wants the money back today")
    assert signal and 0 < signal.confidence < 1


@pytest.mark.parametrize("privacy", ["tokens", "raw"])
def test_hashed_logs_calibrate_as_readable_ones_do(privacy: str) -> None:
    logs = [UsageLog(privacy="hashed"), UsageLog(privacy=privacy)]  # type: ignore[arg-type]
    for log in logs:
        refund_searches(log, 40, ["payments_charge", "payments_refund"])
        for i in range(40):
            log.add(f"mail the report to the team {'abcdefgh'[i % 8]} {'ijklm'[i // 8]}", "mail_send",
                    ["mail_send", "mail_draft"])
    hashed, readable = (LearnedRanker(log, refresh_seconds=0).calibration for log in logs)
    assert hashed is not None and readable is not None
    assert (hashed.exponent, hashed.prior) == (readable.exponent, readable.prior)
    assert hashed.ndcg == pytest.approx(readable.ndcg)


def test_the_mixture_keeps_the_backend_order_where_nothing_votes(index: ToolIndex) -> None:
    from toolsearch.learning import rank_score

    log = UsageLog()
    refund_searches(log, 60, ["payments_charge", "mail_send"])
    learned = learning(index, log)
    query = "customer wants the money back today"
    plain = index.search(query, 5).names
    result = learning(index, log).search(query, 5)
    assert result.names[0] == "payments_refund"
    # every tool without votes keeps its place relative to the others, scored by its rank alone
    rest = [n for n in result.names if n != "payments_refund"]
    assert rest == [n for n in plain if n != "payments_refund"][: len(rest)]
    signal = learned.ranker.signal(query)
    for hit in result.hits[1:]:
        assert hit.score == pytest.approx((1 - signal.confidence) * rank_score(plain.index(hit.name)))


# --- one vote per conversation -----------------------------------------------------------------

SPAM_QUERY = "weather forecast send email message"


def _honest_demo_log(index: ToolIndex) -> UsageLog:
    """The audit's honest log over the demo catalog: 120 searches whose called tool the backend ranked 3rd
    (so the calibration trusts the votes), then 30 users asking about the weather and calling the forecast."""
    log = UsageLog(index.catalog.hash)
    rnd = random.Random(0)
    for tool in rnd.sample(demo_tools(), 60):
        words = tool.description.split()[:6]
        for user in range(2):
            text = " ".join(rnd.sample(words, 4)) + f" please {user}"
            shown = [name for name in index.search(text, 10).names if name != tool.name]
            log.add(text, tool.name, [*shown[:2], tool.name, *shown[2:9]])
    for i in range(30):
        log.add(f"weather forecast for city {i}", "weather_get_forecast",
                ["weather_get_hourly_forecast", "weather_get_marine_forecast", "weather_get_forecast"])
    return log


@pytest.fixture(scope="module")
def demo_index() -> ToolIndex:
    return ToolIndex.build(demo_tools(), backend="bm25")


def _spam(recorder: UsageRecorder, index: ToolIndex, sessions: list[str]) -> None:
    """Each session in turn searches SPAM_QUERY and calls email_send_message, which that search showed."""
    shown = index.search(SPAM_QUERY, 10).names
    assert "email_send_message" in shown
    for session in sessions:
        recorder.record_search(session, SPAM_QUERY, shown)
        assert recorder.record_call(session, "email_send_message", ok=True) is not None


def test_one_conversation_repeating_a_search_and_call_does_not_take_over_the_ranking(demo_index: ToolIndex) -> None:
    query = "weather forecast for paris tomorrow"
    log = _honest_demo_log(demo_index)
    learned = learning(demo_index, log)
    assert learned.search(query, 3).names[0] == "weather_get_forecast"
    # Before: 300 repeats by one client were 300 votes and put email_send_message first for everyone
    _spam(UsageRecorder(log), demo_index, ["mallory"] * 300)
    assert len(log) == 150 + 300
    assert learned.search(query, 3).names[0] == "weather_get_forecast"
    spam_key = log.terms(SPAM_QUERY)
    snap = learned.ranker.snapshot()
    keys = list(dict.fromkeys(e.terms for e in log.entries()))
    assert snap.votes[keys.index(spam_key)] == (("email_send_message",), (1.0,))


def test_many_conversations_still_count_each(demo_index: ToolIndex) -> None:
    log = _honest_demo_log(demo_index)
    learned = learning(demo_index, log)
    _spam(UsageRecorder(log), demo_index, [f"user-{i}" for i in range(300)])
    snap = learned.ranker.snapshot()
    keys = list(dict.fromkeys(e.terms for e in log.entries()))
    assert snap.votes[keys.index(log.terms(SPAM_QUERY))] == (("email_send_message",), (300.0,))
    assert len({e.by for e in log.entries() if e.by is not None}) == 300
    # real popularity still lifts its tool
    assert learned.search("weather forecast for paris tomorrow", 3).names[0] == "email_send_message"


def test_entries_without_a_voter_count_each_as_before(index: ToolIndex) -> None:
    log = UsageLog()
    for _ in range(3):
        log.add("send invoice", "mail_send")  # no `by`: older logs, the benchmarks
    log.add("send invoice", "mail_send", by="aaaa")
    log.add("send invoice", "mail_send", by="aaaa")
    log.add("send invoice", "mail_send", by="bbbb")
    log.add("send invoice", "mail_draft", by="aaaa")  # one voter, but another tool: its own vote
    assert learning(index, log).ranker.snapshot().votes == [(("mail_send", "mail_draft"), (5.0, 1.0))]
