"""`bench frameworks` runs each framework's real agent loop on a tiny data set; Pydantic AI's search is a peer."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.frameworks import ARMS, render_markdown, run
from benchmarks.lib import Dataset
from benchmarks.lib.peers import PEER_NAMES, make_peers

TOOLS = [
    ("get_weather", "Weather forecast for a city: temperature, rain and wind."),
    ("send_email", "Send an email message to a recipient."),
    ("create_invoice", "Create an invoice for a customer."),
    ("translate_text", "Translate text into another language."),
    ("book_flight", "Book a flight between two airports."),
    ("get_stock_price", "Latest stock price for a ticker symbol."),
]
QUERIES = [("q1", "what is the weather forecast in Paris", "get_weather"),
           ("q2", "email my boss the report", "send_email")]


def _dataset(folder: Path) -> Dataset:
    folder.mkdir()
    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    rows = [{"name": n, "description": d, "input_schema": schema} for n, d in TOOLS]
    (folder / "tools.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    queries = [{"id": i, "query": q, "relevant": [r]} for i, q, r in QUERIES]
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(r) for r in queries), encoding="utf-8")
    return Dataset(folder)


def test_pydantic_ai_keywords_is_a_retrieval_peer() -> None:
    assert "pydantic-ai-keywords" in PEER_NAMES
    (peer,), skipped = make_peers(["pydantic-ai-keywords"])
    assert not skipped
    from toolsearch import Tool

    peer.build([Tool(n, d) for n, d in TOOLS])
    assert peer.search("send an email", 3)[0] == "send_email"
    assert peer.search_many(["zzz"], 3) == [[]]


def test_frameworks_bench_counts_every_arm(tmp_path: Path) -> None:
    report = run([_dataset(tmp_path / "tiny")], [3], limit=2, retrieval_limit=None)
    ds = report["datasets"]["tiny"]
    assert ds["tasks"] == 2 and ds["retrieval"]["queries"] == 2
    assert set(ds["retrieval"]["systems"]) == {"pydantic-ai keywords_search_fn", "toolsearch bm25 (ToolSearchStrategy)"}
    assert [row["catalog_size"] for row in ds["tokens"]] == [3, 6]
    for row in ds["tokens"]:
        for framework, (own, ours) in ARMS.items():
            arms = row["frameworks"][framework]
            assert arms[own]["input_tokens"] > 0 and arms[ours]["input_tokens"] > 0
            assert arms[ours]["success"] == 1.0  # toolsearch found and called each task's tool
            assert arms["ratio"] == round(arms[own]["input_tokens"] / arms[ours]["input_tokens"], 2)
        # the selector sends one extra (selection) call before each of the agent's two model calls
        assert row["frameworks"]["langchain"][ARMS["langchain"][0]]["requests"] == 4.0
        assert row["frameworks"]["openai_agents"][ARMS["openai_agents"][0]]["requests"] == 2.0
    text = render_markdown(report)
    assert "LLMToolSelectorMiddleware" in text and "| 6 |" in text
