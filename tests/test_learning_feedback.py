"""Learning fed by its own served results: the log keeps the backend's order, so learning stays on; notes; settings."""

from __future__ import annotations

import itertools
import math

import pytest

from toolsearch import InvalidArgumentError, Tool, ToolIndex, ToolSearchError
from toolsearch.executor import handle_tool_calls
from toolsearch.learning import CALIBRATION_SAMPLE, LearnedRanker, LearnedSearchResult, LearningIndex
from toolsearch.providers import ToolCall
from toolsearch.session import SessionManager
from toolsearch.usage import UsageLog, UsageRecorder

LEAVE_TOOLS = [
    Tool("hr_request_time_off", "Submit a PTO request (paid leave) for an employee between two dates"),
    Tool("comments_leave_note", "Leave a comment or note on a document"),
    Tool("calendar_week_view", "Show the calendar week from monday to sunday"),
    Tool("weather_get_forecast", "Weather forecast for a city, next week or today"),
    Tool("email_send_message", "Send an email message, please include a subject"),
]
VERBS = ["put me on leave", "book leave", "take leave", "request leave", "go on leave", "annual leave",
         "sick leave", "need leave", "leave request", "parental leave", "unpaid leave"]
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
FILLERS = ["please", "asap", "thanks", "kindly", "urgently"]
# Distinct requests for time off, most of which the backend ranks the note-taking tool above (for "leave").
REQUESTS = [f"{verb} {day} {' '.join(words)}".strip()
            for size in range(len(FILLERS) + 1) for words in itertools.combinations(FILLERS, size)
            for verb, day in itertools.product(VERBS, DAYS)]
PROBE = "book leave friday"


def _serve(sessions: SessionManager, recorder: UsageRecorder, requests: list[str], start: int) -> int:
    """Each request in a conversation of its own, through the executor: a tool_search, then the call of the time-off
    tool (as `toolsearch.run` and `handle_tool_calls` feed a recorder). Returns how often it was shown first."""
    first = 0
    hr = {"hr_request_time_off": lambda: "requested"}
    for n, words in enumerate(requests, start):
        session = sessions.create(f"user-{n}")
        found, called = handle_tool_calls(
            session, [ToolCall(f"s{n}", "tool_search", {"query": words}), ToolCall(f"c{n}", "hr_request_time_off", {})],
            hr, usage=recorder,
        )
        assert found.search is not None and called.status.value == "ok"
        first += found.search.names[0] == "hr_request_time_off"
    return first


def test_learning_stays_on_once_the_newest_searches_were_served_with_learning() -> None:
    # Before: the executor recorded the learned order as what each search showed. Once the newest 1,000 searches had
    # been served with learning (the time-off tool first each time), the calibration read that as "the backend ranks
    # the called tool first already", chose prior=inf and turned learning off: the probe fell back to the backend's
    # wrong order (and the next compile, fed the backend's order again, turned it back on).
    index = ToolIndex.build(LEAVE_TOOLS, backend="bm25")
    assert index.search(PROBE, 3).names[0] == "comments_leave_note"
    log = UsageLog(index.catalog.hash)
    ranker = LearnedRanker(log, refresh_seconds=3600)  # compiled below, when the test says so
    learning = LearningIndex(index, ranker)
    recorder = UsageRecorder(log)

    _serve(SessionManager(index), recorder, REQUESTS[:300], 0)  # the backend alone: learning has its evidence
    ranker._compile()
    assert ranker.calibration is not None and ranker.calibration.prior != math.inf
    assert learning.search(PROBE, 3).names[0] == "hr_request_time_off"

    served = 300
    for size in (300, CALIBRATION_SAMPLE):  # then served with learning, compiled as the background refresh does
        batch = REQUESTS[served:served + size]
        first = _serve(SessionManager(learning), recorder, batch, served)
        if size == CALIBRATION_SAMPLE:  # every search the calibration samples now showed the called tool first
            assert first == len(batch)
        served += size
        ranker._compile()
        assert ranker.calibration is not None and ranker.calibration.prior != math.inf, ranker.calibration
        assert learning.search(PROBE, 3).names[0] == "hr_request_time_off"
    # what the log holds for the searches learning served: the backend's own order, not the one the model saw
    newest = log.entries()[-CALIBRATION_SAMPLE:]
    assert sum(e.shown[0] == "comments_leave_note" for e in newest) > CALIBRATION_SAMPLE // 2
    assert all(e.shown == tuple(index.search(q, 5).names) for e, q in zip(newest[:20], REQUESTS[600:620], strict=True))


def test_a_learned_result_keeps_the_backends_order_and_a_plain_one_is_the_backends() -> None:
    index = ToolIndex.build(LEAVE_TOOLS, backend="bm25")
    log = UsageLog(index.catalog.hash)
    for i in range(5):
        log.add(PROBE, "hr_request_time_off", index.search(PROBE, 5).names, by=f"voter-{i}")
    learned = LearningIndex(index, LearnedRanker(log, refresh_seconds=0)).search(PROBE, 5)
    assert isinstance(learned, LearnedSearchResult)
    assert learned.names[0] == "hr_request_time_off"
    assert learned.ranked == tuple(index.search(PROBE, 5).names)
    unrelated = LearningIndex(index, LearnedRanker(log, refresh_seconds=0)).search("weather in lisbon", 5)
    assert not isinstance(unrelated, LearnedSearchResult)  # nothing voted: the plain result, as before


