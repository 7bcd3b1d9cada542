"""The shipped retriever's file format: int8 BERT weights with per-row scales, a model card, a digest checked on load.

A float32 MiniLM is 90 MB; per-row symmetric int8 (each weight row scaled by its largest
magnitude) is 23 MB and embeds within ~1e-3 cosine of the float model, which the retrieval report
measures. Vectors, gains and biases stay float32 (a few thousand numbers). The card records the
model's name, version, the weights' SHA-256, the SHA-256 of every other file it runs with (tokenizer, configs;
cards exported before those were recorded have the weights' alone) and how they were made (data digests, base
model, hyperparameters); loading checks the digests, so damaged or swapped files are refused, not used.
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
    "check_model_folder", "check_weights", "copy_configs", "copy_model", "export_int8", "is_model_folder",
    "load_weights", "model_folder_problem", "read_card",
]

WEIGHTS_FILE = "model.int8.safetensors"
CARD_FILE = "card.json"
# An index that carries its own request encoder keeps it here, beside its vector files (backend/[vector/]model/).
CARRIED_DIR = "model"
_SCALE = ".int8_scale"
# Beside the weights: what the numpy encoder and sentence-transformers read to run the folder, taken
# from the base model's folder (fine-tuning changes weights, not the architecture or the tokenizer).
_COPIED = ("config.json", "tokenizer.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json")
# The card's SHA-256 of each of those files (`export_int8` records them; a card without it is older: its weights'
# digest is all it records, and its model id stays what it was).
_FILES = "files"


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

# The shipped model's card predates per-file digests and the package must not change it (its id, and every index
# built with it, would); its files are pinned here instead, by its weights' digest, so a folder that carries the
# shipped weights with another tokenizer or config (a copy edited, a file lost) is refused as a newer card's is.
_SHIPPED_FILES: dict[str, dict[str, str]] = {
    "cfaf70bf59de34b12c338546e8d116033fc55e1a05e9029844fc303167a69b3d": {
        "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
        "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
        "sentence_bert_config.json": "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
        "1_Pooling/config.json": "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
    },
}


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
        raise BackendError(f"{folder / CARD_FILE} cannot be read ({exc}); {_advice(folder)}") from None
    if not isinstance(card, dict) or not isinstance(card.get("sha256"), str):
        raise BackendError(f"{folder / CARD_FILE} has no weights digest; {_advice(folder)}")
    files = card.get(_FILES)
    if files is not None and not (
        isinstance(files, dict) and files
        and all(isinstance(k, str) and _safe_relative(k) and isinstance(v, str) for k, v in files.items())
    ):
        raise BackendError(
            f"{folder / CARD_FILE}: its {_FILES!r} digests are malformed (a non-empty map of relative file paths "
            f"to SHA-256 digests is expected); {_advice(folder)}"
        )
    return card


def _safe_relative(name: str) -> bool:
    path = Path(name)
    return bool(name) and not path.is_absolute() and ".." not in path.parts


def card_model_id(card: dict[str, Any]) -> str:
    """The id an index records for the encoder a card describes: its model id pinned to a digest prefix.

    A card that records a digest per file is named by one digest of them all (weights, tokenizer, configs), so two
    folders that differ in any file the encoder runs with have different ids; an older card, which records the
    weights' digest alone (the shipped model's), keeps the id it always had: the weights' digest prefix.
    """
    files = card.get(_FILES)
    if isinstance(files, dict) and files:
        whole = json.dumps({"weights": card["sha256"], _FILES: files}, sort_keys=True)
        digest = hashlib.sha256(whole.encode("utf-8")).hexdigest()
    else:
        digest = card["sha256"]
    return f"{card.get('model_id', SHIPPED.model_id)}@{digest[:12]}"


def _recorded_files(card: dict[str, Any]) -> dict[str, str]:
    """The SHA-256 of each file besides the weights that `card` records (or the shipped model's pinned ones)."""
    files = card.get(_FILES)
    if isinstance(files, dict):
        return {str(k): str(v) for k, v in files.items()}
    return _SHIPPED_FILES.get(card["sha256"], {})


def is_model_folder(path: Path) -> bool:
    """Whether `path` is a folder exported in this format (a card beside int8 weights), not some other model."""
    return (path / CARD_FILE).is_file() and (path / WEIGHTS_FILE).is_file()


def carried_model(index_folder: Path) -> Path | None:
    """The request encoder folder a saved index carries (one `toolsearch tune` made), found from its files alone."""
    found = sorted(Path(index_folder).glob(f"backend/**/{CARRIED_DIR}/{CARD_FILE}"))
    return found[0].parent if found else None


def _advice(folder: Path) -> str:
    """What to do about an exported folder whose files are damaged: the shipped one comes back with toolsearch."""
    if folder.resolve() == SHIPPED.folder:
        return "reinstall toolsearch (pip install --force-reinstall toolsearch)"
    return ("export the model to this folder again (toolsearch model export INDEX --out DIR), or reinstall toolsearch "
            "if the folder is a copy of the model it ships")


def _digest_problem(folder: Path, card: dict[str, Any]) -> str | None:
    """What is wrong with an exported folder's files against its card's digests (None when they all match)."""
    recorded = {WEIGHTS_FILE: card["sha256"], **_recorded_files(card)}
    for relative, expected in recorded.items():
        path = folder / relative
        if not path.is_file():
            return f"{path} is missing (the model card records its digest)"
        actual = _sha256(path)
        if actual != expected:
            return (f"{path} is damaged or was replaced: its SHA-256 is {actual[:16]}..., the model card says "
                    f"{expected[:16]}...")
    return None


def check_weights(folder: Path) -> Path:
    """The weights file of an exported folder, after checking it, and every other file the card records a digest
    of (tokenizer, configs), against the card's digests."""
    card = read_card(folder)
    problem = _digest_problem(folder, card)
    if problem is not None:
        raise BackendError(f"{problem}; {_advice(folder)}")
    return folder / WEIGHTS_FILE


def model_folder_problem(folder: Path) -> str | None:
    """What keeps an exported folder from running (None when nothing does): its card, the digests it records, its
    JSON configs and its tokenizer (read as the encoder reads it, where the `tokenizers` package is installed)."""
    try:
        card = read_card(folder)
    except BackendError as exc:
        return str(exc).rsplit("; ", 1)[0]  # the reason, without read_card's advice
    problem = _digest_problem(folder, card)
    if problem is not None:
        return problem
    for relative in _COPIED:
        path = folder / relative
        if relative == "config.json" and not path.is_file():
            return f"{path} is missing"
        if path.is_file() and relative != "tokenizer.json":
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                return f"{path} cannot be read ({exc})"
    tokenizer = folder / "tokenizer.json"
    if not tokenizer.is_file():
        return f"{tokenizer} is missing"
    try:
        from tokenizers import Tokenizer
    except ImportError:  # the encoder cannot run either; loading it says which extra to install
        return None
    try:
        Tokenizer.from_file(str(tokenizer))
    except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot parse
        return f"{tokenizer} cannot be read as a tokenizer ({' '.join(str(exc).split())})"
    return None


def check_model_folder(folder: Path, what: str | None = None) -> None:
    """Refuse an exported folder that cannot run (`model_folder_problem`), naming it as `what` (the folder)."""
    problem = model_folder_problem(folder)
    if problem is not None:
        # the problem names the file, so the folder is said once (a caller's `--model X:` prefix names it too)
        shown = what or str(folder)
        where = "" if shown in problem else f"{shown}: "
        raise BackendError(f"{where}the model cannot be used: {problem}; {_advice(folder)}")


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
        check_model_folder(folder)  # the source's own names in the message, not the temporary copy's
        shutil.copytree(folder, partial, dirs_exist_ok=True)
        problem = model_folder_problem(partial)
        if problem is not None:  # the copy differs from the source just checked: a failing disk, a concurrent change
            raise BackendError(
                f"the copy of {folder} in {out.parent} differs from it ({problem.replace(str(partial), str(out))}); "
                "check the disk and run the export again"
            )
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
    files = {relative: _sha256(out / relative) for relative in _COPIED if (out / relative).is_file()}
    full = {"name": SHIPPED.name, "version": SHIPPED.version, "model_id": SHIPPED.model_id,
            **{k: v for k, v in card.items() if k != _FILES}, "sha256": _sha256(weights),
            **({_FILES: files} if files else {})}
    (out / CARD_FILE).write_text(json.dumps(full, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return weights
