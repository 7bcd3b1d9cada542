"""The shipped retriever's file format (toolsearch.model_file) and the embedder that runs it (ToolsEmbedder)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from toolsearch import BackendError, IndexFormatError, ToolIndex, load_tools
from toolsearch.embeddings import DEFAULT_MODEL_ID, NumpyEmbedder, ToolsEmbedder, resolve_embedder
from toolsearch.model_file import CARD_FILE, SHIPPED, WEIGHTS_FILE, export_int8, load_weights, read_card

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["send an email to the team", "weather forecast for Paris tomorrow", "refund a card payment"]

pytestmark = pytest.mark.slow  # the real model's weights


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stock model exported in int8 as if it had been trained: its query side must stay the stock model's."""
    base = NumpyEmbedder().folder
    out = tmp_path_factory.mktemp("model") / "exported"
    export_int8(base, base, out, {"model_id": "toolsearch/test-export"})
    return out


def test_int8_rows_embed_like_the_float_model(exported: Path) -> None:
    stock = NumpyEmbedder(runtime="numpy").embed_queries(TEXTS)
    int8 = NumpyEmbedder(str(exported), runtime="numpy").embed_queries(TEXTS)
    assert (stock * int8).sum(axis=1).min() > 0.999
    assert (exported / WEIGHTS_FILE).stat().st_size < 30_000_000  # what the wheel may gain


def test_damaged_or_swapped_weights_are_refused(exported: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(exported, damaged)
    with (damaged / WEIGHTS_FILE).open("r+b") as fh:
        fh.seek(-100, 2)
        fh.write(b"\x00" * 50)
    with pytest.raises(BackendError, match=r"damaged or was replaced.*reinstall"):
        load_weights(damaged)
    (damaged / CARD_FILE).write_text("{}")
    with pytest.raises(BackendError, match="no weights digest"):
        read_card(damaged)


def test_the_shipped_model_is_checked_and_named_by_its_digest() -> None:
    card = read_card(SHIPPED.folder)
    embedder = ToolsEmbedder()
    assert embedder.model_id == f"{SHIPPED.model_id}@{card['sha256'][:12]}"
    assert resolve_embedder("tools").model_id == embedder.model_id
    assert card["base_model"]["id"] == DEFAULT_MODEL_ID and not card["left_out"]
    # tools keep the stock model's vectors; requests are embedded by the trained encoder
    assert np.allclose(embedder.embed(TEXTS), NumpyEmbedder().embed(TEXTS), atol=1e-6)
    assert (embedder.embed_queries(TEXTS) * NumpyEmbedder().embed_queries(TEXTS)).sum(axis=1).max() < 0.999
    assert (SHIPPED.folder / WEIGHTS_FILE).stat().st_size < 30_000_000


def test_an_index_records_its_model_and_never_mixes_two(tmp_path: Path) -> None:
    tools = load_tools(ROOT / "toolsearch" / "data" / "demo_catalog.jsonl")[:40]
    built = ToolIndex.build(tools, "vector", model="tools")
    folder = built.save(tmp_path / "tools-index")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["options"]["model"] == ToolsEmbedder().model_id
    assert ToolIndex.load(folder).backend.embedder.model_id == ToolsEmbedder().model_id  # type: ignore[attr-defined]
    with pytest.raises(IndexFormatError, match="built with embedding model"):
        ToolIndex.load(folder, embedder=NumpyEmbedder())


@pytest.mark.parametrize(
    "pinned",
    [
        "toolsearch/tools-minilm-l6-v1@2d25511cf103",  # the first release's weights: an index built before v2
        "toolsearch/tools-minilm-l6-v1",
        f"{SHIPPED.model_id}@000000000000",  # this version's name, other weights
    ],
)
def test_another_version_of_the_tools_model_is_refused_clearly(pinned: str) -> None:
    # said without assuming an index: `--model` on a build names the old version too
    with pytest.raises(BackendError, match=rf"{pinned} is not the tools model this toolsearch ships "
                       rf"\({SHIPPED.model_id}@.*needs a rebuild.*--model tools") as raised:
        resolve_embedder(pinned)
    assert "this index" not in str(raised.value)
