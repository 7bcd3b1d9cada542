"""benchmarks/tune.py's split: no test query's text is in the replayed usage log."""

from __future__ import annotations

from benchmarks.tune import split
from toolsearch.evaluation import LabeledQuery


def test_no_test_text_is_in_the_history() -> None:
    # 40 texts, each in three rows (a repeat, another case and spacing, another tool): the old split put copies
    # of most test texts in the history
    queries = [LabeledQuery(f"{i}-{copy}", text, (f"t{i}" if copy < 2 else f"u{i}",))
               for i in range(40) for copy, text in enumerate((f"find thing {i}", f"find thing {i}",
                                                               f"Find  THING {i} "))]
    test, history = split(queries, 10, 100, 0)
    assert len(test) == 10 and len(history) == 30
    seen = {" ".join(q.query.split()).casefold() for q in history}
    assert not [q for q in test if " ".join(q.query.split()).casefold() in seen]
    # one query per text, labelled with every tool its rows named
    assert all(len(q.relevant) == 2 for q in test + history)
    assert len({q.query.casefold() for q in test + history}) == 40


def test_the_split_is_seeded() -> None:
    queries = [LabeledQuery(str(i), f"request {i}", ("t",)) for i in range(50)]
    assert split(queries, 5, 10, 3) == split(queries, 5, 10, 3)
    assert split(queries, 5, 10, 3) != split(queries, 5, 10, 4)
