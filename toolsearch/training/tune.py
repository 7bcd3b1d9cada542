"""`toolsearch tune`: an index's own query encoder, fine-tuned on its usage log (and, optionally, its catalog).

The shipped tools model learned requests in general; a deployment's usage log says what its own
users ask for and which of its own tools answered. `tune_index` starts from the index's current
query encoder (the shipped tools model, a model tuned before, or the stock MiniLM), trains it on
the log's (request, called tool) pairs against the index's own tool vectors with the shipped
model's recipe (toolsearch.training.trainer: the request side only, every tool of the catalog a
negative), and returns the same index answering with the new encoder. The tool vectors do not
move, so nothing is re-embedded but the requests; the new encoder travels inside the index
folder (`model/` beside the vector files), digest-checked when the index opens.

It needs the requests' text: a log kept with privacy "raw". Hashed or token-only entries say
which words a request had, not how it read, and an encoder trained on sorted word bags would
learn a language nobody types.
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import BackendError, InvalidArgumentError, UsageError, missing_dependency
from ..embeddings import DEFAULT_MODEL_ID, NumpyEmbedder, ToolsEmbedder
from ..index import MAX_QUERY_CHARS, ToolIndex
from ..model_file import copy_configs, export_int8, load_weights
from ..scratch import new_scratch
from ..usage import UsageLog
from .pairs import Anchor, catalog_anchors, query_rows
from .trainer import TrainConfig, fine_tune_queries

__all__ = ["TUNED_MODEL_ID", "TUNE_CONFIG", "float_folder", "tune_index", "usage_anchors"]

# The model id a tuned encoder records (with its digest: `toolsearch/tuned@<sha256[:12]>`).
TUNED_MODEL_ID = "toolsearch/tuned"
# The shipped model's recipe with smaller batches (a log is hundreds to thousands of pairs, not tens of
# thousands) and a larger step: 1e-4 against 3e-5 took metatool +0.081 nDCG@10 against +0.011 (chosen there,
# then bfcl +0.050 and seal_tools +0.004: benchmarks/results/tune.md).
TUNE_CONFIG = TrainConfig(epochs=2, batch_size=32, learning_rate=1e-4)


def usage_anchors(log: UsageLog, tools: set[str]) -> tuple[list[Anchor], dict[str, int]]:
    """One anchor per distinct request text of the log, with every catalog tool it led to; and what was skipped."""
    called: dict[str, dict[str, None]] = defaultdict(dict)
    skipped = {"without_text": 0, "unknown_tool": 0}
    for entry in log:
        text = (entry.query or "").strip()[:MAX_QUERY_CHARS]
        if not text:
            skipped["without_text"] += 1
        elif entry.called not in tools:
            skipped["unknown_tool"] += 1
        else:
            called[text][entry.called] = None
    return [Anchor(text, tuple(names), "request") for text, names in called.items()], skipped


def tune_index(
    index: ToolIndex,
    log: UsageLog,
    *,
    config: TrainConfig = TUNE_CONFIG,
    catalog: bool = False,
    work: Path | None = None,
    progress: Callable[[str], None] = print,
) -> tuple[ToolIndex, dict[str, Any]]:
    """`index` answering with a query encoder fine-tuned on `log`; and the new model's card.

    `catalog`: add the pseudo-requests every tool gives (its name words, a description sentence).
    The given index is left as it is; save the new one to keep its encoder (until then it lives in a temporary
    folder, under `work` when given, removed with the new index's encoder or when the process ends). Needs the
    `train` extra (torch, sentence-transformers).
    """
    if not (math.isfinite(config.learning_rate) and 0 < config.learning_rate <= 1):
        raise InvalidArgumentError(
            f"tune: learning_rate must be a number above 0 and at most 1 (the recipe's is "
            f"{TUNE_CONFIG.learning_rate}), got {config.learning_rate}"
        )
    dense = _dense_half(index)
    names = index.catalog.names  # from a stored index's name table: no tool is parsed for it
    anchors, skipped = usage_anchors(log, set(names))
    if not anchors:
        raise UsageError(_no_pairs(log, skipped))
    if catalog:
        anchors += catalog_anchors(list(index.catalog), seed=config.seed)
    rows = query_rows(anchors, {n: i for i, n in enumerate(names)})
    matrix = dense.tool_matrix(names)
    base_embedder = dense.embedder
    with tempfile.TemporaryDirectory(prefix="toolsearch-tune-", dir=work) as scratch:
        base = float_folder(base_embedder, Path(scratch) / "base")
        progress(f"training on {len(rows)} pairs ({len(anchors)} requests) against {len(names)} tools"
                 + _skipped_note(skipped))
        run = fine_tune_queries(base, matrix, rows, config, Path(scratch) / "float", log=progress)
        _refuse_a_diverged_run(run, Path(scratch) / "float", config)
        card = {
            "name": "tuned",
            "version": 1,
            "model_id": TUNED_MODEL_ID,
            "architecture": "all-MiniLM-L6-v2 (BERT, 6 layers, 384-d, mean pooling), query encoder only",
            "base_model": {"id": base_embedder.model_id},
            "document_model": DEFAULT_MODEL_ID,
            "data": {
                "catalog_sha256": index.catalog.hash,
                "tools": len(names),
                "usage_entries": len(log),
                "usage_requests": len(anchors) - _catalog_count(anchors),
                "usage_pairs_sha256": _pairs_digest(anchors),
                "skipped": skipped,
                "catalog_pairs": catalog,
            },
            "loss": "InfoNCE over every tool of the index (fixed tool vectors), a request's other right tools and "
                    "near-duplicates of its right tool masked",
            "hyperparameters": config.as_dict(),
            "hybrid": getattr(base_embedder, "card", {}).get("hybrid", {}),  # the base's fusion weight
            "run": run,
            "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        # The new encoder lives here until the index is saved (saving copies it in); it goes with its embedder.
        folder = new_scratch("tuned-", within=work)
        try:
            export_int8(Path(scratch) / "float", base, folder.path, card)
            tuned = ToolsEmbedder(query_model=folder.path)
            # Weights finite yet so large that a request's vector overflows answer no request either: what
            # overflows is said below as an error, not as numpy's warnings on the way
            with np.errstate(over="ignore", invalid="ignore"):
                tuned.warm()
                if not np.isfinite(tuned.embed_queries([anchors[0].text])).all():
                    raise BackendError(_diverged(config, run, "the vectors it gives requests are not finite"))
        except BaseException:
            folder.remove()
            raise
    folder.goes_with(tuned)
    return _with_embedder(index, tuned, names, matrix), tuned.card


def _refuse_a_diverged_run(run: dict[str, Any], trained: Path, config: TrainConfig) -> None:
    """Training that diverged (a learning rate far too large) leaves NaN or infinite weights, and an index saved
    with them finds no tool for any request: refused here, before anything is saved or the usage log re-ranked, so
    the index and its log stay as they were."""
    losses = (run.get("loss_start"), run.get("loss_end"))
    if not all(isinstance(loss, int | float) and math.isfinite(loss) for loss in losses):
        raise BackendError(_diverged(config, run, "its loss is not finite"))
    try:
        from safetensors.numpy import load_file
    except ImportError as exc:
        raise missing_dependency(exc.name or "safetensors", "vector") from None
    for weights in sorted(trained.rglob("*.safetensors")):
        for name, tensor in load_file(str(weights)).items():
            if np.issubdtype(tensor.dtype, np.floating) and not np.isfinite(tensor).all():
                raise BackendError(_diverged(config, run, f"its weights are not finite ({name})"))


def _diverged(config: TrainConfig, run: dict[str, Any], what: str) -> str:
    return (
        f"training diverged at learning rate {config.learning_rate} ({what}; loss {run.get('loss_start')} -> "
        f"{run.get('loss_end')}); nothing was saved, the index and its usage log are as they were. Tune again with "
        f"a smaller --learning-rate (the recipe's is {TUNE_CONFIG.learning_rate})"
    )


def _vector_half(backend: Any) -> Any:
    """The vector backend that embeds requests: the backend itself, or a hybrid's dense half (else None)."""
    from ..backends.hybrid import HybridBackend
    from ..backends.vector import VectorBackend

    dense = backend.dense if isinstance(backend, HybridBackend) else backend
    return dense if isinstance(dense, VectorBackend) else None


def _dense_half(index: ToolIndex) -> Any:
    dense = _vector_half(index.backend)
    if dense is None:
        raise BackendError(
            f"tune trains the encoder a vector or hybrid index embeds requests with; this index uses the "
            f"{index.backend_name} backend: build it with --backend hybrid"
        )
    if getattr(dense.embedder, "document_model_id", dense.embedder.model_id) != DEFAULT_MODEL_ID:
        raise BackendError(
            f"tune fine-tunes the tools model or the stock all-MiniLM-L6-v2; this index embeds with "
            f"{dense.embedder.model_id}: build it with the default model"
        )
    return dense


def float_folder(embedder: Any, out: Path) -> Path:
    """A sentence-transformers folder of the encoder that embeds requests now (the int8 weights widened)."""
    if isinstance(embedder, NumpyEmbedder):
        return embedder.folder  # the stock model's own float folder
    if not isinstance(embedder, ToolsEmbedder):
        raise BackendError(f"tune cannot start from {embedder!r}: it needs the tools model or the stock model")
    try:
        from safetensors.numpy import save_file
    except ImportError as exc:
        raise missing_dependency(exc.name or "safetensors", "vector") from None
    copy_configs(embedder.folder, out)
    save_file({k: np.ascontiguousarray(v) for k, v in load_weights(embedder.folder).items()},
              str(out / "model.safetensors"))
    return out


def _catalog_count(anchors: list[Anchor]) -> int:
    return sum(a.kind != "request" for a in anchors)


def _pairs_digest(anchors: list[Anchor]) -> str:
    pairs = sorted((a.text, list(a.relevant)) for a in anchors if a.kind == "request")
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode()).hexdigest()


