"""A usage entry whose shown list names a tool twice (an imported or hand-made log) is read as the list it means."""

from __future__ import annotations

from toolsearch import Tool, ToolIndex
from toolsearch.learning import LearnedRanker, LearningIndex
from toolsearch.usage import UsageLog

TOOLS = [Tool("email_send_message", "Send an email message."), Tool("weather_get_forecast", "Weather forecast."),
         Tool("calendar_create_event", "Create a calendar event.")]


def test_a_shown_list_that_names_a_tool_twice_does_not_break_learned_search() -> None:
    index = ToolIndex.build(TOOLS, backend="bm25")
    log = UsageLog(index.catalog.hash)
    for i in range(60):  # enough searches with a shown list for the calibration to run
        log.add(f"send the report to person {i}", "email_send_message",
                shown=["weather_get_forecast", "email_send_message", "weather_get_forecast"])
    # Before: every learned search raised ValueError (a matmul of mismatched sizes) once 50 such entries were in
    ranker = LearnedRanker(log, refresh_seconds=0)
    assert ranker.calibration is not None
    assert LearningIndex(index, ranker).search("send the report to person 7", 2).names[0] == "email_send_message"
