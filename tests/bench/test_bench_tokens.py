"""The token-savings benchmark: exact counts, the policy's rules, the report, the live path via a fake server."""

from __future__ import annotations

import argparse
import importlib
import json
import math
from pathlib import Path
from typing import Any

import pytest

from benchmarks import tokens as bench
from benchmarks.lib.policy import (
    AgentPolicy,
    SearchStep,
    capability_words,
    content_words,
    query_plan,
    regex_pattern,
    split_clauses,
)
from toolsearch import Tool, ToolIndex
from toolsearch.providers.scripted import ScriptedModel
from toolsearch.session import SessionManager
from toolsearch.tokens import count_tokens

CATALOG = [
    {
        "name": "get_weather",
        "description": "Get the current weather forecast for a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
    {
        "name": "send_email",
        "description": "Send an email message to a recipient.",
        "input_schema": {
            "type": "object",
            "properties": {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to", "body"],
        },
    },
    {
        "name": "create_calendar_event",
        "description": "Create an event in the user's calendar at a given time.",
        "input_schema": {
            "type": "object",
            "properties": {"title": {"type": "string"}, "start": {"type": "string", "format": "date-time"}},
            "required": ["title", "start"],
        },
    },
    {
        "name": "convert_currency",
        "description": "Convert an amount of money from one currency to another.",
        "input_schema": {
            "type": "object",
            "properties": {
                "amount": {"type": "number"},
                "source": {"type": "string", "enum": ["USD", "EUR", "GBP"]},
                "target": {"type": "string", "enum": ["USD", "EUR", "GBP"]},
            },
            "required": ["amount", "source", "target"],
        },
    },
    {
        "name": "translate_text",
        "description": "Translate text into another language.",
        "input_schema": {
            "type": "object",
            "properties": {"text": {"type": "string"}, "language": {"type": "string"}},
            "required": ["text", "language"],
        },
    },
    {
        "name": "search_flights",
        "description": "Search for flights between two airports on a date.",
        "input_schema": {
            "type": "object",
            "properties": {"origin": {"type": "string"}, "destination": {"type": "string"}, "date": {"type": "string"}},
            "required": ["origin", "destination"],
        },
    },
    {
        "name": "get_stock_price",
        "description": "Look up the latest stock price for a ticker symbol.",
        "input_schema": {"type": "object", "properties": {"ticker": {"type": "string"}}, "required": ["ticker"]},
    },
    {
        "name": "set_reminder",
        "description": "Set a reminder with a message at a time.",
        "input_schema": {
            "type": "object",
            "properties": {"message": {"type": "string"}, "time": {"type": "string"}},
            "required": ["message"],
        },
    },
]
TASKS = [
    {"id": "t1", "query": "What is the weather forecast in Paris today?", "relevant": ["get_weather"]},
    {
        "id": "t2",
        "query": "Convert 100 USD to EUR. Then send an email to Bob with the converted amount.",
        "relevant": ["convert_currency", "send_email"],
    },
    {"id": "t3", "query": "Find flights from Boston to Denver next Friday.", "relevant": ["search_flights"]},
]


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@pytest.fixture(scope="module")
def tools() -> list[Tool]:
    return [Tool.from_dict(t) for t in CATALOG]


@pytest.fixture(scope="module")
def sessions(tools: list[Tool]) -> SessionManager:
    return SessionManager(ToolIndex.build(tools, backend="bm25"))


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "tools.jsonl").write_text("".join(json.dumps(t) + "\n" for t in CATALOG), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in TASKS), encoding="utf-8")
    return folder


def stubs(tools: list[Tool]) -> dict[str, Any]:
    return {t.name: bench._stub(t.name) for t in tools}


def policy_model(task: bench.Task, style: str = "text") -> ScriptedModel:
    return ScriptedModel(policy=AgentPolicy(task.query, task.needed, style=style))


# --- exact counts ----------------------------------------------------------------------------------


