"""Training rows (toolsearch.training.pairs) and the trainer's entry (toolsearch.training.trainer)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from toolsearch import MissingDependencyError, Tool
from toolsearch.evaluation import LabeledQuery
from toolsearch.training.pairs import catalog_anchors, query_rows, request_anchors, tool_texts
from toolsearch.training.trainer import QueryRow, TrainConfig, fine_tune_queries, request_rows

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


def test_training_reads_a_multi_part_request_as_search_does() -> None:
    """The trainer's row of a multi-part request is the one search embeds (embeddings.embed_request)."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("sentence_transformers") is None:
        with pytest.raises(MissingDependencyError, match=r"toolsearch\[train\]"):
            request_rows(None, ["a request"], TrainConfig(), "cpu")
        return
    import torch
    from sentence_transformers import SentenceTransformer

    from toolsearch.clauses import request_parts
    from toolsearch.embeddings import NumpyEmbedder

    stock = NumpyEmbedder(runtime="numpy")
    model = SentenceTransformer(str(stock.folder), device="cpu")
    texts = ["find the weather in Paris", "Post a note in the team Slack channel. Thanks. Also open a GitHub issue"]
    with torch.no_grad():
        pieces = request_rows(model, texts, TrainConfig(), "cpu").numpy()
        whole = request_rows(model, texts, TrainConfig(pieces=False), "cpu").numpy()
    np.testing.assert_allclose(whole, stock.embed_queries(texts), atol=1e-5)
    np.testing.assert_allclose(pieces[0], whole[0], atol=1e-5)
    np.testing.assert_allclose(pieces[1], stock.embed_pieces(request_parts(texts[1])[0])[0], atol=1e-5)
    assert float(pieces[1] @ whole[1]) < 0.999
