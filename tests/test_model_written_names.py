"""Text a model writes where a name belongs is neither recorded in clear nor echoed back whole.

A called name that is no catalog tool's is model-written text, as free as a query (it may quote the user): a span
records it under the query privacy setting, and the metric counts it as one `(unknown tool)` series, however many
names the model makes up. An unknown `namespace` a search is asked for is quoted back cut, as unknown argument
names are, so a long text there does not come back whole in every later request of the run.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_tracing import Telemetry

from toolsearch import SessionManager, Tool, ToolIndex, run, tracing
from toolsearch.providers import ScriptedModel, call, reply, search
from toolsearch.tracing import UNKNOWN_TOOL, digest

MADE_UP = "email_ana.silva@example.com_about_her_hiv_test_result"  # a name guessed from the user's request


@pytest.fixture(params=["hash", "text", "none"])
def traced(request: pytest.FixtureRequest) -> Iterator[tuple[str, Telemetry]]:
    recorded = Telemetry()
    previous = tracing.configure(
        tracer_provider=recorded.tracer_provider, meter_provider=recorded.meter_provider, queries=request.param
    )
    try:
        yield request.param, recorded
    finally:
        tracing.restore(previous)
        recorded.tracer_provider.shutdown()
        recorded.meter_provider.shutdown()


def test_a_made_up_tool_name_is_recorded_as_the_query_setting_allows(traced: tuple[str, Telemetry]) -> None:
    mode, telemetry = traced
    session = SessionManager(ToolIndex.build([Tool("email_send", "Send email.")], backend="regex")).create("s")
    model = ScriptedModel([reply(search("email ana"), call(MADE_UP), call("made_up_too"), call("email_send")), "done"])
    run(model, "email ana.silva@example.com about her HIV test result", session=session,
        functions={"email_send": lambda: "sent"})
    spans = {s.attributes["gen_ai.tool.call.id"]: s for s in telemetry.spans() if s.name.startswith("execute_tool")}
    made_up, _, known = (spans[c] for c in sorted(spans))  # the second made-up name is counted below
    assert (known.name, known.attributes["gen_ai.tool.name"]) == ("execute_tool email_send", "email_send")
    if mode == "text":
        assert (made_up.name, made_up.attributes["gen_ai.tool.name"]) == (f"execute_tool {MADE_UP}", MADE_UP)
    else:
        assert (made_up.name, made_up.attributes["gen_ai.tool.name"]) == (f"execute_tool {UNKNOWN_TOOL}", UNKNOWN_TOOL)
        hashed = made_up.attributes.get("toolsearch.tool.name.sha256")
        assert hashed == (digest(MADE_UP) if mode == "hash" else None)
        assert made_up.attributes["toolsearch.tool.status"] == "not_available"
    everything = repr([(s.name, dict(s.attributes or {})) for s in telemetry.spans()])
    assert (MADE_UP in everything) is (mode == "text")
    # one series for every made-up name, whatever the setting: the names are unbounded
    assert telemetry.counts("toolsearch.tool.calls_without_search") == {UNKNOWN_TOOL: 2}


def test_an_unknown_namespace_is_quoted_back_cut() -> None:
    session = SessionManager(ToolIndex.build([Tool("mail.send", "Send mail.", namespace="mail")],
                                             backend="bm25")).create("s")
    model = ScriptedModel([reply(call("tool_search", query="send mail", namespace="mail " * 100_000)), "done"])
    [result] = run(model, "send a mail", session=session).tool_results
    assert result.content == (
        f"tool_search error: unknown namespace {('mail ' * 12)[:60] + '…'!r}. Use one of: mail."
    )
