"""The token benchmark's augmentation arms, at a tiny size: what a one-field `reason` adds per request and call."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from test_bench_tokens import CATALOG as BENCH_CATALOG
from test_bench_tokens import TASKS

from benchmarks import tokens as bench
from toolsearch import Tool
from toolsearch.tokens import tool_tokens

CLOSE_TICKET = {  # has a `reason` of its own: the benchmark's field must be named apart
    "name": "close_ticket",
    "description": "Close a support ticket with a reason.",
    "input_schema": {
        "type": "object",
        "properties": {"ticket": {"type": "string"}, "reason": {"type": "string"}},
        "required": ["ticket"],
    },
}
CATALOG = [*BENCH_CATALOG, CLOSE_TICKET]


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "tools.jsonl").write_text("".join(json.dumps(t) + "\n" for t in CATALOG), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in TASKS), encoding="utf-8")
    return folder


def _augmented(tool: Tool, field: str) -> Tool:
    schema = dict(tool.input_schema)
    schema["properties"] = {field: {"type": "string", "description": bench.REASON_DESCRIPTION}, **schema["properties"]}
    schema["required"] = [field, *schema.get("required", [])]
    return Tool(tool.name, tool.description, schema)


def test_the_reason_arms_measure_what_the_field_adds(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(
        ["--dataset", str(dataset), "--out", str(out), "--backends", "bm25", "--sizes", "2,all",
         "--augment", "bm25", "--no-plot", "--trace-size", "50"]
    )
    assert bench.main(args) == 0
    report = json.loads((out / "tokens.json").read_text())
    assert report["settings"]["methods"] == ["bm25", "baseline+reason", "bm25+reason"]
    ds = report["datasets"]["tiny"]
    assert ds["augment_field"] == "call_reason"
    full = next(r for r in ds["by_size"] if r["size"] == "all")["methods"]
    for arm in ("baseline+reason", "bm25+reason"):
        assert full[arm]["success"] == 1.0  # the model filled the required field: every call ran
        assert full[arm]["input_tokens"] > full[arm.removesuffix("+reason")]["input_tokens"]
    # the baseline sends every tool on each request: the definition cost per request is exact
    tools = [Tool.from_dict(t) for t in CATALOG]
    per_request = sum(tool_tokens(_augmented(t, "call_reason")) - tool_tokens(t) for t in tools)
    cost = full["baseline+reason"]["augment_cost"]
    assert cost["definition_tokens_per_request"] == per_request
    # each call's reason is replayed in later requests: at least the value's own tokens per call
    assert cost["message_tokens_per_call"] >= report["settings"]["reason_tokens"]
    assert "bm25+reason" not in report["targets"]["results"]
    text = (out / "tokens.md").read_text()
    assert "## What a one-field augmentation costs" in text
    assert "| tiny | `call_reason` | all (9) | baseline+reason |" in text
    with pytest.raises(SystemExit, match="--augment"):
        bench.main(parser.parse_args(["--dataset", str(dataset), "--backends", "bm25", "--augment", "vector"]))
