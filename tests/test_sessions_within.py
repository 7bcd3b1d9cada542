"""A handle narrowed by `Session.within(names)` shows, sends and counts only tools among `names`, end to end."""

from __future__ import annotations

import pytest

from toolsearch import Tool, ToolIndex, ToolNotAllowedError, handle_tool_calls, run, tools_for_request
from toolsearch.metatool import ToolSearchMetaTool
from toolsearch.providers import ScriptedModel
from toolsearch.session import Session, SessionManager

TOOLS = [Tool(f"t{i}", f"tool number {i}") for i in range(4)]


@pytest.fixture()
def agent() -> Session:
    """A session another agent pinned t0 in and discovered t1 in, seen by an agent that holds only t2 and t3."""
    session = SessionManager(ToolIndex.build(TOOLS, backend="bm25")).create("s1", pinned=["t0"])
    session.discover(["t1"])
    narrowed = session.within({"t2", "t3"})
    narrowed.discover(["t2"])
    return narrowed


def test_a_narrowed_handle_reads_only_its_own_tools(agent: Session) -> None:
    # Before: pinned t0 and discovered t1 (outside the agent's tools) came back from every read but is_visible
    for handle in (agent, agent.view()):
        assert handle.allowed == frozenset({"t2", "t3"})
        assert handle.pinned == () and handle.discovered == ("t2",)
        assert [t.name for t in handle.pinned_tools()] == []
        assert [t.name for t in handle.discovered_tools()] == ["t2"]
        assert [t.name for t in handle.visible_tools()] == ["t2"]
        assert handle.loaded_names() == frozenset({"t2"})
    wide = agent.manager.get("s1")  # the stored session keeps every tool it had
    assert wide.pinned == ("t0",) and wide.discovered == ("t1", "t2")
    assert [t.name for t in wide.visible_tools()] == ["t0", "t1", "t2"]


def test_a_narrowed_handle_sends_no_other_tool_in_a_request(agent: Session) -> None:
    sent = [t["function"]["name"] for t in tools_for_request(agent, "openai_chat")]
    assert sent == ["tool_search", "t2"]  # before: ['t0', 'tool_search', 't1', 't2']
    pinned, _, discovered = ToolSearchMetaTool().turn_tools(agent.view())  # the loop's and the executor's rule
    assert [t.name for t in (*pinned, *discovered)] == ["t2"]
    calls = [{"id": "c1", "type": "function", "function": {"name": "t1", "arguments": "{}"}}]
    assert handle_tool_calls(agent, calls, {"t1": lambda: "ran"})[0].status.value == "not_available"


def test_the_loop_sends_a_narrowed_handle_only_its_own_tools(agent: Session) -> None:
    model = ScriptedModel(["done"])
    result = run(model, "hello", session=agent, tool_search="on")
    assert result.output == "done"
    request = model.requests[0]
    assert [t.name for t in (*request.pinned, *request.discovered)] == ["t2"]
    assert request.search_tool is not None and request.search_tool.name == "tool_search"


def test_a_narrowed_handles_forget_all_keeps_the_other_agents_tools(agent: Session) -> None:
    # Before: forget() on a handle limited to t2 and t3 wiped t1, which another agent discovered
    wide = agent.manager.get("s1")
    for handle in (agent.view(), agent):
        handle.discover(["t2"])
        handle.forget()
        assert handle.discovered == ()
        if handle is not agent:
            handle.commit()
        assert wide.discovered == ("t1",) and wide.pinned == ("t0",)
    wide.discover(["t3"])
    agent.forget(["t1", "t3"])  # a name outside the handle's tools is not its to forget
    assert wide.discovered == ("t1",)
    wide.forget()  # the stored session's own handle still forgets everything
    assert wide.discovered == ()


def test_a_narrowed_handle_refuses_to_unpin_a_tool_it_may_not_use(agent: Session) -> None:
    # Before: unpin(["t0"]) through a handle limited to t2 and t3 unpinned the other agent's t0 without a word
    with pytest.raises(ToolNotAllowedError, match=r"unpin tool 't0' is not among the tools this handle allows"):
        agent.unpin(["t0"])
    with pytest.raises(ToolNotAllowedError):
        agent.unpin(["t3", "t0"])  # nothing changes when one name is refused
    assert agent.manager.get("s1").pinned == ("t0",)
    agent.pin(["t3"])
    agent.unpin(["t3"])  # its own pins it may unpin
    assert agent.pinned == () and agent.manager.get("s1").pinned == ("t0",)


def test_the_session_itself_unpins_what_it_pins_and_ignores_other_names() -> None:
    # unpin on the session (not a within() handle) is all-or-nothing for nobody: a name it does not pin, or one
    # outside its allowed tools, is nothing to unpin, as before; what it does pin is unpinned
    tools = [Tool(f"a{i}", f"Alpha tool {i}") for i in range(2)] + [Tool("b1", "Beta tool")]
    sessions = SessionManager(ToolIndex.build(tools, backend="bm25"))
    session = sessions.create("plain", allowed=["a0", "a1"], pinned=["a1"])
    session.unpin(["a1", "b1"])
    assert session.pinned == ()