def _skipped_note(skipped: dict[str, int]) -> str:
    """What of the log was left out, said beside what trains (a log of another catalog's names shows up here)."""
    parts = []
    if skipped["without_text"]:
        parts.append(f"{skipped['without_text']} without request text")
    if skipped["unknown_tool"]:
        parts.append(f"{skipped['unknown_tool']} calling tools this index does not have")
    return f"; log entries left out: {', '.join(parts)}" if parts else ""


def _no_pairs(log: UsageLog, skipped: dict[str, int]) -> str:
    if not len(log):
        return "the usage log is empty: tune learns from searches that led to successful calls; record some first"
    if skipped["without_text"] == len(log):
        return (
            f"the usage log keeps no request text (privacy {log.privacy!r}): tune learns from how requests read, "
            "so it needs a log kept with privacy 'raw' (UsageLog(privacy='raw'), or `toolsearch mcp serve "
            "--usage-privacy raw`)"
        )
    return "no entry of the usage log names a tool of this index; was the log recorded for another catalog?"


def _with_embedder(index: ToolIndex, embedder: ToolsEmbedder, names: list[str], vectors: np.ndarray) -> ToolIndex:
    """The same tools and backend options, requests embedded by `embedder`; the tool vectors are the index's own
    (`vectors`, one row per name, read for training), so no tool is embedded again."""
    from ..backends import get_backend_spec

    options = {k: v for k, v in index.backend.describe().items() if k != "model"}
    engine = get_backend_spec(index.backend_name).create(embedder=embedder, **options)
    dense = _vector_half(engine)
    dense.add_vectors(names, vectors)
    if dense is not engine:  # a hybrid: its bm25 half indexes the tools' text
        engine.lexical.add(list(index.catalog))  # type: ignore[attr-defined]
    return ToolIndex(index.catalog, engine)


