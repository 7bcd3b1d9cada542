"""Direct mode (no search tool offered) runs a catalog tool named `tool_search` as itself, through each real SDK."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fakes import FakeLLMServer, Turn
from fakes.e2e import make_model

from toolsearch import SessionManager, Tool, ToolIndex, arun, run

WEB = Tool("tool_search", "Search the web for pages",
           {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
EMAIL = Tool("send_email", "Send an email", {"type": "object", "properties": {"to": {"type": "string"}}})
FORMATS = ["openai_chat", "openai_responses", "anthropic", "gemini"]


@pytest.mark.parametrize("how", ["run", "arun", "stream"])
@pytest.mark.parametrize("mode", ["off", "auto"])  # "auto" is below its threshold with two tools: every tool is sent
@pytest.mark.parametrize("kind", FORMATS)
def test_a_call_of_a_catalog_tool_named_tool_search_runs_that_tool_when_no_search_tool_was_offered(
    kind: str, mode: str, how: str
) -> None:
    session = SessionManager(ToolIndex.build([WEB, EMAIL], backend="bm25")).create("direct")
    ran: list[str] = []
    settings: dict[str, Any] = {
        "session": session, "tool_search": mode, "stream": how == "stream",
        "functions": {"tool_search": lambda q: ran.append(q) or f"web results for {q}", "send_email": lambda to: "ok"},
    }
    with FakeLLMServer(Turn(tool_calls=[("tool_search", {"q": "cats"})]), "Here are cat pages.") as server:
        model = make_model(kind, server, asynchronous=how == "arun")
        if how == "arun":
            result = asyncio.run(arun(model, "find cat pages", **settings))
        else:
            result = run(model, "find cat pages", **settings)
        sent = [sorted(request.tool_names) for request in server.requests]
    assert sent == [["send_email", "tool_search"]] * 2  # the catalog's two tools, and no search tool
    assert ran == ["cats"] and not result.searches  # the catalog tool ran; nothing was searched
    assert [r.content for r in result.tool_results] == ["web results for cats"]
    assert result.output == "Here are cat pages."
