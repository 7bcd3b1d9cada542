"""The run so far (`exc.partial`) of a run stopped while its tools ran resumes as the next prompt.

A run interrupted while its tools run (Ctrl-C, a cancelled task, a failing session store) answers each running
call with a SKIPPED result saying whether it ran is unknown, so its messages are a history every provider takes:
through the real `openai` / `anthropic` / `google-genai` clients against the strict fake server, which refuses a
call without its result as the APIs do. A prompt that holds a call without a result is refused before anything
is sent, naming the message.
"""

from __future__ import annotations

import json

import pytest
from fakes import FakeLLMServer, Turn
from fakes.e2e import make_model

from toolsearch import InvalidArgumentError, SessionManager, Tool, ToolIndex, run
from toolsearch.executor import ResultStatus
from toolsearch.providers import Message, ToolCall
from toolsearch.session import Session


def session() -> Session:
    return SessionManager(ToolIndex.build([Tool("get_weather", "Weather for a city.")], backend="regex")).create("s")


def interrupted(city: str) -> str:
    raise KeyboardInterrupt  # Ctrl-C while the tool runs


@pytest.mark.parametrize("kind", ["openai_chat", "openai_responses", "anthropic", "gemini"])
def test_the_run_so_far_of_an_interrupted_run_resumes(kind: str) -> None:
    with FakeLLMServer(Turn(tool_calls=[("get_weather", {"city": "Porto"})]), "Sunny in Porto.") as server:
        model, chat = make_model(kind, server), session()
        with pytest.raises(KeyboardInterrupt) as raised:
            run(model, "Weather in Porto?", session=chat, functions={"get_weather": interrupted}, tool_search="off",
                tool_timeout=None)
        partial = raised.value.partial  # type: ignore[attr-defined]
        assert [m.role for m in partial.messages] == ["user", "assistant", "tool"]
        [unknown] = partial.tool_results
        assert unknown.status is ResultStatus.SKIPPED and unknown.call == partial.messages[1].tool_calls[0]
        resumed = run(model, [*partial.messages, "Please go on."], session=chat,
                      functions={"get_weather": lambda city: "sunny"}, tool_search="off")
        assert resumed.output == "Sunny in Porto."
        assert "Unknown whether this call ran" in json.dumps(server.requests[-1].body)


def test_a_prompt_with_a_call_no_result_answers_is_refused_before_any_request() -> None:
    weather = ToolCall("call_1", "get_weather", {"city": "Porto"})
    time = ToolCall("call_2", "get_time", {})
    prompt = [Message.user("Weather?"), Message.assistant("", [weather, time]), Message.tool(time, "12:00"),
              Message.user("Please go on.")]
    with FakeLLMServer() as server:
        with pytest.raises(InvalidArgumentError, match=(
            r"^the prompt's message 1 holds a call of tool 'get_weather' \(call id 'call_1'\) that no later tool "
            "result answers; providers refuse a call without its result"
        )):
            run(make_model("openai_chat", server), prompt, session=session(), tool_search="off")
        assert server.requests == []


def test_results_matched_by_name_answer_calls_without_ids() -> None:
    """A Gemini-shaped history: its results name their tool, and carry no call id."""
    first, second = ToolCall("", "get_weather", {"city": "Porto"}), ToolCall("", "get_weather", {"city": "Oslo"})
    prompt = [
        Message.user("Weather in Porto and Oslo?"),
        Message.assistant("", [first, second]),
        Message("tool", "sunny", name="get_weather"),
        Message("tool", "rain", name="get_weather"),
        Message.user("And now?"),
    ]
    with FakeLLMServer("Still the same.") as server:
        model = make_model("gemini", server)
        assert run(model, prompt, session=session(), tool_search="off").output == "Still the same."
        with pytest.raises(InvalidArgumentError, match="message 1 holds a call of tool 'get_weather'"):
            run(model, prompt[:3] + prompt[4:], session=session(), tool_search="off")
