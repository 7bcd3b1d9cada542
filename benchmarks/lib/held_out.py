"""Held-out models: for each data set, the tools model whose request encoder was trained without it.

The tools model that ships was trained on the shared data sets' requests, so a figure it scores on
them is not held out. `scripts/train_retriever.py --without SET --out DIR/without-SET` trains the
same model without one set; a benchmark given `--held-out DIR` scores each set with the model that
never saw it. Every benchmark with that option loads the models here, and refuses, before anything
runs, when one is missing or was trained with its set.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["MODEL_BACKENDS", "describe", "held_out_embedder", "held_out_embedders", "held_out_folder",
           "held_out_line", "train_command"]

# The backends a request encoder shapes; the others (bm25, regex) use no model and are held out as they are.
MODEL_BACKENDS = ("vector", "hybrid", "postgres")


def held_out_folder(root: Path, dataset: str) -> Path:
    """Where `--held-out root` keeps the model trained without `dataset`."""
    return root / f"without-{dataset}"


def train_command(root: Path, dataset: str) -> str:
    """The command that makes the model `held_out_folder(root, dataset)` names."""
    return f"python scripts/train_retriever.py --without {dataset} --out {held_out_folder(root, dataset)}"


def _why_not(root: Path, dataset: str) -> tuple[str | None, Any]:
    """(what is wrong with the held-out model of `dataset`, None when it is fine; the embedder when it loads)."""
    from toolsearch._errors import ToolSearchError
    from toolsearch.embeddings import ToolsEmbedder
    from toolsearch.model_file import CARD_FILE

    folder = held_out_folder(root, dataset)
    if not folder.is_dir():
        return f"{folder} is missing", None
    if not (folder / CARD_FILE).is_file():
        return f"{folder} holds no trained model (no {CARD_FILE})", None
    try:
        embedder = ToolsEmbedder(folder)
    except ToolSearchError as exc:  # no card, or one without a weights digest
        return f"{folder} is not a model folder ({exc})", None
    left_out = embedder.card.get("left_out") or []
    if dataset not in left_out:
        return f"{folder} was trained with {dataset} (its card leaves out {list(left_out) or 'nothing'})", None
    return None, embedder


def held_out_embedders(root: Path, datasets: Sequence[str]) -> dict[str, Any]:
    """Each data set's held-out model (a ToolsEmbedder), by data set name.

    All of them are checked before anything runs, so a long run does not stop at its last set: a set
    whose model is missing, is not a model folder or was trained with the set is refused (SystemExit),
    each named with its folder and the command that makes it.
    """
    found: dict[str, Any] = {}
    problems: list[str] = []
    for dataset in datasets:
        why, embedder = _why_not(root, dataset)
        if why is None:
            found[dataset] = embedder
        else:
            problems.append(f"data set {dataset}: {why}; make it with `{train_command(root, dataset)}`")
    if problems:
        raise SystemExit(f"--held-out {root}: {len(problems)} of the {len(datasets)} data set(s) have no model "
                         "trained without them, so their figures would not be held out:\n  " + "\n  ".join(problems))
    return found


def held_out_embedder(root: Path, dataset: str) -> Any:
    """The held-out model of one data set (see `held_out_embedders`)."""
    return held_out_embedders(root, [dataset])[dataset]


def describe(embedders: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """For the report's JSON: each data set's held-out model id, and the dense weight hybrid and postgres fuse it
    with (its card's, else the stock model's)."""
    from toolsearch.backends.hybrid import model_dense_weight

    return {name: {"model": e.model_id, "dense_weight": model_dense_weight(e),
                   "dense_weight_on_card": e.hybrid_dense_weight is not None} for name, e in embedders.items()}


def held_out_line(root: str, models: dict[str, dict[str, Any]], *, latency: str = "") -> str:
    """The report header's line saying what `--held-out root` changed: `models` maps each data set to the model
    id and the hybrid dense weight its backends ran with; `latency` names the report's timing part, if it ran,
    which runs the model that ships over a catalog pooled from every set."""
    also = (f"The {latency}, over a catalog pooled from every set, runs the model that ships (a timing does not "
            "depend on which weights)." if latency else "")
    per = "; ".join(f"{name}: `{m['model']}`" + (f" (hybrid dense weight {m['dense_weight']}"
                                                   + ("" if m.get("dense_weight_on_card") else
                                                      ", the stock model's: its card names none") + ")"
                                                   if m.get("dense_weight") is not None else "")
                    for name, m in models.items())
    backends = f"{', '.join(MODEL_BACKENDS[:-1])} and {MODEL_BACKENDS[-1]}"
    return (f"- Held out (`--held-out {root}`): on each data set the {backends} rows run the tools "
            "model whose request encoder was trained without that set (`without-<set>/`, made by "
            "`python scripts/train_retriever.py --without SET`), not the model that ships (trained on every set); "
            f"bm25 uses no model. {per}." + (f" {also}" if also else ""))