def test_baseline_tokens_equal_a_hand_computed_count(tools: list[Tool], sessions: SessionManager) -> None:
    task = bench.Task("t1", TASKS[0]["query"], ("get_weather",))
    stats = bench.run_task(
        task,
        "baseline",
        sessions=sessions,
        model=policy_model(task),
        functions=stubs(tools),
        allowed=None,
        catalog_size=len(tools),
        session_id="exact",
    )
    # Every tool in the Chat Completions function shape, counted one by one; no tool_search in the baseline.
    tool_defs = sum(
        count_tokens(
            compact(
                {
                    "type": "function",
                    "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
                }
            )
        )
        for t in CATALOG
    )
    system = count_tokens(bench.SYSTEM_PROMPT)  # no tool-search suffix in the baseline
    user = count_tokens(compact({"role": "user", "content": task.query}))
    assistant = count_tokens(
        compact(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_0_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"example"}'},
                    }
                ],
            }
        )
    )
    result = count_tokens(
        compact(
            {
                "role": "tool",
                "tool_call_id": "call_0_1",
                "content": '{"ok": true, "tool": "get_weather", "result": "done"}',
            }
        )
    )
    first = system + user + tool_defs
    second = system + user + assistant + result + tool_defs
    assert stats.requests == 2
    assert stats.input_tokens == first + second
    assert stats.tool_tokens == 2 * tool_defs
    assert stats.success and stats.searches == 0


def test_tool_search_run_starts_with_only_the_meta_tool(tools: list[Tool], sessions: SessionManager) -> None:
    task = bench.Task("t1", TASKS[0]["query"], ("get_weather",))
    stats = bench.run_task(
        task,
        "bm25",
        sessions=sessions,
        model=policy_model(task),
        functions=stubs(tools),
        allowed=None,
        catalog_size=len(tools),
        session_id="search",
        keep_requests=True,
    )
    assert stats.success
    assert stats.request_tokens[0]["tools_sent"] == 1  # tool_search alone
    assert stats.requests == 3 and stats.searches == 1
    assert stats.queries == [task.query]
    assert stats.input_tokens == sum(r["input_tokens"] for r in stats.request_tokens)
    assert stats.tool_tokens == sum(r["tool_tokens"] for r in stats.request_tokens)
    assert "search" not in sessions  # the benchmark closes every session it opens


def test_allowed_subset_limits_what_a_session_can_find(tools: list[Tool], sessions: SessionManager) -> None:
    task = bench.Task("t1", TASKS[0]["query"], ("get_weather",))
    allowed = ["send_email", "set_reminder"]  # the needed tool is outside the task's catalog
    stats = bench.run_task(
        task,
        "bm25",
        sessions=sessions,
        model=policy_model(task),
        functions=stubs(tools),
        allowed=allowed,
        catalog_size=len(allowed),
        session_id="subset",
    )
    assert not stats.exposed and not stats.success


# --- the policy ------------------------------------------------------------------------------------


def test_policy_only_calls_tools_the_request_carries(tools: list[Tool], sessions: SessionManager) -> None:
    # The intent names a tool the task's words cannot find: the policy searches every round, never calls it.
    task = bench.Task("x", "Please book a table for two people tonight.", ("get_stock_price",))
    model = policy_model(task)
    stats = bench.run_task(
        task,
        "bm25",
        sessions=sessions,
        model=model,
        functions=stubs(tools),
        allowed=None,
        catalog_size=len(tools),
        session_id="invisible",
    )
    plan = query_plan(task.query)
    assert not stats.called and not stats.success
    assert stats.searches == sum(len(r) for r in plan)
    for request in model.requests:
        for message in request.messages:
            for call in message.tool_calls:
                assert call.name == "tool_search"


