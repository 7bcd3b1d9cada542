"""One conversation cannot steer learned ranking for everyone by rewording its searches: only its nearest request
votes for a tool, and in the calibration its searches count once and are scored by other conversations' votes."""

from __future__ import annotations

import pytest

from toolsearch import Tool, ToolIndex
from toolsearch.learning import LearnedRanker, LearningIndex
from toolsearch.usage import UsageLog, UsageRecorder

TOOLS = [
    Tool("email_send_message", "Send an email message to a recipient with a subject and body."),
    Tool("weather_get_forecast", "Get the weather forecast for a city for the next days."),
    Tool("repo_delete", "Permanently delete a code repository."),
    Tool("calendar_create_event", "Create a calendar event at a date and time."),
    Tool("hr_request_time_off", "Request time off from work (leave) for some dates."),
]
VICTIM = "send an email to my manager"
FILLERS = ["please", "now", "quickly", "today", "asap", "kindly", "again", "urgently", "soon", "later",
           "thanks", "ok", "right away", "first", "also"]


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    return ToolIndex.build(TOOLS, backend="bm25")


def _attack(recorder: UsageRecorder, index: ToolIndex, wordings: list[str]) -> None:
    """One conversation searches each wording and then calls repo_delete, which each of its searches showed."""
    for text in wordings:
        shown = index.search(text + " delete repository", 5).names
        assert "repo_delete" in shown
        recorder.record_search("attacker-1", text, shown)
        assert recorder.record_call("attacker-1", "repo_delete", ok=True) is not None


def test_one_conversation_rewording_its_search_cannot_lift_a_tool_over_other_conversations(index: ToolIndex) -> None:
    log = UsageLog(index.catalog.hash)
    recorder = UsageRecorder(log)
    learning = LearningIndex(index, LearnedRanker(log, refresh_seconds=0))
    for user in range(5):  # five honest conversations: the request, and the right tool
        recorder.record_search(f"user-{user}", VICTIM, index.search(VICTIM, 5).names)
        recorder.record_call(f"user-{user}", "email_send_message", ok=True)
    # Before: each of the 30 wordings was a full vote, and repo_delete came first for everyone's request
    _attack(recorder, index, [f"{VICTIM} {a}{b}" for a in FILLERS[:10] for b in ["", " thanks", " ok"]])
    assert learning.search(VICTIM, 3).names[0] == "email_send_message"
    assert learning.search("email my manager", 3).names[0] == "email_send_message"


def test_a_conversations_votes_for_one_tool_add_up_to_one_vote(index: ToolIndex) -> None:
    log = UsageLog(index.catalog.hash)
    recorder = UsageRecorder(log)
    wordings = [f"{VICTIM} {a}" for a in FILLERS[:8]]
    _attack(recorder, index, wordings)
    _attack(recorder, index, wordings[:1])  # a repeat of one request adds nothing
    log.add(VICTIM, "repo_delete")  # an entry without a voter counts alone, as before
    snap = LearnedRanker(log, refresh_seconds=0).snapshot()
    votes = [dict(zip(tools, counts, strict=True)).get("repo_delete", 0.0) for tools, counts in snap.votes]
    # before: 1 each; now the conversation's eight requests for the tool are kept apart, and only the nearest of
    # them votes for a query
    assert votes[:8] == [0.0] * 8 and sum(votes) == 1.0
    assert [len(snap.several[key_id][0]) for key_id in range(8)] == [1] * 8
    pairs = {(int(t), int(v)) for tools, voters in snap.several.values() for t, v in zip(tools, voters, strict=True)}
    assert len(pairs) == 1 and snap.several_tools == ("repo_delete",)  # one (tool, voter)
    # for the request itself, the conversation's eight similar wordings carry less than the one identical entry
    signal = LearnedRanker(log, prior=1.0, refresh_seconds=0).signal(VICTIM)
    assert signal.shares == {"repo_delete": 1.0}
    total = signal.confidence / (1 - signal.confidence)  # V / (V + 1) = c  ->  V = c / (1 - c)
    assert 1.0 < total <= 2.0