def test_record_run_records_the_backends_order_of_a_learned_search() -> None:
    import toolsearch
    from toolsearch.providers import ScriptedModel, call, search

    index = ToolIndex.build(LEAVE_TOOLS, backend="bm25")
    log = UsageLog(index.catalog.hash, privacy="raw")
    for i in range(5):
        log.add(PROBE, "hr_request_time_off", index.search(PROBE, 5).names, by=f"voter-{i}")
    sessions = SessionManager(LearningIndex(index, LearnedRanker(log, refresh_seconds=0)))
    result = toolsearch.run(
        ScriptedModel([search("book leave on friday"), call("hr_request_time_off"), "Done."]), "Friday off",
        session=sessions.create("run"), functions={"hr_request_time_off": lambda: "requested"},
    )
    assert result.searches[0].names[0] == "hr_request_time_off"  # what the model saw: learning's order
    assert UsageRecorder(log).record_run(result) == 1
    assert log.entries()[-1].shown == tuple(index.search("book leave on friday", 5).names)


# --- notes on a result learning leads ---------------------------------------------------------


def test_a_learned_top_hit_drops_the_backends_weak_match_note() -> None:
    # Before: the learned result kept the backend's "the best match scores 0.07, a weak match ... rephrase it" note,
    # quoting a score that was not the top hit's: the model was told to rephrase a request learning had answered.
    tools = [Tool("hr_request_time_off", "Submit a PTO request for an employee between two dates"),
             Tool("weather_get_forecast", "Weather forecast for a city"),
             Tool("email_send_message", "Send an email message to a recipient"),
             Tool("calendar_create_event", "Create a calendar event")]
    index = ToolIndex.build(tools, backend="vector")  # the real model: the weak-match note is on its scale
    query = "my granny is poorly and I must fly to her tomorrow"
    plain = index.search(query, 3)
    assert plain.names[0] != "hr_request_time_off" and any("weak match" in note for note in plain.notes)
    log = UsageLog(index.catalog.hash)
    for i in range(10):
        log.add(query, "hr_request_time_off", plain.names, by=f"voter-{i}")
    learned = LearningIndex(index, LearnedRanker(log, refresh_seconds=0)).search(query, 3)
    assert learned.names[0] == "hr_request_time_off"
    assert not any("weak match" in note for note in learned.notes), learned.notes
    # a learned hit that does not lead keeps the backend's judgement of its own best hit
    weak = UsageLog(index.catalog.hash)
    weak.add("fly to granny", "hr_request_time_off", plain.names)
    kept = LearningIndex(index, LearnedRanker(weak, prior=100.0, refresh_seconds=0)).search(query, 3)
    assert kept.names[0] == plain.names[0] and kept.notes == plain.notes


def test_notes_on_the_request_go_with_learnings_lead_and_notes_on_the_query_stay() -> None:
    index = ToolIndex.build(LEAVE_TOOLS, backend="bm25")
    cases = [
        # about how well a foreign request was served: "the tools found may not fit it" -- learning says they do
        ("Ich will leave nehmen, bitte für die ganze Woche", "looks German", False),
        # about how the query was read (its syntax): still true of the learned result
        ("book AND (leave OR friday", "query syntax not understood", True),
    ]
    for query, note, stays in cases:
        plain = index.search(query, 3)
        assert plain.names and any(note in n for n in plain.notes), plain.notes
        log = UsageLog(index.catalog.hash)
        for i in range(5):
            log.add(query, "hr_request_time_off", plain.names, by=f"voter-{i}")
        learned = LearningIndex(index, LearnedRanker(log, refresh_seconds=0)).search(query, 3)
        assert learned.names[0] == "hr_request_time_off"
        assert any(note in n for n in learned.notes) is stays, learned.notes


# --- LearnedRanker's settings -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value", "said"),
    [
        ("prior", -1.0, "prior must be None .* or a number of 0 or more"),
        ("prior", math.nan, "prior must be"),
        ("weight", math.nan, "weight must be a finite number above 0"),
        ("weight", -0.5, "weight must be a finite number above 0"),
        ("weight", math.inf, "weight must be a finite number above 0"),
        ("neighbours", -3, "neighbours must be 1 or more"),
        ("neighbours", 0, "neighbours must be 1 or more"),
        ("min_similarity", 1.5, "min_similarity must be from 0 to 1"),
        ("min_similarity", math.nan, "min_similarity must be from 0 to 1"),
        ("refresh_seconds", -1, "refresh_seconds must be 0 or more"),
    ],
)
def test_a_ranker_setting_out_of_range_is_refused_naming_it(setting: str, value: float, said: str) -> None:
    # Before: prior=-1 divided by zero at the first search, weight=nan gave NaN scores in no order, prior=-0.5
    # reordered silently, neighbours=-3 failed inside numpy.
    with pytest.raises(InvalidArgumentError, match=f"LearnedRanker's {said}"):
        LearnedRanker(UsageLog(), **{setting: value})


@pytest.mark.parametrize(("setting", "value"), [("prior", "1"), ("weight", True), ("neighbours", 2.5)])
def test_a_ranker_setting_of_the_wrong_kind_is_refused(setting: str, value: object) -> None:
    with pytest.raises(ToolSearchError, match=f"{setting} must be a"):
        LearnedRanker(UsageLog(), **{setting: value})  # type: ignore[arg-type]


def test_the_settings_in_range_are_taken() -> None:
    for settings in ({"prior": 0.0}, {"prior": math.inf}, {"prior": None}, {"min_similarity": 0.0},
                     {"min_similarity": 1}, {"refresh_seconds": 0}, {"neighbours": 1}, {"weight": 2}):
        LearnedRanker(UsageLog(), **settings)  # type: ignore[arg-type]
