"""The shipped retriever's file format: int8 BERT weights with per-row scales, a model card, a digest checked on load.

A float32 MiniLM is 90 MB; per-row symmetric int8 (each weight row scaled by its largest
magnitude) is 23 MB and embeds within ~1e-3 cosine of the float model, which the retrieval report
measures. Vectors, gains and biases stay float32 (a few thousand numbers). The card records the
model's name, version, the weights' SHA-256 and how they were made (data digests, base model,
hyperparameters); loading checks the digest, so damaged or swapped weights are refused, not used.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import BackendError, CommandError, missing_dependency

if TYPE_CHECKING:  # numpy is imported where weights are read: `toolsearch info` reads cards only
    import numpy as np

__all__ = [
    "CARD_FILE", "CARRIED_DIR", "WEIGHTS_FILE", "SHIPPED", "ShippedModel", "card_model_id", "carried_model",
    "check_weights", "copy_configs", "copy_model", "export_int8", "is_model_folder", "load_weights", "read_card",
]

WEIGHTS_FILE = "model.int8.safetensors"
CARD_FILE = "card.json"
# An index that carries its own request encoder keeps it here, beside its vector files (backend/[vector/]model/).
CARRIED_DIR = "model"
_SCALE = ".int8_scale"
# Beside the weights: what the numpy encoder and sentence-transformers read to run the folder, taken
# from the base model's folder (fine-tuning changes weights, not the architecture or the tokenizer).
_COPIED = ("config.json", "tokenizer.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json")


@dataclass(frozen=True, slots=True)
class ShippedModel:
    """A model that ships inside the package: its name, version and folder."""

    name: str
    version: int

    @property
    def model_id(self) -> str:
        return f"toolsearch/{self.name}-v{self.version}"

    @property
    def folder(self) -> Path:
        return Path(__file__).resolve().parent / "data" / "models" / f"{self.name}-v{self.version}"


SHIPPED = ShippedModel("tools-minilm-l6", 2)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_card(folder: Path) -> dict[str, Any]:
    """The model card of an exported folder (its name, version, digest and how it was trained)."""
    try:
        card = json.loads((folder / CARD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BackendError(
            f"{folder / CARD_FILE} cannot be read ({exc}); reinstall toolsearch or re-export the model"
        ) from None
    if not isinstance(card, dict) or not isinstance(card.get("sha256"), str):
        raise BackendError(f"{folder / CARD_FILE} has no weights digest; re-export the model")
    return card


def card_model_id(card: dict[str, Any]) -> str:
    """The id an index records for the encoder a card describes: its model id pinned to a weights digest prefix."""
    return f"{card.get('model_id', SHIPPED.model_id)}@{card['sha256'][:12]}"


def is_model_folder(path: Path) -> bool:
    """Whether `path` is a folder exported in this format (a card beside int8 weights), not some other model."""
    return (path / CARD_FILE).is_file() and (path / WEIGHTS_FILE).is_file()


def carried_model(index_folder: Path) -> Path | None:
    """The request encoder folder a saved index carries (one `toolsearch tune` made), found from its files alone."""
    found = sorted(Path(index_folder).glob(f"backend/**/{CARRIED_DIR}/{CARD_FILE}"))
    return found[0].parent if found else None


def check_weights(folder: Path) -> Path:
    """The weights file of an exported folder, after checking it against the card's digest."""
    card = read_card(folder)
    path = folder / WEIGHTS_FILE
    if not path.is_file():
        raise BackendError(f"{path} is missing; reinstall toolsearch (pip install --force-reinstall toolsearch)")
    actual = _sha256(path)
    if actual != card["sha256"]:
        raise BackendError(
            f"{path} is damaged or was replaced: its SHA-256 is {actual[:16]}..., the model card says "
            f"{card['sha256'][:16]}...; reinstall toolsearch"
        )
    return path


def load_weights(folder: Path) -> dict[str, np.ndarray]:
    """The float32 tensors of an exported folder, after checking the weights file against the card's digest."""
    try:
        import numpy as np
        from safetensors.numpy import load_file
    except ImportError as exc:
        raise missing_dependency(exc.name or "safetensors", "vector") from None
    stored = load_file(str(check_weights(folder)))
    out: dict[str, np.ndarray] = {}
    for name, tensor in stored.items():
        if name.endswith(_SCALE):
            continue
        scale = stored.get(name + _SCALE)
        out[name] = tensor.astype(np.float32) * scale[:, None] if scale is not None else tensor.astype(np.float32)
    return out


def copy_model(folder: Path, out: Path) -> Path:
    """Copy an exported folder to the new folder `out`, checked against its digest (`toolsearch model export`)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CommandError(f"{out} already exists and is not an empty folder; give a new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:  # a copy under a temporary name, renamed when whole: an interrupted export leaves no half model
        shutil.copytree(folder, partial, dirs_exist_ok=True)
        check_weights(partial)
        if out.exists():
            out.rmdir()
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return out


def copy_configs(source: Path, out: Path) -> None:
    """Copy what runs a model folder besides its weights (configs, tokenizer) from `source` into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    for relative in _COPIED:
        if (source / relative).is_file():
            (out / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / relative, out / relative)


def export_int8(float_folder: Path, base: Path, out: Path, card: dict[str, Any]) -> Path:
    """Write `float_folder`'s weights (a fine-tuned `base`) to `out` in int8, with `base`'s configs and `card`."""
    try:
        import numpy as np
        from safetensors.numpy import load_file, save_file
    except ImportError as exc:
        raise missing_dependency(exc.name or "safetensors", "vector") from None
    tensors = load_file(str(float_folder / "model.safetensors"))
    packed: dict[str, np.ndarray] = {}
    for name in sorted(tensors):
        tensor = np.asarray(tensors[name], dtype=np.float32)
        if tensor.ndim == 2:
            scale = np.abs(tensor).max(axis=1) / 127.0
            scale[scale == 0] = 1.0
            packed[name] = np.clip(np.rint(tensor / scale[:, None]), -127, 127).astype(np.int8)
            packed[name + _SCALE] = scale.astype(np.float32)
        else:
            packed[name] = tensor
    copy_configs(base, out)
    weights = out / WEIGHTS_FILE
    save_file(packed, str(weights), metadata={"format": "toolsearch-int8-rows", "version": "1"})
    full = {"name": SHIPPED.name, "version": SHIPPED.version, "model_id": SHIPPED.model_id, **card,
            "sha256": _sha256(weights)}
    (out / CARD_FILE).write_text(json.dumps(full, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return weights