def test_one_conversation_cannot_make_the_calibration_sample_its_own(index: ToolIndex) -> None:
    log = UsageLog(index.catalog.hash)
    recorder = UsageRecorder(log)
    ranker = LearnedRanker(log, refresh_seconds=0)
    learning = LearningIndex(index, ranker)
    honest = [("send an email to {}", "email_send_message"), ("weather forecast for {}", "weather_get_forecast"),
              ("book a calendar event with {}", "calendar_create_event"),
              ("request time off on {}", "hr_request_time_off")]
    words = ["ana", "bob", "lisbon", "paris", "monday", "friday", "the team", "my manager", "carol", "dave", "erin",
             "frank", "grace", "heidi", "ivan"]
    n = 0
    for word in words:  # 60 conversations whose tool the backend ranked first: learning is off
        for pattern, tool in honest:
            text = pattern.format(word)
            recorder.record_search(f"user-{n}", text, index.search(text, 5).names)
            recorder.record_call(f"user-{n}", tool, ok=True)
            n += 1
    assert ranker.calibration is not None and ranker.calibration.prior == float("inf")
    suffixes = ["", " thanks", " ok", " pls", " now", " fast", " today", " again"]
    _attack(recorder, index, [f"send an email to {a}{b}" for a in FILLERS for b in suffixes])
    # Before: its 120 searches were the newest 120 of the sample, the calibration trusted the votes (prior 16) and
    # repo_delete came second for everyone's 'send an email to my manager'
    calibration = ranker.calibration
    assert calibration is not None and calibration.prior == float("inf")
    # its searches fill the sample's room (over 100 of them), yet count once in all, scored by the other
    # conversations' votes alone: its own rewordings cannot vouch for its calls
    assert calibration.searches > 60 + 100
    assert learning.search(VICTIM, 3).names == index.search(VICTIM, 3).names


def test_many_conversations_each_rewording_still_count_each(index: ToolIndex) -> None:
    # The bound is per conversation: distinct conversations calling a tool after their own wordings each count one
    log = UsageLog(index.catalog.hash)
    recorder = UsageRecorder(log)
    for user, filler in enumerate(FILLERS):
        text = f"{VICTIM} {filler}"
        shown = index.search(text + " delete repository", 5).names
        recorder.record_search(f"user-{user}", text, shown)
        recorder.record_call(f"user-{user}", "repo_delete", ok=True)
    snap = LearnedRanker(log, refresh_seconds=0).snapshot()
    assert [counts for _, counts in snap.votes] == [(1.0,)] * len(FILLERS)


def test_a_long_lived_conversation_keeps_a_full_vote_for_each_of_its_requests(index: ToolIndex) -> None:
    # One session for everything (a stdio gateway, a chat app's session per user): its different requests for one
    # tool each vote for it in full where they are the nearest; a split over them left learning almost off there
    log = UsageLog(index.catalog.hash)
    recorder = UsageRecorder(log)
    for text in [VICTIM, "mail the quarterly report to ana", "write to the team about friday"]:
        recorder.record_search("one-session", text, index.search(text, 5).names)
        recorder.record_call("one-session", "email_send_message", ok=True)
    signal = LearnedRanker(log, prior=1.0, refresh_seconds=0).signal(VICTIM)
    total = signal.confidence / (1 - signal.confidence)
    assert signal.shares == {"email_send_message": 1.0} and total == pytest.approx(1.0)


def test_a_log_of_one_long_lived_conversation_is_calibrated(index: ToolIndex) -> None:
    log = UsageLog(index.catalog.hash)
    recorder = UsageRecorder(log)
    ranker = LearnedRanker(log, refresh_seconds=0)
    subjects = ["ana", "bob", "lisbon", "paris", "monday", "friday", "the team", "my manager", "carol", "dave",
                "erin", "frank", "grace", "heidi", "ivan"]
    for subject in subjects:
        for text, tool in [(f"send an email to {subject}", "email_send_message"),
                           (f"weather forecast for {subject}", "weather_get_forecast"),
                           (f"book a calendar event with {subject}", "calendar_create_event"),
                           (f"request time off on {subject}", "hr_request_time_off")]:
            recorder.record_search("one-session", text, index.search(text, 5).names)
            recorder.record_call("one-session", tool, ok=True)
    # its 60 searches fill the sample (no other voter's are left out for them): the log is calibrated, as before
    assert ranker.calibration is not None and ranker.calibration.searches == 60
