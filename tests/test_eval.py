"""`toolsearch eval`: labelled queries or the usage log, scored per backend, floors that fail a CI job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolsearch import ToolIndex
from toolsearch.cli import EXIT_OK, EXIT_USAGE, EXIT_USER_ERROR, main
from toolsearch.eval_cli import EXIT_BELOW_FLOOR
from toolsearch.evaluation import LabeledQuery, queries_from_pairs, score_rankings, score_with_misses
from toolsearch.tools import load_tools
from toolsearch.usage import FileUsageStore, UsageLog, usage_path

TOOLS = [
    {"name": "send_email", "description": "Send an email message to one or more recipients.",
     "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}}},
    {"name": "get_weather", "description": "Current weather and forecast for a city.",
     "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
    {"name": "book_room", "description": "Reserve a meeting room for a time slot.",
     "input_schema": {"type": "object", "properties": {"room": {"type": "string"}}}},
    {"name": "refund_payment", "description": "Refund a card payment to the customer.",
     "input_schema": {"type": "object", "properties": {"payment_id": {"type": "string"}}}},
]
# One query each; the last wants a tool no description mentions in these words, so bm25 misses it.
QUERIES = [
    {"id": "q1", "query": "send an email to the team", "relevant": ["send_email"]},
    {"id": "q2", "query": "weather forecast for Lisbon", "relevant": ["get_weather"]},
    {"id": "q3", "query": "reserve a meeting room", "relevant": ["book_room"]},
    {"id": "q4", "query": "give a client their money back", "relevant": ["refund_payment"]},
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLSEARCH_HOME", str(tmp_path / "home"))
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUERIES))
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def expected_scores(backend: str, k: int = 5) -> dict[str, float]:
    """What the evaluation module computes for the same rankings: the command adds nothing of its own."""
    index = ToolIndex.build(load_tools("tools.json"), backend)
    queries = [LabeledQuery(q["id"], q["query"], tuple(q["relevant"])) for q in QUERIES]
    rankings = [[h.name for h in index.search(q.query, len(TOOLS)).hits] for q in queries]
    return score_with_misses(rankings, queries, k)[0]


def test_backends_side_by_side_with_the_misses(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "build", "tools.json", "--backend", "bm25", "--name", "kw")[0] == EXIT_OK
    code, out, err = run(capsys, "eval", "kw", "--queries", "queries.jsonl", "--backends", "bm25,regex")
    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert lines[0] == "4 queries (queries.jsonl) over 4 tools; a miss is a relevant tool outside the top 5"
    assert lines[1].split() == ["backend", "nDCG@10", "R@5", "MRR@10", "misses"]
    bm25 = expected_scores("bm25")
    row = lines[2].split()
    assert row[0] == "bm25" and [float(v) for v in row[1:4]] == [
        round(bm25["nDCG@10"], 3), round(bm25["R@5"], 3), round(bm25["MRR@10"], 3)]
    assert lines[3].split()[0] == "regex"
    assert "building the regex backend over 4 tools" in err  # bm25 is the index itself: not rebuilt
    assert "building the bm25 backend" not in err


def test_json_report_and_misses(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "eval", "tools.json", "--queries", "queries.jsonl", "--backends", "bm25",
                         "-k", "1", "--json")
    assert code == EXIT_OK, err
    report = json.loads(out)
    assert report["queries"] == 4 and report["tools"] == 4 and report["k"] == 1 and report["passed"] is True
    scores = report["backends"]["bm25"]["scores"]
    assert scores == {m: round(v, 4) for m, v in expected_scores("bm25", k=1).items()}
    missed = {m["id"]: m for m in report["backends"]["bm25"]["misses"]}
    assert "q4" in missed and missed["q4"]["missing"] == ["refund_payment"]
    assert missed["q4"]["top"] == []  # no word of the query is in any tool: bm25 ranks nothing
    assert "q1" not in missed


@pytest.mark.parametrize(("flag", "floor", "expected"), [
    ("--min-recall", "1", EXIT_BELOW_FLOOR),
    ("--min-recall", "0.5", EXIT_OK),
    ("--min-ndcg", "0.99", EXIT_BELOW_FLOOR),
    ("--min-ndcg", "0.1", EXIT_OK),
])
def test_floors_set_the_exit_code(
    home: Path, capsys: pytest.CaptureFixture[str], flag: str, floor: str, expected: int
) -> None:
    code, out, err = run(capsys, "eval", "tools.json", "--queries", "queries.jsonl", "--backends", "bm25", flag, floor)
    assert code == expected, out + err
    last = out.strip().splitlines()[-1]
    if expected == EXIT_BELOW_FLOOR:
        assert last.startswith("below the floor: bm25 ") and f"< {float(floor):g}" in last
        assert "missed by bm25" in out
        assert "  q4  'give a client their money back': wanted refund_payment; got nothing" in out
    else:
        assert last.startswith("every backend meets the floor")


def test_json_says_which_floor_failed(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "eval", "tools.json", "--queries", "queries.jsonl", "--backends", "bm25",
                       "--min-recall", "1", "--json")
    report = json.loads(out)
    assert code == EXIT_BELOW_FLOOR and report["passed"] is False
    assert report["failures"] == [f"bm25 R@5 {report['backends']['bm25']['scores']['R@5']:.3f} < 1"]


def test_the_usage_log_is_a_source_of_labels(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "build", "tools.json", "--backend", "bm25", "--name", "kw")[0] == EXIT_OK
    folder = home / "home" / "indexes" / "kw"
    log = UsageLog(ToolIndex.load(folder).catalog.hash, privacy="raw")
    log.add("send an email to the team", "send_email")
    log.add("send an email to the team", "send_email")  # repeated: still one query
    log.add("give a client their money back", "refund_payment")
    FileUsageStore(usage_path(folder)).save(log)
    code, out, err = run(capsys, "eval", "kw", "--usage", "--json")
    assert code == EXIT_OK, err
    report = json.loads(out)
    assert report["queries"] == 2 and report["labels"] == "usage log of kw"
    assert [m["query"] for m in report["backends"]["bm25"]["misses"]] == ["give a client their money back"]


def test_a_hashed_usage_log_says_it_keeps_no_query_text(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "build", "tools.json", "--backend", "bm25", "--name", "kw")[0] == EXIT_OK
    folder = home / "home" / "indexes" / "kw"
    log = UsageLog(ToolIndex.load(folder).catalog.hash)
    log.add("send an email", "send_email")
    FileUsageStore(usage_path(folder)).save(log)
    code, out, err = run(capsys, "eval", "kw", "--usage")
    assert code == EXIT_USER_ERROR and out == ""
    assert "keeps no query text" in err and "privacy='hashed'" in err and "--queries FILE" in err
    code, _, err = run(capsys, "eval", "tools.json", "--usage")
    assert code == EXIT_USER_ERROR and "tools.json is a tool file" in err


def test_labels_naming_missing_tools_are_noted(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "renamed.jsonl").write_text(json.dumps({"id": "x", "query": "send mail", "relevant": ["mail_send"]}))
    code, _, err = run(capsys, "eval", "tools.json", "--queries", "renamed.jsonl", "--backends", "bm25",
                         "--min-recall", "0.5")
    assert code == EXIT_BELOW_FLOOR
    assert "note: 1 labelled tools are not in the catalog, so they always miss: mail_send" in err


@pytest.mark.parametrize(("argv", "expected", "needle"), [
    (["--queries", "queries.jsonl", "--min-recall", "1.5"], EXIT_USAGE, "--min-recall 1.5 is not a fraction"),
    (["--queries", "queries.jsonl", "--backends", "bm25,elastic"], EXIT_USAGE, "unknown backend 'elastic'"),
    (["--queries", "queries.jsonl", "-k", "0"], EXIT_USAGE, "k"),
    ([], EXIT_USAGE, "one of the arguments --queries --usage is required"),
    (["--queries", "empty.jsonl"], EXIT_USER_ERROR, "empty.jsonl holds no queries"),
    (["--queries", "broken.jsonl"], EXIT_USER_ERROR, "broken.jsonl:2: not a query row"),
    (["--queries", "blank.jsonl"], EXIT_USER_ERROR, "query 'b'"),
])
def test_bad_input_is_named(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: int, needle: str
) -> None:
    (home / "empty.jsonl").write_text("")
    (home / "broken.jsonl").write_text(json.dumps(QUERIES[0]) + "\n{not json\n")
    (home / "blank.jsonl").write_text(json.dumps({"id": "b", "query": "  ", "relevant": ["send_email"]}))
    code, out, err = run(capsys, "eval", "tools.json", *argv)
    assert code == expected and out == ""
    assert needle in err.strip().splitlines()[-1]


def test_queries_from_pairs_groups_by_text() -> None:
    queries = queries_from_pairs([("a", "t1"), ("b", "t2"), ("a", "t3"), ("a", "t1")])
    assert queries == [LabeledQuery("u1", "a", ("t1", "t3")), LabeledQuery("u2", "b", ("t2",))]


def test_score_with_misses_extends_the_shared_metrics() -> None:
    queries = [LabeledQuery("1", "x", ("a", "b")), LabeledQuery("2", "y", ("c",))]
    rankings = [["a", "z", "b"], ["c"]]
    scores, misses = score_with_misses(rankings, queries, 2)
    assert {m: scores[m] for m in score_rankings(rankings, queries)} == score_rankings(rankings, queries)
    assert scores["R@2"] == pytest.approx((0.5 + 1.0) / 2)
    assert [(m.query.id, m.missing, m.ranked) for m in misses] == [("1", ("b",), ("a", "z"))]


def test_the_usage_logs_of_earlier_catalogs_are_labels_too(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "build", "tools.json", "--backend", "bm25", "--name", "kw")[0] == EXIT_OK
    folder = home / "home" / "indexes" / "kw"
    log = UsageLog("an-earlier-catalog", privacy="raw")  # logged before a tool changed and the index was rebuilt
    log.add("send an email to the team", "send_email")
    FileUsageStore(usage_path(folder)).save(log)
    code, out, err = run(capsys, "eval", "kw", "--usage", "--json")
    # Before: "has no entries for this catalog", with the entry beside it.
    assert code == EXIT_OK, err
    assert json.loads(out)["queries"] == 1
    assert "1 of the 1 usage entries were recorded for earlier catalogs" in err


@pytest.mark.parametrize(("line", "needle"), [
    ('{"id": "s", "query": "send mail", "relevant": "send_email"}', "'relevant' must be a list of tool names"),
    ('{"id": "e", "query": "send mail", "relevant": []}', "'relevant' lists no tool"),
    ('{"id": "n", "query": "send mail", "relevant": [["send_email"]]}', "'relevant' must be a list of tool names"),
    ('{"id": "q", "query": 5, "relevant": ["send_email"]}', "'query' must be text"),
])
def test_a_label_row_of_the_wrong_shape_is_named_by_file_and_line(
    line: str, needle: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (home / "labels.jsonl").write_text(json.dumps(QUERIES[0]) + "\n" + line + "\n")
    code, out, err = run(capsys, "eval", "tools.json", "--queries", "labels.jsonl", "--backends", "bm25")
    assert code == EXIT_USER_ERROR and out == "", err
    last = err.strip().splitlines()[-1]
    assert last.startswith("toolsearch: error: labels.jsonl:2: ") and needle in last and "unexpected" not in last


def test_a_label_file_that_is_not_utf8_is_named_by_line(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    row = json.dumps({"id": "l", "query": "caf\u00e9 finder", "relevant": ["send_email"]}, ensure_ascii=False)
    (home / "latin1.jsonl").write_bytes((json.dumps(QUERIES[0]) + "\n" + row + "\n").encode("latin-1"))
    code, _, err = run(capsys, "eval", "tools.json", "--queries", "latin1.jsonl", "--backends", "bm25")
    last = err.strip().splitlines()[-1]
    assert code == EXIT_USER_ERROR and last.startswith("toolsearch: error: latin1.jsonl:2: "), err
    assert "UTF-8" in last and "unexpected" not in last


def test_a_query_the_regex_backend_cannot_run_is_named(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "rx.jsonl").write_text(
        json.dumps(QUERIES[0]) + "\n" + json.dumps({"id": "broken", "query": "a{2,1}", "relevant": ["send_email"]})
    )
    code, _, err = run(capsys, "eval", "tools.json", "--queries", "rx.jsonl", "--backends", "regex")
    last = err.strip().splitlines()[-1]
    # Before: the regex engine's message alone, naming neither the file nor the query.
    assert code == EXIT_USER_ERROR and "rx.jsonl: query 'broken'" in last and "regex backend" in last, err


def test_an_empty_catalog_has_nothing_to_evaluate(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "none.json").write_text("[]")
    code, _, err = run(capsys, "eval", "none.json", "--queries", "queries.jsonl", "--backends", "bm25")
    # Before: "k (max results) must be between 1 and 1000, got 0".
    assert code == EXIT_USER_ERROR and "the sources hold no tools; nothing to evaluate" in err, err


def test_a_name_ranked_twice_gains_once() -> None:
    from toolsearch.evaluation import mrr_at, ndcg_at, recall_at

    assert ndcg_at(["a", "a", "b"], ["a"]) == 1.0
    assert ndcg_at(["a", "a"], ["a", "b"]) == pytest.approx(1 / (1 + 1 / 1.5849625007211563))
    assert recall_at(["a", "a"], ["a", "b"], 2) == 0.5 and mrr_at(["x", "a", "a"], ["a"]) == 0.5
    queries = [LabeledQuery("1", "q", ("a",)), LabeledQuery("2", "q", ("a", "a"))]
    assert all(0 <= v <= 1 for v in score_rankings([["a", "a", "a"], ["a", "a"]], queries).values())


def test_queries_with_no_label_are_left_out_of_the_means_and_counted() -> None:
    queries = [LabeledQuery("1", "q", ()), LabeledQuery("2", "q", ("a",))]
    scores = score_rankings([["x"], ["a"]], queries)
    assert dict(scores) == dict.fromkeys(("R@1", "R@5", "R@10", "nDCG@10", "MRR@10"), 1.0)
    assert (scores.queries, scores.unlabelled) == (1, 1)
    assert scores.notes == ("1 of the 2 queries name no relevant tool, so they have no score; the means are over "
                            "the other 1",)
    with_misses, misses = score_with_misses([["x"], ["a"]], queries, 3)
    assert with_misses["R@3"] == 1.0 and with_misses.notes == scores.notes and misses == []
    labelled = score_rankings([["a"]], queries[1:])
    assert labelled.unlabelled == 0 and labelled.notes == ()
    none = score_rankings([["x"]], queries[:1])
    assert set(none.values()) == {0.0} and none.unlabelled == 1


def test_a_queries_file_with_a_byte_order_mark_is_read(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Windows editors save UTF-8 with a BOM; load_tools reads such files, and so does --queries now.
    (home / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + (home / "queries.jsonl").read_bytes())
    code, out, err = run(capsys, "eval", "tools.json", "--queries", "bom.jsonl", "--backends", "bm25", "--json")
    assert code == EXIT_OK, err  # Before: "bom.jsonl:1: not a query row (Unexpected UTF-8 BOM ...)"
    assert json.loads(out)["queries"] == len(QUERIES)