def test_policy_queries_come_from_the_task_text_only() -> None:
    task = "Convert 100 USD to EUR. Then send an email to Bob with the converted amount."
    a = query_plan(task)
    b = AgentPolicy(task, ["convert_currency", "send_email"]).plan
    c = AgentPolicy(task, ["anything_else"]).plan
    assert a == b == c  # the labels never shape a query
    # two parts: part by part, then each part's capability, the keywords and the parts again (10 results)
    parts = ["Convert 100 USD to EUR", "send an email to Bob with the converted amount"]
    assert [s.query for s in a[0]] == parts
    assert a[1] == [SearchStep("convert", 10), SearchStep("send email converted amount", 10)]
    assert a[2] == [SearchStep("convert usd eur send email bob converted amount", 10)]
    assert a[3] == [SearchStep(part, 10) for part in parts]
    one = query_plan("Find flights from Boston to Denver.")
    assert one == [
        [SearchStep("Find flights from Boston to Denver.")],
        [SearchStep("find flights", 10)],
        [SearchStep("find flights boston denver", 10)],
        [SearchStep("Find flights from Boston to Denver.", 10)],
    ]
    assert "the" not in content_words(task) and "convert" in content_words(task)
    assert split_clauses("Find the weather") == ["Find the weather"]


def test_capability_words_drop_the_specifics_of_a_request() -> None:
    text = "Could you check the weather conditions for Santa Rosa, CA on April 9th of 2023?"
    assert capability_words(text) == ["check", "weather", "conditions"]
    quoted = "I need to block out time for a 'Basketball Game' on Friday. Schedule it from 7 PM."
    assert capability_words(quoted) == ["block", "time", "schedule"]  # a sentence's first word is kept
    assert capability_words("I'm looking for users' posts about \"rock music\"") == ["looking", "users", "posts"]


def test_regex_plan_is_a_word_alternation_within_the_length_limit() -> None:
    words = content_words("Find flights from Boston to Denver (next Friday)")
    pattern = regex_pattern(words)
    assert pattern == r"\b(?:find|flights|boston|denver|next|friday)\b"
    long = regex_pattern([f"word{'x' * 20}{chr(97 + i)}" for i in range(20)])
    assert len(long) <= 200
    assert all(s.query.startswith(r"\b(?:") for r in query_plan("send an email to Bob", "regex") for s in r)


# --- analysis --------------------------------------------------------------------------------------


def test_break_even_interpolates_in_log_size() -> None:
    result = bench.break_even([(5, -0.4), (50, 0.75), (1000, 0.99)])
    expected = math.exp(math.log(5) + 0.4 * (math.log(50) - math.log(5)) / 1.15)
    assert result["size"] == pytest.approx(expected, abs=0.1)
    assert bench.break_even([(5, 0.1), (50, 0.5)])["size"] is None
    assert "never costs more" in bench.break_even([(5, 0.0), (10, 0.0), (50, 0.5)])["note"]  # auto: all tools, no loss
    assert bench.break_even([(5, 0.0), (20, -0.1), (50, 0.5)])["note"] == "between 20 and 50"
    assert "every size" in bench.break_even([(5, -0.5), (50, -0.1)])["note"]
    weighed = bench.break_even([(5, -0.4), (50, 0.75), (1000, 0.99)], [500, 5000, 100000])
    assert weighed["size"] == result["size"] and weighed["definition_tokens"] == round(expected * 100)
    assert "definition_tokens" not in result


def test_catalogs_nest_and_keep_the_needed_tools() -> None:
    order = {f"t{i}": i for i in range(20)}
    distractors = [f"t{i}" for i in (7, 3, 15, 9, 1, 12)]
    small = bench.catalog_names(["t5"], distractors, 3, order)
    large = bench.catalog_names(["t5"], distractors, 6, order)
    assert small == ["t3", "t5", "t7"]
    assert set(small) < set(large) and len(large) == 6
    assert bench.catalog_names(["t5", "t6"], distractors, 1, order) == ["t5", "t6"]
    assert bench.catalog_names(["t5"], distractors, None, order) is None


# --- the whole benchmark ---------------------------------------------------------------------------


