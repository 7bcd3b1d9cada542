"""Training rows (toolsearch.training.pairs) and the trainer's entry (toolsearch.training.trainer)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from toolsearch import MissingDependencyError, Tool
from toolsearch.evaluation import LabeledQuery
from toolsearch.training.pairs import catalog_anchors, query_rows, request_anchors, tool_texts
from toolsearch.training.trainer import QueryRow, TrainConfig, fine_tune_queries

TOOLS = [
    Tool("send_email", "Send an email. It goes to every recipient at once."),
    Tool("get_weather", "Current weather for a city."),
    Tool("x", ""),
]


def test_requests_are_capped_per_tool_and_keep_every_right_tool() -> None:
    queries = [LabeledQuery(str(i), f"mail {i}", ("send_email",)) for i in range(10)]
    queries.append(LabeledQuery("both", "mail and weather", ("send_email", "get_weather")))
    anchors = request_anchors(queries, per_tool=3, seed=0)
    # the two-tool request still counts for get_weather, which has room left
    assert sum("send_email" in a.relevant for a in anchors) <= 4
    assert any(a.relevant == ("send_email", "get_weather") for a in anchors)
    rows = query_rows(anchors, {"send_email": 0, "get_weather": 1})
    both = [r for r in rows if r.text == "mail and weather"]
    assert sorted(r.positive for r in both) == [0, 1] and all(r.relevant == (0, 1) for r in both)
    # a right tool outside the catalog is dropped, not guessed
    assert {r.relevant for r in query_rows(anchors, {"get_weather": 1})} == {(1,)}


def test_a_catalog_gives_name_words_and_a_sentence_per_tool() -> None:
    anchors = catalog_anchors(TOOLS, seed=0)
    assert ("send email", ("send_email",)) in [(a.text, a.relevant) for a in anchors]
    assert {a.kind for a in anchors} == {"name", "sentence"}
    assert not [a for a in anchors if a.relevant == ("x",)]  # one word, no description: nothing to learn from
    assert tool_texts(TOOLS)["get_weather"].startswith("get weather: Current weather")


def test_the_trainer_needs_the_train_extra_or_trains(tmp_path: Path) -> None:
    rows = [QueryRow("send a mail", 0, (0,)), QueryRow("is it raining", 1, (1,))]
    vectors = np.eye(2, 384, dtype=np.float32)
    config = TrainConfig(epochs=1, batch_size=2)
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("sentence_transformers") is None:
        with pytest.raises(MissingDependencyError, match=r"toolsearch\[train\]"):
            fine_tune_queries(tmp_path, vectors, rows, config, tmp_path / "out")
        return
    from toolsearch.embeddings import NumpyEmbedder

    run = fine_tune_queries(NumpyEmbedder().folder, vectors, rows, config, tmp_path / "out")
    assert run["steps"] == 1 and run["rows"] == 2 and (tmp_path / "out" / "model.safetensors").is_file()
