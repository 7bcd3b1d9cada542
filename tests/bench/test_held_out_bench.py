"""`--held-out DIR` of the benchmarks that score ranking: each set scored by the tools model trained without it, and a
clear refusal, before anything runs, when such a model is missing or saw the set."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fakes.tiny_dataset import write_tiny
from pg_server import PostgresServer, pg_server  # noqa: F401  (pg_server: a fixture)
from tuned_model import tuned_model  # noqa: F401  (a fixture)

from benchmarks import learning, postgres, retrieval, tune
from benchmarks.lib import Dataset, cli
from toolsearch.embeddings import ToolsEmbedder
from toolsearch.model_file import export_int8
from toolsearch.training.tune import float_folder

HELD_OUT_ID = "toolsearch/tools-minilm-l6-v2-without-tiny"


@pytest.fixture(autouse=True)
def _no_settling(monkeypatch: pytest.MonkeyPatch) -> None:
    """write_report's wait for the run's own load to fade, off: these tests read what a report says, not a load."""
    monkeypatch.setattr("benchmarks.lib.END_SETTLE_S", 0.0)


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_tiny(tmp_path / "tiny", tools=4, cities=("lisbon", "oslo"))


@pytest.fixture(scope="module")
def held_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A --held-out folder with `without-tiny/`: a real exported model (the shipped encoder's weights) whose card
    says it was trained without `tiny` and names its own hybrid dense weight, as scripts/train_retriever.py and
    scripts/tools_model_loso.py write them."""
    work = tmp_path_factory.mktemp("held-out")
    base = float_folder(ToolsEmbedder(), work / "base")
    export_int8(base, base, work / "models" / "without-tiny",
                {"name": "held", "version": 1, "model_id": HELD_OUT_ID, "left_out": ["tiny"],
                 "hyperparameters": {"pieces": True}, "hybrid": {"dense_weight": 0.5}})
    return work / "models"


def _learning(argv: list[str]) -> int:
    return cli.run(learning.__file__, None, learning.add_arguments, learning.main, argv)


def test_learning_refuses_a_set_without_a_held_out_model_naming_it_its_folder_and_the_command(
    tiny: Path, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    with pytest.raises(SystemExit) as refused:
        _learning(["-q", "--dataset", str(tiny), "--held-out", str(models), "--test", "4", "--latency-tools", "0",
                   "--backends", "hybrid", "--out", str(tmp_path / "out")])
    message = str(refused.value)
    assert "data set tiny" in message and f"{models / 'without-tiny'} is missing" in message
    assert f"python scripts/train_retriever.py --without tiny --out {models / 'without-tiny'}" in message
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_learning_refuses_a_model_that_was_trained_with_the_set(
    tiny: Path, tmp_path: Path, tuned_model: Path  # noqa: F811
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "without-tiny").symlink_to(tuned_model)  # a real model, whose card leaves no set out
    with pytest.raises(SystemExit, match=r"data set tiny: .*without-tiny was trained with tiny"):
        _learning(["-q", "--dataset", str(tiny), "--held-out", str(models), "--test", "4", "--latency-tools", "0",
                   "--out", str(tmp_path / "out")])


def test_learning_scores_each_set_with_the_model_trained_without_it(
    tiny: Path, held_out: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert _learning(["-q", "--dataset", str(tiny), "--held-out", str(held_out), "--test", "4", "--latency-tools",
                      "0", "--backends", "bm25,hybrid", "--out", str(out), "--name", "held"]) == 0
    report = json.loads((out / "held.json").read_text())
    model = report["settings"]["held_out_models"]["tiny"]
    assert model["model"].startswith(HELD_OUT_ID + "@") and model["dense_weight"] == 0.5
    assert report["datasets"]["tiny"]["models"] == {"hybrid": model["model"]}  # what the index itself ran
    header = (out / "held.md").read_text().split("## Targets")[0]
    assert f"- Held out (`--held-out {held_out}`)" in header
    assert f"tiny: `{model['model']}` (hybrid dense weight 0.5)" in header
    assert "are not held out" not in header


def test_retrieval_refuses_a_missing_held_out_model_the_same_way(tiny: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"data set tiny: .*without-tiny is missing; make it with `python "
                       r"scripts/train_retriever.py --without tiny"):
        retrieval.run([Dataset(tiny)], ["hybrid"], [], held_out=tmp_path / "none")


def test_tune_refuses_a_missing_held_out_model_the_same_way(tiny: Path, tmp_path: Path) -> None:
    # tune.py had a check of its own, which did not see a folder trained with the set
    with pytest.raises(SystemExit, match=r"data set tiny: .*without-tiny is missing; make it with `python "
                       r"scripts/train_retriever.py --without tiny"):
        tune.run([Dataset(tiny)], tmp_path / "none", test_size=2, history=2, epochs=None, learning_rate=None,
                 catalog=False, threads=1, seed=0, log=print)


def test_postgres_refuses_a_missing_held_out_model_before_it_reaches_a_server(tiny: Path, tmp_path: Path) -> None:
    # a DSN nothing answers: reaching for it would fail otherwise, and starting a server would take seconds
    with pytest.raises(SystemExit) as refused:
        postgres.main(["--sections", "quality", "--dataset", str(tiny), "--dsn", "postgresql://nobody@127.0.0.1:9/x",
                       "--held-out", str(tmp_path / "none"), "--out", str(tmp_path / "out")])
    message = str(refused.value)
    assert "data set tiny" in message and f"{tmp_path / 'none' / 'without-tiny'} is missing" in message
    assert "python scripts/train_retriever.py --without tiny" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_postgres_embeds_with_the_held_out_model_on_both_sides(
    tiny: Path, held_out: Path, tmp_path: Path, pg_server: PostgresServer, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    # postgres embeds in this process (the library's model; the store keeps the vectors): both backends of the
    # quality section get the held-out model
    cache = os.environ["TOOLSEARCH_CACHE_DIR"]
    monkeypatch.setenv("TOOLSEARCH_CACHE_DIR", cache)  # postgres.main sets it for its run; put back after
    out = tmp_path / "out"
    assert postgres.main(["--sections", "quality", "--dataset", str(tiny), "--dsn", pg_server.dsn(), "--held-out",
                          str(held_out), "--quality-limit", "8", "--recall-queries", "2", "--cache-dir", cache,
                          "--out", str(out), "--name", "pg"]) == 0
    report = json.loads((out / "pg.json").read_text())
    model = report["held_out_models"]["tiny"]["model"]
    assert model.startswith(HELD_OUT_ID + "@")
    assert report["quality"][0]["models"] == {"hybrid": model, "postgres": model}
    assert f"- Held out (`--held-out {held_out}`)" in (out / "pg.md").read_text().split("## Quality")[0]
