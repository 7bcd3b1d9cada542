"""`toolsearch eval`: a logged request no search takes is left out with a note, not a failed run; a queries file
that repeats an id is refused, naming both lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolsearch import Tool, ToolIndex
from toolsearch._errors import InvalidToolError
from toolsearch.cli import EXIT_OK, EXIT_USER_ERROR, main
from toolsearch.evaluation import load_queries
from toolsearch.usage import FileUsageStore, UsageLog, usage_path

TOOLS = [
    Tool("send_email", "Send an email message to one or more recipients."),
    Tool("get_weather", "Current weather and forecast for a city."),
]
LONG = "please " * 300 + "send an email"  # 2,112 characters after stripping: an entry keeps up to 10,000


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLSEARCH_HOME", str(tmp_path / "home"))
    folder = tmp_path / "idx"
    ToolIndex.build(TOOLS, backend="bm25").save(folder)
    return folder


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _log(folder: Path, rows: list[tuple[str, str]]) -> None:
    log = UsageLog(ToolIndex.load(folder).catalog.hash, privacy="raw")
    for text, tool in rows:
        log.add(text, tool, [tool])
    FileUsageStore(usage_path(folder)).save(log)


def test_a_logged_request_longer_than_a_search_takes_is_left_out_with_a_note(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _log(folder, [("weather in lisbon", "get_weather"), ("send an email to bob", "send_email"), (LONG, "send_email")])
    # Before: "usage log of idx: query 'u3': query is 2113 characters; the limit is 1000. Use a few keywords
    # instead", exit 1 and no score
    code, out, err = run(capsys, "eval", str(folder), "--usage", "--json")
    assert code == EXIT_OK, err
    assert ("note: left out 1 of the 3 logged requests, which a search does not take (1 longer than 1,000 "
            "characters); the other 2 are scored") in err
    report = json.loads(out)
    assert report["queries"] == 2 and report["passed"] is True


def test_a_log_of_only_such_requests_says_so(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _log(folder, [(LONG, "send_email"), ("x" * 1500, "get_weather")])
    code, out, err = run(capsys, "eval", str(folder), "--usage")
    assert code == EXIT_USER_ERROR and out == ""
    assert "note: left out 2 of the 2 logged requests" in err
    assert "holds no request a search takes" in err and "--queries FILE" in err


def test_a_repeated_query_id_is_refused_naming_both_lines(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"id": "q1", "query": "send an email", "relevant": ["send_email"]},
            {"id": "q2", "query": "weather in lisbon", "relevant": ["get_weather"]},
            {"id": "q1", "query": "weather forecast lisbon", "relevant": ["send_email"]}]
    Path("q.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    # Before: both rows scored (exit 0), and the --json misses named "q1" for two different queries
    code, out, err = run(capsys, "eval", str(folder), "--queries", "q.jsonl", "--json")
    assert code == EXIT_USER_ERROR and out == ""
    assert "q.jsonl:3: id 'q1' is also the id of line 1" in err and "give each query its own id" in err


def test_ids_are_compared_as_text(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"id": 7, "query": "a", "relevant": ["x"]}\n\n{"id": "7", "query": "b", "relevant": ["x"]}\n')
    with pytest.raises(InvalidToolError, match=r"q\.jsonl:3: id '7' is also the id of line 1"):
        load_queries(path)


@pytest.mark.parametrize(("query", "why"), [("weather " * 200, "query is 1599 characters"), ("   ", "query is empty")])
def test_a_query_a_search_refuses_is_named_by_file_line_and_id(
    folder: Path, capsys: pytest.CaptureFixture[str], query: str, why: str
) -> None:
    rows = [{"id": "ok", "query": "send an email", "relevant": ["send_email"]},
            {"id": "bad", "query": query, "relevant": ["get_weather"]}]
    Path("q.jsonl").write_text("\n" + "".join(json.dumps(row) + "\n" for row in rows))  # a blank line counts too
    # Before: "q.jsonl: query 'bad': ..." (no line), while docs/cli.md said the error names the file and line
    code, out, err = run(capsys, "eval", str(folder), "--queries", "q.jsonl")
    assert code == EXIT_USER_ERROR and out == ""
    assert f"q.jsonl:3: query 'bad': {why}" in err, err