def _args(dataset: Path, out: Path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(["--dataset", str(dataset), "--out", str(out), "--backends", "bm25", *extra])


def test_benchmark_writes_its_report(dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results"
    assert bench.main(_args(dataset, out, "--sizes", "3,all", "--trace-size", "5", "--no-plot", "--seed", "1")) == 0
    report = json.loads((out / "tokens.json").read_text())
    ds = report["datasets"]["tiny"]
    assert ds["tasks"] == 3 and [r["size"] for r in ds["by_size"]] == [3, "all"]
    full = ds["by_size"][1]["methods"]
    assert full["baseline"]["success"] == 1.0 and full["bm25"]["success"] == 1.0
    assert full["baseline"]["requests"] == 2.0
    assert 1.0 <= full["bm25"]["extra_requests"] <= 2.0
    # at 3 tools the catalog is about as big as what a search exposes: tool search costs more there
    assert ds["by_size"][0]["methods"]["bm25"]["savings"] < 0
    assert report["trace"]["dataset"] == "tiny" and report["trace"]["needed"] == ["convert_currency", "send_email"]
    text = (out / "tokens.md").read_text()
    assert "## Break-even catalog size" in text and "| tiny | 8 | bm25 |" in text
    assert "tiny" in capsys.readouterr().out
    assert "auto" not in full  # no hybrid run, no auto arm unless asked for


def test_auto_arm_sends_small_catalogs_whole_and_searches_big_ones(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    args = _args(dataset, out, "--sizes", "3,all", "--no-plot", "--auto-backend", "bm25", "--trace-size", "50")
    assert bench.main(args) == 0
    report = json.loads((out / "tokens.json").read_text())
    assert report["settings"]["methods"] == ["bm25", "auto"]
    for row in report["datasets"]["tiny"]["by_size"]:
        # 8 tiny tools are far below the limit: auto is exactly the plain loop, not tool search
        m = row["methods"]
        assert m["auto"]["input_tokens"] == m["baseline"]["input_tokens"] and m["auto"]["savings"] == 0
        assert m["bm25"]["input_tokens"] != m["baseline"]["input_tokens"]
    assert "| tiny | 8 | auto |" in (out / "tokens.md").read_text()
    small = bench.run(
        bench.resolve_datasets([str(dataset)]), ["bm25"], [None], limit=1, auto_backend="bm25", direct_max_tokens=0
    )
    full = small["datasets"]["tiny"]["by_size"][0]["methods"]
    assert full["auto"]["input_tokens"] == full["bm25"]["input_tokens"]  # over the limit: auto searches
    with pytest.raises(SystemExit, match="auto-backend"):
        bench.main(_args(dataset, out, "--auto-backend", "vector"))


def test_plots_are_written(dataset: Path, tmp_path: Path) -> None:
    import matplotlib  # noqa: F401  (the bench extra; a missing one is an error, not a skip)

    out = tmp_path / "results"
    assert bench.main(_args(dataset, out, "--sizes", "3,all", "--limit", "1")) == 0
    assert (out / "tokens_vs_size.png").stat().st_size > 0
    assert (out / "tokens_savings.png").stat().st_size > 0
    assert "![tokens_vs_size](tokens_vs_size.png)" in (out / "tokens.md").read_text()


# --- live mode, through the real SDK clients against the fake server ----------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_live_mode_reports_the_providers_usage(
    provider: str, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    importlib.import_module(provider)  # the providers extra; a missing SDK is an error, not a skip
    from fakes import FakeLLMServer, Turn

    def model(request: Any) -> Turn:
        names = request.tool_names
        if "tool_search" in names and request.assistant_turns == 0:
            return Turn(tool_calls=[("tool_search", {"query": request.user_text})])
        if "get_weather" in names and not any(c.name == "get_weather" for c in request.history_calls()):
            return Turn(tool_calls=[("get_weather", {"city": "Paris"})])
        return Turn(text="It is sunny in Paris.")

    (dataset / "queries.jsonl").write_text(json.dumps(TASKS[0]) + "\n", encoding="utf-8")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    out = tmp_path / "results"
    with FakeLLMServer(policy=model) as server:
        base_url = server.openai_base_url if provider == "openai" else server.anthropic_base_url
        code = bench.main(
            _args(
                dataset,
                out,
                "--provider",
                provider,
                "--model",
                "fake-model",
                "--base-url",
                base_url,
                "--limit",
                "1",
                "--sizes",
                "all",
                "--trace-size",
                "1000",
                "--no-plot",
            )
        )
        requests = server.requests
    assert code == 0
    report = json.loads((out / "tokens.json").read_text())
    full = report["datasets"]["tiny"]["by_size"][0]["methods"]
    billed = {"baseline": 0, "bm25": 0}
    for request in requests:
        billed["bm25" if "tool_search" in request.tool_names else "baseline"] += max(1, len(request.raw) // 4)
    assert full["baseline"]["provider_input_tokens"] == billed["baseline"]
    assert full["bm25"]["provider_input_tokens"] == billed["bm25"]
    assert full["baseline"]["success"] == 1.0 and full["bm25"]["success"] == 1.0
    assert sum("tool_search" not in r.tool_names for r in requests) == 2  # baseline: call, answer
    assert report["settings"]["mode"] == f"live {provider} fake-model"


# --- the session benchmark -----------------------------------------------------------------------------


def test_session_benchmark_runs_small_and_checks_isolation(dataset: Path) -> None:
    from benchmarks import sessions as session_bench
    from benchmarks.lib import Dataset

    report = session_bench.run(
        [Dataset(dataset)], ["bm25"], size=40, sessions=4, creations=50, queries=12, allowed_size=10
    )
    result = report["backends"]["bm25"]
    assert report["settings"]["catalog"]["size"] == 40
    assert all(row["n"] == 50 for row in result["creation"].values())
    for rows in result["search"].values():
        assert len(rows) == 4
        for row in rows.values():
            assert row["isolation_ok"] and row["queries"] == 3 and row["qps"] > 0
    assert "## bm25" in session_bench.render_markdown(report)


# --- cost with prompt caching ---------------------------------------------------------------------


def test_report_prices_each_arm_with_and_without_caching(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    args = _args(dataset, out, "--sizes", "3,all", "--no-plot", "--format", "anthropic", "--native-backend", "bm25")
    assert bench.main(args) == 0
    report = json.loads((out / "tokens.json").read_text())
    assert report["settings"]["methods"] == ["bm25", "bm25+native"]
    assert report["settings"]["prices"]["model"] == "claude-sonnet-4-6"
    full = report["datasets"]["tiny"]["by_size"][-1]["methods"]
    for name, m in full.items():
        billed = m["fresh_tokens"] + m["cache_write_tokens"] + m["cache_read_tokens"]
        # A cache write costs 1.25x the input rate (5-minute entries): a prefix written and never read back costs
        # more than no caching, at most by that factor (bm25+native here, whose requests cross the 1,024-token
        # minimum once Anthropic's tool-use system prompt is counted).
        assert billed > 0 and 0 < m["price_usd"] <= 1.25 * m["uncached_price_usd"], name
        if m["cache_read_tokens"] == 0:
            assert m["price_usd"] >= m["uncached_price_usd"], name
    # 8 tiny tools stay below Anthropic's 1,024-token minimum: nothing is cached, every token is fresh
    assert (
        full["baseline"]["cache_read_tokens"] == 0
        and full["baseline"]["price_usd"] == full["baseline"]["uncached_price_usd"]
    )
    # with the baseline cached nothing, an arm's savings differ with caching exactly when the arm cached something
    bm25 = full["bm25"]
    cached_any = bm25["cache_write_tokens"] + bm25["cache_read_tokens"] > 0
    assert (bm25["cost_savings"] != bm25["uncached_cost_savings"]) == cached_any
    assert "bm25+native" in report["datasets"]["tiny"]["break_even_cached"]
    text = (out / "tokens.md").read_text()
    assert "## Cost with prompt caching" in text and "| tiny | bm25+native |" in text
    with pytest.raises(SystemExit, match="no native tool-search form"):
        bench.main(_args(dataset, out, "--native-backend", "bm25"))  # openai_chat has none


def test_a_user_price_table_changes_the_caching_rules(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a cache from the first token on: the baseline's repeated tools array is read back on its second request
    table = tmp_path / "prices.json"
    table.write_text(json.dumps({"providers": {"openai": {"min_cacheable_tokens": 1, "increment_tokens": 1}}}))
    monkeypatch.setenv("TOOLSEARCH_PRICES", str(table))
    report = bench.run(bench.resolve_datasets([str(dataset)]), ["bm25"], [None], limit=3, fmt="openai_chat")
    m = report["datasets"]["tiny"]["by_size"][0]["methods"]
    assert m["baseline"]["cache_read_tokens"] > 0
    assert m["baseline"]["price_usd"] < m["baseline"]["uncached_price_usd"]
    assert m["bm25"]["cost_savings"] != m["bm25"]["uncached_cost_savings"]


def test_learn_arms_feed_a_usage_log_from_earlier_tasks(tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "tools.jsonl").write_text("".join(json.dumps(t) + "\n" for t in CATALOG), encoding="utf-8")
    again = {**TASKS[0], "id": "t4"}  # a later task like an earlier one
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in [*TASKS, again]), encoding="utf-8")
    out = tmp_path / "results"
    assert bench.main(_args(folder, out, "--sizes", "all", "--no-plot", "--learn")) == 0
    report = json.loads((out / "tokens.json").read_text())
    assert report["settings"]["methods"] == ["bm25", "bm25+learn"] and report["settings"]["learn"]
    [row] = report["datasets"]["tiny"]["learning"]
    assert row["backend"] == "bm25" and [q["tasks"] for q in row["quarters"]] == ["1-1", "2-2", "3-3", "4-4"]
    before = [q["log_before"] for q in row["quarters"]]
    # the log starts empty and each task's successful calls (one per needed tool) feed the next ones
    assert before[0] == 0 and before == sorted(before) and len(set(before)) == 4
    assert row["log_entries"] == sum(len(t["relevant"]) for t in [*TASKS, again])
    first = row["quarters"][0]
    assert first["with"]["input_tokens"] == first["without"]["input_tokens"]  # an empty log changes nothing
    assert all(q["with"]["success"] == 1.0 for q in row["quarters"])
    text = (out / "tokens.md").read_text()
    assert "## Learning from earlier tasks" in text and "| tiny | all (8) | bm25 | 4-4 |" in text


def test_gemini_format_counts_and_prices_with_implicit_caching(dataset: Path, tmp_path: Path) -> None:
    """`--format gemini`: requests rendered as generateContent, priced at Gemini's rates, cached automatically."""
    out = tmp_path / "results"
    assert bench.main(_args(dataset, out, "--sizes", "all", "--no-plot", "--format", "gemini")) == 0
    report = json.loads((out / "tokens.json").read_text())
    assert report["settings"]["prices"]["model"] == "gemini-2.5-flash"
    full = report["datasets"]["tiny"]["by_size"][-1]["methods"]
    for name, m in full.items():
        assert m["input_tokens"] > 0 and m["tool_tokens"] > 0, name  # the contents and declarations are counted
        billed = m["fresh_tokens"] + m["cache_write_tokens"] + m["cache_read_tokens"]
        assert billed > 0 and m["cache_write_tokens"] == 0, name  # implicit caching: writes cost nothing
    with pytest.raises(SystemExit, match="no native tool-search form"):
        bench.main(_args(dataset, out, "--format", "gemini", "--native-backend", "bm25"))
