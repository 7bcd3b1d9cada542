"""What an exported model folder is checked for before it runs or goes into an index: a digest of every file it runs
with (tokenizer and configs too, not the weights alone), a tokenizer that can be read, and errors that name the
user's folder or index, never a temporary copy."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from tuned_model import tuned_model  # noqa: F401  (a fixture)

from toolsearch import BackendError, IndexFormatError, ToolIndex, load_tools
from toolsearch.cli import EXIT_USAGE, main
from toolsearch.embeddings import ToolsEmbedder
from toolsearch.model_file import CARD_FILE, SHIPPED, WEIGHTS_FILE, card_model_id, check_weights, copy_model, read_card

ROOT = Path(__file__).resolve().parents[1]
COPIED = {"config.json", "tokenizer.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"}
# The shipped model's id: every index built with it records this, so it must not change with a new toolsearch.
SHIPPED_ID = "toolsearch/tools-minilm-l6-v2@cfaf70bf59de"

pytestmark = pytest.mark.slow  # the real model's weights


@pytest.fixture(scope="module")
def tools() -> list[object]:
    return list(load_tools(ROOT / "toolsearch" / "data" / "demo_catalog.jsonl")[:12])


def _copy(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    return to


def _cased_tokenizer(folder: Path) -> None:
    """Replace the tokenizer by a valid one for another (cased) vocabulary: same weights, other vectors."""
    tokenizer = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    tokenizer["normalizer"]["lowercase"] = False
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")


def _older_card(folder: Path) -> None:
    """Make the folder's card one exported before per-file digests were recorded (the weights' digest alone)."""
    card = read_card(folder)
    card.pop("files")
    (folder / CARD_FILE).write_text(json.dumps(card), encoding="utf-8")


# --- every file the encoder runs with is covered by the card ------------------------------------------------


def test_an_export_records_a_digest_of_every_file_and_refuses_a_swapped_one(
    tuned_model: Path, tmp_path: Path,  # noqa: F811
) -> None:
    card = read_card(tuned_model)
    assert set(card["files"]) == COPIED
    swapped = _copy(tuned_model, tmp_path / "swapped")
    _cased_tokenizer(swapped)
    with pytest.raises(BackendError, match=r"swapped/tokenizer\.json is damaged or was replaced.*export the model"):
        ToolsEmbedder(query_model=swapped, runtime="numpy").embed_queries(["Create a Calendar Event"])
    no_config = _copy(tuned_model, tmp_path / "no-config")
    (no_config / "sentence_bert_config.json").unlink()  # its max length (256) would silently become 512
    with pytest.raises(BackendError, match=r"no-config/sentence_bert_config\.json is missing"):
        check_weights(no_config)
    # a folder exported with another tokenizer records it: it loads, under an id of its own (same weights)
    reexported = read_card(swapped)
    reexported["files"]["tokenizer.json"] = hashlib.sha256((swapped / "tokenizer.json").read_bytes()).hexdigest()
    (swapped / CARD_FILE).write_text(json.dumps(reexported), encoding="utf-8")
    other = ToolsEmbedder(query_model=swapped, runtime="numpy")
    assert other.embed_queries(["Create a Calendar Event"]).shape == (1, 384)
    assert reexported["sha256"] == card["sha256"]
    assert other.model_id != ToolsEmbedder(query_model=tuned_model).model_id == card_model_id(card)


def test_the_shipped_model_keeps_its_id_and_a_copy_with_another_tokenizer_is_refused(tmp_path: Path) -> None:
    card = read_card(SHIPPED.folder)
    assert "files" not in card  # the shipped card is not re-exported: its id (and every index's) stays
    assert ToolsEmbedder().model_id == SHIPPED_ID == card_model_id(card)
    assert check_weights(SHIPPED.folder) == SHIPPED.folder / WEIGHTS_FILE
    swapped = _copy(SHIPPED.folder, tmp_path / "shipped-swapped")
    _cased_tokenizer(swapped)
    with pytest.raises(BackendError, match=r"shipped-swapped/tokenizer\.json is damaged or was replaced"):
        ToolsEmbedder(query_model=swapped, runtime="numpy").embed_queries(["Create a Calendar Event"])


def test_an_export_from_before_file_digests_still_loads_under_its_old_id(
    tuned_model: Path, tmp_path: Path,  # noqa: F811
) -> None:
    older = _copy(tuned_model, tmp_path / "older")
    _older_card(older)
    card = read_card(older)
    embedder = ToolsEmbedder(query_model=older, runtime="numpy")
    assert embedder.model_id == f"{card['model_id']}@{card['sha256'][:12]}"
    assert embedder.embed_queries(["Create a Calendar Event"]).shape == (1, 384)


def test_model_export_refuses_a_swapped_tokenizer_naming_the_source(
    tuned_model: Path, tmp_path: Path,  # noqa: F811
) -> None:
    swapped = _copy(tuned_model, tmp_path / "swapped")
    _cased_tokenizer(swapped)
    with pytest.raises(BackendError, match=rf"{swapped}/tokenizer\.json is damaged or was replaced") as caught:
        copy_model(swapped, tmp_path / "out" / "encoder")
    assert ".encoder-" not in str(caught.value)  # not the temporary copy's name
    assert not (tmp_path / "out" / "encoder").exists()


# --- a build checks the folder before it embeds with it or an index carries it -------------------------------


def test_a_build_refuses_a_model_folder_that_cannot_run_naming_it(
    tuned_model: Path, tmp_path: Path, tools: list[object],  # noqa: F811
) -> None:
    weights = _copy(tuned_model, tmp_path / "w-bad")
    with (weights / WEIGHTS_FILE).open("r+b") as fh:
        fh.truncate(1_000_000)
    with pytest.raises(BackendError, match=rf"{weights}.*model\.int8\.safetensors is damaged or was replaced"):
        ToolIndex.build(tools, "hybrid", model=str(weights))  # type: ignore[arg-type]
    # an export from before file digests: only the tokenizer's reading shows the damage
    tokenizer = _copy(tuned_model, tmp_path / "tok-corrupt")
    _older_card(tokenizer)
    (tokenizer / "tokenizer.json").write_bytes((tuned_model / "tokenizer.json").read_bytes()[:1000])
    with pytest.raises(BackendError, match=rf"{tokenizer}.*tokenizer\.json"):
        ToolIndex.build(tools, "vector", model=str(tokenizer))  # type: ignore[arg-type]


def test_the_cli_build_refuses_a_damaged_model_folder_naming_it(
    tuned_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],  # noqa: F811
) -> None:
    bad = _copy(tuned_model, tmp_path / "tok-corrupt")
    (bad / "tokenizer.json").write_bytes((tuned_model / "tokenizer.json").read_bytes()[:1000])
    catalog = ROOT / "toolsearch" / "data" / "demo_catalog.jsonl"
    code = main(["build", str(catalog), "--backend", "hybrid", "--model", str(bad), "--out", str(tmp_path / "idx")])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert f"--model {bad}: " in err and f"{bad}/tokenizer.json is damaged or was replaced" in err
    assert "needs a backend that embeds" not in err and not (tmp_path / "idx").exists()


def test_a_save_refuses_a_model_folder_damaged_since_the_build(
    tuned_model: Path, tmp_path: Path, tools: list[object],  # noqa: F811
) -> None:
    folder = _copy(tuned_model, tmp_path / "encoder")
    built = ToolIndex.build(tools, "hybrid", model=str(folder))  # type: ignore[arg-type]
    (folder / "tokenizer.json").write_bytes((tuned_model / "tokenizer.json").read_bytes()[:1000])
    with pytest.raises(BackendError, match=rf"{folder}/tokenizer\.json is damaged or was replaced"):
        built.save(tmp_path / "idx")


def test_an_index_whose_carried_model_cannot_be_read_names_the_index(
    tuned_model: Path, tmp_path: Path, tools: list[object],  # noqa: F811
) -> None:
    """An index that carries a damaged encoder (built by an earlier toolsearch, or from an encoder copy damaged
    after it was loaded) says so, naming the index and what to rebuild it with, not the private copy it runs from."""
    folder = _copy(tuned_model, tmp_path / "encoder")
    good = ToolIndex.build(tools, "hybrid", model=str(folder)).save(tmp_path / "good")  # type: ignore[arg-type]
    loaded = ToolIndex.load(good)
    private = Path(loaded.backend.dense.embedder.folder)  # type: ignore[attr-defined]
    tokenizer = private / "tokenizer.json"
    cut = tokenizer.read_bytes()[:1000]
    tokenizer.unlink()  # hard-linked to the index's own file: a new file, so only the private copy is damaged
    tokenizer.write_bytes(cut)
    damaged = loaded.save(tmp_path / "damaged")
    with pytest.raises(IndexFormatError) as caught:
        ToolIndex.load(damaged)
    message = str(caught.value)
    assert message.startswith(f"{damaged}: the request encoder this index carries cannot be read")
    assert "tokenizer.json" in message and "rebuild the index with a good model folder" in message
    assert str(private) not in message
    assert ToolIndex.load(good).search("create a calendar event", 3).hits  # the index it came from is whole


# --- the query adapter's matrix is for one model -------------------------------------------------------------


def test_query_adapter_is_refused_for_a_model_it_has_no_matrix_for(tools: list[object]) -> None:
    for backend in ("vector", "hybrid"):
        with pytest.raises(BackendError, match=r"query_adapter=True.*sentence-transformers/all-MiniLM-L6-v2 only, "
                           rf"not {SHIPPED_ID}; build with model='minilm'"):
            ToolIndex.build(tools, backend, query_adapter=True)  # type: ignore[arg-type]
    adapted = ToolIndex.build(tools, "vector", model="minilm", query_adapter=True)  # type: ignore[arg-type]
    assert adapted.backend.adapter is not None  # type: ignore[attr-defined]
