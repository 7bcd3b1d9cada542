"""What a run is given, checked before anything is sent: the prompt, an existing session's tools, `functions`."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from fakes.loop_tools import SENT, create_issue, send_email, sessions_over, weather_forecast

from toolsearch import InvalidArgumentError, SessionError, Tool, ToolIndex
from toolsearch.loop import ResultStatus, ToolSearchLoop, run
from toolsearch.providers import Message, ScriptedModel, call, search
from toolsearch.session import SessionManager

FUNCTIONS = {f.__name__: f for f in (weather_forecast, send_email, create_issue)}


@pytest.fixture()
def sessions() -> SessionManager:
    return sessions_over(FUNCTIONS)


# --- an existing session's allowed and pinned tools --------------------------------------------------


def test_a_revoked_tool_is_refused_not_kept_callable(sessions: SessionManager) -> None:
    loop = ToolSearchLoop(ScriptedModel(policy=lambda request: "ok"), sessions, FUNCTIONS)
    loop.run("hi", session_id="tenant-1", allowed=["weather_forecast", "send_email"])
    emailing = ToolSearchLoop(
        ScriptedModel([search("send email", 1), call("send_email", to="a@b", subject="s", body="b"), "done"]),
        sessions,
        FUNCTIONS,
    )

    with pytest.raises(SessionError) as refused:
        emailing.run("email", session_id="tenant-1", allowed=["weather_forecast"])
    message = str(refused.value)
    assert "session 'tenant-1' already exists" in message
    assert "the stored session also allows 'send_email'" in message
    assert "sessions.close('tenant-1')" in message and "call without allowed=" in message
    assert SENT == [] and sessions.get("tenant-1").allowed == {"weather_forecast", "send_email"}


def test_pins_a_run_passes_are_added_and_pins_made_between_runs_are_kept(sessions: SessionManager) -> None:
    loop = ToolSearchLoop(ScriptedModel(policy=lambda request: "ok"), sessions, FUNCTIONS)
    loop.run("hi", session_id="s", pinned=["create_issue"])
    sessions.get("s").pin(["weather_forecast"])  # the documented way to change pins between runs
    loop.run("hi", session_id="s", pinned=["create_issue"])  # the same pins on every run: no error
    assert set(sessions.get("s").pinned) == {"create_issue", "weather_forecast"}
    loop.run("hi", session_id="s", pinned=["send_email"])  # a pin the session lacks is pinned
    assert set(sessions.get("s").pinned) == {"create_issue", "weather_forecast", "send_email"}
    with pytest.raises(SessionError, match="allowed: the stored session allows every tool, this run passed 1"):
        loop.run("hi", session_id="s", allowed=["create_issue"])


def test_the_same_or_no_settings_for_an_existing_session_run(sessions: SessionManager) -> None:
    loop = ToolSearchLoop(ScriptedModel(policy=lambda request: "ok"), sessions, FUNCTIONS)
    first = {"allowed": ["send_email", "create_issue"], "pinned": ["create_issue"]}
    loop.run("hi", session_id="s", **first)
    loop.run("hi", session_id="s", allowed=["create_issue", "send_email", "send_email"], pinned=["create_issue"])
    loop.run("hi", session_id="s")  # the stored ones, as they are
    assert sessions.get("s").allowed == {"send_email", "create_issue"} and sessions.get("s").pinned == ("create_issue",)


# --- functions ---------------------------------------------------------------------------------------


def test_a_function_named_like_no_tool_is_warned_about_with_the_close_name(sessions: SessionManager) -> None:
    functions = {"weather_forcast": weather_forecast, "send_email": send_email}
    with pytest.warns(UserWarning, match=r"'weather_forcast' \(did you mean 'weather_forecast'\?\)") as caught:
        ToolSearchLoop(ScriptedModel(["ok"]), sessions, functions)
    assert len(caught) == 1 and caught[0].filename == __file__  # it points at the caller's line
    assert "add the tool to the index (index.upsert)" in str(caught[0].message)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per index and names: run() builds a loop per call
        run(ScriptedModel(["ok"]), "hi", session=sessions.create("r"), functions=functions)
    other = SessionManager(ToolIndex.build([Tool.from_callable(f) for f in FUNCTIONS.values()], backend="bm25"))
    with pytest.warns(UserWarning, match="'weather_forcast'") as caught:
        run(ScriptedModel(["ok"]), "hi", session=other.create("r"), functions=functions)
    assert caught[0].filename == __file__


def test_a_function_for_a_tool_added_later_runs_once_the_tool_is_there(sessions: SessionManager) -> None:
    def translate(text: str) -> str:
        """Translate a text into French."""
        return "bonjour"

    with pytest.warns(UserWarning, match="'translate'"):  # not an error: the index takes tools after it is built
        loop = ToolSearchLoop(
            ScriptedModel([search("translate french", 1), call("translate", text="hi"), "bonjour"]),
            sessions,
            {**FUNCTIONS, "translate": translate},
        )
    sessions.index.upsert([Tool.from_callable(translate)])
    result = loop.run("Translate hi", session_id="later")
    assert [(r.call.name, r.status) for r in result.tool_results][-1] == ("translate", ResultStatus.OK)


def test_functions_that_all_name_catalog_tools_raise_no_warning(sessions: SessionManager) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        ToolSearchLoop(ScriptedModel(["ok"]), sessions, FUNCTIONS)
        ToolSearchLoop(ScriptedModel(["ok"]), sessions, list(FUNCTIONS.values()))


# --- the prompt --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ([], "the prompt is an empty list of messages; pass the user's request as a str"),
        ("", "the prompt is an empty string; pass the user's request as text"),
        (" \n", "the prompt is a blank string"),
        ([{"role": "assistant", "content": "hi"}], r"hold no user message \(roles: assistant\)"),
        ([{"role": "system", "content": "be brief"}], r"hold no user message \(roles: system\)"),
        (Message.system("be brief"), r"the prompt's 1 message\(s\) hold no user message"),
    ],
    ids=["empty-list", "empty-string", "blank-string", "assistant-only", "system-only", "one-system-message"],
)
def test_a_prompt_without_a_user_request_is_refused_before_a_request(
    sessions: SessionManager, prompt: Any, expected: str
) -> None:
    model = ScriptedModel(["ok"])
    with pytest.raises(InvalidArgumentError, match=expected):
        run(model, prompt, session=sessions.create("p"), functions=FUNCTIONS)
    assert model.payloads == []


CALL = {"id": "call_1", "type": "function", "function": {"name": "weather_forecast", "arguments": '{"city": "Oslo"}'}}


@pytest.mark.parametrize(
    ("prompt", "index", "call_id"),
    [
        (["Weather?", {"role": "tool", "tool_call_id": "call_9", "content": "sunny"}], 1, "'call_9'"),
        (["Weather?", {"role": "assistant", "content": None, "tool_calls": [CALL]},
          {"role": "tool", "tool_call_id": "call_2", "content": "sunny"}], 2, "'call_2'"),
        (["Weather?", {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
          {"role": "assistant", "content": None, "tool_calls": [CALL]}], 1, "'call_1'"),
        (["Weather?", {"role": "tool", "content": "sunny"}], 1, "tool None (no call id)"),
        (["Weather?", {"role": "assistant", "content": None, "tool_calls": [CALL]},
          {"role": "tool", "name": "send_email", "content": "sent"}], 2, "tool 'send_email' (no call id)"),
    ],
    ids=["no-call-at-all", "another-calls-id", "result-before-its-call", "no-id", "no-id-another-tool"],
)
def test_a_tool_result_that_answers_no_earlier_call_is_refused_before_a_request(
    sessions: SessionManager, prompt: Any, index: int, call_id: str
) -> None:
    model = ScriptedModel(["ok"])
    with pytest.raises(InvalidArgumentError) as refused:
        run(model, prompt, session=sessions.create("p"), functions=FUNCTIONS)
    said = call_id if call_id.startswith("tool ") else f"call id {call_id}"
    assert str(refused.value).startswith(
        f"the prompt's message {index} is a tool result for {said}, which no earlier message's tool_calls "
        "holds; providers refuse a result that answers no call. Put the assistant message that made the call"
    )
    assert model.payloads == []


def test_a_result_without_a_call_id_answers_the_earlier_call_of_its_tool(sessions: SessionManager) -> None:
    # Gemini matches results by name, and a Gemini-shaped history carries no call ids: such a result answers the
    # earlier call of its tool (before, every result without an id was refused)
    model = ScriptedModel(["ok"], format="gemini")
    prompt = ["Weather?", {"role": "assistant", "content": None, "tool_calls": [CALL]},
              {"role": "tool", "name": "weather_forecast", "content": "sunny"}]
    result = run(model, prompt, session=sessions.create("p"), functions=FUNCTIONS)
    assert result.output == "ok" and len(model.payloads) == 1


def test_a_history_with_a_user_message_runs(sessions: SessionManager) -> None:
    model = ScriptedModel(["ok"])
    prompt = [{"role": "system", "content": "be brief"}, {"role": "assistant", "content": "Hello."}, "Weather?"]
    result = run(model, prompt, session=sessions.create("p"), functions=FUNCTIONS)
    assert result.output == "ok" and [m["role"] for m in model.payloads[0]["messages"]][-1] == "user"
