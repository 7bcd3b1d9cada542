"""How a run that does not end in an answer ends: a guard's output, and a failure that keeps the run so far."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fakes.loop_tools import SENT, send_email, sessions_over, weather_forecast

from toolsearch import ProviderError
from toolsearch.loop import LoopOutcome, ResultStatus, arun, run
from toolsearch.providers import ScriptedModel, call, reply, search
from toolsearch.session import SessionManager

FUNCTIONS = {f.__name__: f for f in (weather_forecast, send_email)}
EMAIL = call("send_email", to="bob@example.com", subject="Hi", body="Hello")


@pytest.fixture()
def sessions() -> SessionManager:
    return sessions_over(FUNCTIONS)


# --- a guard's output ---------------------------------------------------------------------------------


def test_the_iteration_limit_never_passes_interim_text_off_as_the_answer(sessions: SessionManager) -> None:
    model = ScriptedModel([reply(search("send email", 1), text="Sure, I'll email Bob now."), EMAIL, "Done."])
    result = run(model, "Email Bob", session=sessions.create("s"), functions=FUNCTIONS, max_iterations=1)
    assert result.outcome is LoopOutcome.MAX_ITERATIONS
    assert result.output == (
        "The run stopped after 1 model request(s), before the model gave an answer "
        "(max_iterations=1 reached while it still called tools)."
    )


def test_the_repeated_call_guard_says_the_run_stopped(sessions: SessionManager) -> None:
    weather = reply(call("weather_forecast", city="Oslo"), text="Checking the weather again.")
    model = ScriptedModel([reply(search("weather forecast", 1), text="Let me look."), weather, weather, weather])
    result = run(model, "Weather?", session=sessions.create("s"), functions=FUNCTIONS, max_identical_calls=2)
    assert result.outcome is LoopOutcome.REPEATED_CALL
    assert result.output == (
        "The run stopped after 4 model request(s), before the model gave an answer "
        "(it repeated an identical tool call more than max_identical_calls=2 times)."
    )


# --- a failure keeps the run so far -------------------------------------------------------------------


def test_a_provider_error_after_a_side_effect_keeps_the_run_on_the_exception(sessions: SessionManager) -> None:
    # The scripted model has no third turn: its third request fails with a ProviderError, as an overloaded API would.
    model = ScriptedModel([search("send email", 1), EMAIL])
    with pytest.raises(ProviderError, match="has only 2 turn") as raised:
        run(model, "Email Bob", session=sessions.create("s"), functions=FUNCTIONS)
    assert SENT == ["bob@example.com"]
    partial = raised.value.partial  # type: ignore[attr-defined]
    assert partial.outcome is LoopOutcome.ERROR and partial.session_id == "s"
    assert partial.output.startswith("The run failed with ProviderError after 2 model request(s): the scripted model")
    assert [(r.call.name, r.status) for r in partial.tool_results] == [
        ("tool_search", ResultStatus.SEARCH),
        ("send_email", ResultStatus.OK),
    ]
    assert [s.query for s in partial.searches] == ["send email"] and len(partial.requests) == 2
    assert [m.role for m in partial.messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert raised.value.__notes__ == [
        "toolsearch: the run of session 's' failed after 2 answered model request(s); 2 tool call(s) had run "
        "before it ('send_email', 'tool_search'); exc.partial holds the run so far (messages, tool_results, "
        "searches, requests)"
    ]
    partial.to_dict()  # the record is a LoopResult like any other


def test_a_handler_that_raises_under_arun_keeps_the_run_too(sessions: SessionManager) -> None:
    class Disconnected(Exception):
        pass

    def on_text(piece: str) -> None:
        if "Bob" in piece:
            raise Disconnected("the client went away")

    model = ScriptedModel([search("send email", 1), EMAIL, "Emailed Bob."])
    with pytest.raises(Disconnected) as raised:
        asyncio.run(arun(model, "Email Bob", session=sessions.create("s"), functions=FUNCTIONS, on_text=on_text))
    partial = raised.value.partial  # type: ignore[attr-defined]
    assert SENT == ["bob@example.com"] and len(partial.requests) == 2 and partial.tool_results[-1].content == (
        "sent to bob@example.com"
    )
    assert "2 tool call(s) had run" in raised.value.__notes__[0]


def test_a_failure_while_calls_run_says_they_were_running(sessions: SessionManager) -> None:
    def on_augment(tool: str, values: Any, call_id: str) -> None:
        raise RuntimeError("audit log unavailable")

    reason = {"type": "object", "properties": {"reason": {"type": "string"}}}
    model = ScriptedModel([search("send email", 1), call("send_email", dict(EMAIL.arguments), reason="asked"), "x"])
    with pytest.raises(RuntimeError, match="audit log unavailable") as raised:
        run(model, "Email Bob", session=sessions.create("s"), functions=FUNCTIONS, augment=reason,
            on_augment=on_augment)
    assert SENT == []
    note = raised.value.__notes__[0]
    assert "1 tool call(s) had run before it ('tool_search')" in note
    assert "the 1 call(s) of request 2 ('send_email') were running: whether they ran is unknown" in note
    *_, calls, answer = raised.value.partial.messages  # type: ignore[attr-defined]
    assert calls.tool_calls[0].name == "send_email"  # answered, so the partial record resumes as a prompt
    assert answer.role == "tool" and answer.tool_call_id == calls.tool_calls[0].id
    assert answer.content.startswith("Unknown whether this call ran: the run failed while it was running.")


# --- an interrupted or cancelled run keeps the run so far too -----------------------------------------


def test_a_keyboard_interrupt_from_a_handler_keeps_the_run_and_is_raised_as_is(sessions: SessionManager) -> None:
    interrupt = KeyboardInterrupt()

    def on_text(piece: str) -> None:
        if "Bob" in piece:
            raise interrupt  # Ctrl-C while the answer streams, after the e-mail went out

    model = ScriptedModel([search("send email", 1), EMAIL, "Emailed Bob."])
    with pytest.raises(KeyboardInterrupt) as raised:
        run(model, "Email Bob", session=sessions.create("s"), functions=FUNCTIONS, on_text=on_text)
    assert raised.value is interrupt  # the same exception, never swallowed nor replaced
    partial = raised.value.partial  # type: ignore[attr-defined]
    assert partial.outcome is LoopOutcome.ERROR and SENT == ["bob@example.com"]
    assert [(r.call.name, r.status) for r in partial.tool_results][-1] == ("send_email", ResultStatus.OK)
    assert partial.output == "The run was interrupted by KeyboardInterrupt after 2 model request(s)"
    assert raised.value.__notes__[0].startswith(
        "toolsearch: the run of session 's' was interrupted (KeyboardInterrupt) after 2 answered model request(s); "
        "2 tool call(s) had run before it ('send_email', 'tool_search')"
    )


def test_a_keyboard_interrupt_while_a_tool_runs_says_the_call_was_running(sessions: SessionManager) -> None:
    def weather_forecast(city: str, days: int = 3) -> str:
        raise KeyboardInterrupt  # Ctrl-C lands while the tool runs in the caller's thread

    model = ScriptedModel([search("weather forecast", 1), call("weather_forecast", city="Oslo"), "Sunny."])
    with pytest.raises(KeyboardInterrupt) as raised:
        run(model, "Weather?", session=sessions.create("s"), functions={"weather_forecast": weather_forecast},
            tool_timeout=None)
    note = raised.value.__notes__[0]
    assert "the 1 call(s) of request 2 ('weather_forecast') were running: whether they ran is unknown" in note
    partial = raised.value.partial  # type: ignore[attr-defined]
    assert partial.messages[-2].tool_calls[0].name == "weather_forecast"
    assert (partial.tool_results[-1].status, partial.tool_results[-1].content) == (
        ResultStatus.SKIPPED,
        "Unknown whether this call ran: the run was interrupted (KeyboardInterrupt) while it was running. Check its "
        "effect before calling it again.",
    )


def test_a_run_cancelled_while_a_tool_awaits_keeps_the_run_and_stays_cancelled(sessions: SessionManager) -> None:
    waiting = asyncio.Event()

    async def weather_forecast(city: str, days: int = 3) -> str:
        waiting.set()
        await asyncio.Event().wait()  # a slow upstream: the run is cancelled while it waits
        return "sunny"

    functions = {**FUNCTIONS, "weather_forecast": weather_forecast}
    model = ScriptedModel([search("weather forecast", 1), call("weather_forecast", city="Oslo"), "Sunny."])

    async def cancel_midway() -> asyncio.CancelledError:
        task = asyncio.create_task(arun(model, "Weather?", session=sessions.create("s"), functions=functions))
        await waiting.wait()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError as cancelled:
            return cancelled
        raise AssertionError("the cancelled run returned")

    cancelled = asyncio.run(cancel_midway())
    partial = cancelled.partial  # type: ignore[attr-defined]
    assert partial.outcome is LoopOutcome.ERROR and len(partial.requests) == 2
    assert [(r.call.name, r.status) for r in partial.tool_results] == [
        ("tool_search", ResultStatus.SEARCH), ("weather_forecast", ResultStatus.SKIPPED)  # running: answered as such
    ]
    note = cancelled.__notes__[0]
    assert "was interrupted (CancelledError) after 2 answered model request(s)" in note
    assert "the 1 call(s) of request 2 ('weather_forecast') were running" in note
