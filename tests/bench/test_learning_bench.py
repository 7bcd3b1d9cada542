"""The learning replay's ceilings: what a log allows a learner to gain, on hand-made cases with known answers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from fakes.tiny_dataset import write_tiny

from benchmarks.learning import ceilings, oracle_ranking, render_markdown, run
from benchmarks.lib import Dataset
from toolsearch.evaluation import LabeledQuery

RANKED = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]
IDEAL_TWO = 1.0 + 1.0 / math.log2(3)  # the ideal DCG of two relevant tools


def test_the_oracle_moves_only_relevant_seen_tools_and_keeps_the_backend_order() -> None:
    # d and b are relevant and seen (moved, b before d as the backend ranks them); z is relevant and seen
    # but not ranked (after them); e is seen but not relevant and c relevant but unseen (both stay in place).
    relevant, seen = {"d", "b", "z", "c"}, {"d", "b", "z", "e"}
    assert oracle_ranking(RANKED[:5], relevant, seen) == ["b", "d", "z", "a", "c", "e"]
    # Restricted to what the backend listed, z cannot be reached.
    assert oracle_ranking(RANKED[:5], relevant, seen, set(RANKED[:5])) == ["b", "d", "a", "c", "e"]


def test_the_ceiling_is_the_oracle_gain_and_the_reranker_one_reaches_only_the_deep_list() -> None:
    # c (rank 2) and x (beyond the top 50) are relevant and seen; j is seen, irrelevant and never moved.
    first = LabeledQuery("q1", "one", ("c", "x"))
    second = LabeledQuery("q2", "two", ("y",))  # its one tool was never called: nothing to gain
    deep = [*RANKED, *(f"t{i}" for i in range(40))]
    out = ceilings([first, second], [RANKED, RANKED], [deep, deep], {"c", "x", "j"})
    base = (1.0 / math.log2(4)) / IDEAL_TWO  # c at rank 2; y nowhere
    assert out["covered_queries"] == 0.5
    assert out["covered_pairs"] == round(2 / 3, 4)
    # The oracle puts c and x first (nDCG 1); the re-ranker can only lift c (x is not in the top 50).
    assert out["ceiling_delta_nDCG@10"] == round((1.0 - base) / 2, 4)
    assert out["rerank_ceiling_delta_nDCG@10"] == round((1.0 / IDEAL_TWO - base) / 2, 4)


def test_nothing_seen_or_everything_already_on_top_leaves_no_room() -> None:
    q = LabeledQuery("q", "one", ("a", "b"))
    assert ceilings([q], [RANKED], [RANKED], set())["ceiling_delta_nDCG@10"] == 0.0
    out = ceilings([q], [RANKED], [RANKED], {"a", "b"})
    assert out["covered_pairs"] == 1.0
    assert out["ceiling_delta_nDCG@10"] == 0.0


@pytest.fixture
def dataset(tmp_path: Path) -> Dataset:
    return Dataset(write_tiny(tmp_path / "tiny"))


def test_every_learned_row_reports_its_coverage_and_ceilings(dataset: Dataset) -> None:
    report = run([dataset], ["bm25"], test_size=18, latency_tools=0)
    rows = report["datasets"]["tiny"]["backends"]["bm25"]
    assert "covered_queries" not in rows["no learning"]
    learned = [name for name in rows if "no learning" not in name]
    assert len(learned) == 9
    for name in learned:
        r = rows[name]
        assert 0.0 <= r["covered_pairs"] <= r["covered_queries"] <= 1.0  # one tool per query here: equal
        # No learner that promotes only called tools beats the oracle, and the re-ranker reaches at most as far.
        assert r["delta_nDCG@10"] <= r["ceiling_delta_nDCG@10"] + 1e-9
        assert r["rerank_ceiling_delta_nDCG@10"] <= r["ceiling_delta_nDCG@10"]
    assert rows["0% history"]["covered_queries"] == 0.0 and rows["0% history"]["ceiling_delta_nDCG@10"] == 0.0
    # Six requests per tool: half the set as history calls every tool, so the oracle ranks every test query right.
    half = rows["50% history"]
    assert half["covered_queries"] == 1.0
    assert half["ceiling_delta_nDCG@10"] == round(1.0 - rows["no learning"]["nDCG@10"], 4)
    markdown = render_markdown(report)
    assert "### bm25: what the log allows" in markdown
    assert f"| 50% history | 100% / 100%; {half['ceiling_delta_nDCG@10']:+.3f} / " in markdown
