"""Query-side contrastive fine-tuning of a BERT sentence encoder against fixed tool vectors (torch: the `train` extra).

Tools keep the vectors the base model gives them; only the encoder that embeds requests learns.
That choice is what makes the training affordable on two CPU cores and what keeps every index
valid: a catalog's vectors (and the embedding cache) are the same as before, and a request is
mapped into their space. Because tool vectors do not move, every tool of the catalog is a
negative of every request (a softmax over the whole catalog, a superset of in-batch and mined
hard negatives), which in-batch training of both sides cannot afford. Two kinds of negative are
masked: a request's other right tools, and near-duplicates of its right tool (another name for
the same definition is an unlabelled right answer, not a wrong one).

The loss is InfoNCE with sentence-transformers' MultipleNegativesRankingLoss scale (20); the loop
is plain torch (no `datasets`/`accelerate`), seeded and deterministic on CPU for a fixed thread count.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import missing_dependency
from ..clauses import request_parts

__all__ = ["QueryRow", "TrainConfig", "fine_tune_queries", "request_rows"]


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """Hyperparameters, recorded whole in the model card."""

    epochs: int = 2
    batch_size: int = 64
    learning_rate: float = 3e-5
    warmup: float = 0.1  # share of the steps with a linear warm-up, then linear decay to 0
    weight_decay: float = 0.01
    scale: float = 20.0  # cosine similarities times this are the logits (MNRL's default)
    query_tokens: int = 64
    duplicate: float = 0.92  # tools this similar to the right one are not its negatives
    freeze_embeddings: bool = True  # the token embeddings stay the base model's
    # A multi-part request's row is read from its pieces, each encoded alone (embeddings.embed_request),
    # so the model learns the reading search uses; False: the request encoded whole (v1's recipe).
    pieces: bool = True
    seed: int = 0
    threads: int = 2

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class QueryRow:
    """A request (or a pseudo-request) and its right tool, by row of the tool matrix."""

    text: str
    positive: int
    relevant: tuple[int, ...]  # every right tool of the request


def fine_tune_queries(
    base: Path,
    tools: np.ndarray,
    rows: Sequence[QueryRow],
    config: TrainConfig,
    out: Path,
    *,
    device: str = "cpu",
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Fine-tune the query encoder of the sentence-transformers folder `base`; save the float model to `out`.

    `tools` holds the base model's unit vectors of every tool the rows point into. Returns what
    the model card records of the run (steps, seconds, loss at the start and end, torch version).
    """
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise missing_dependency(exc.name or "torch", "train") from None

    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    if device == "cpu":
        torch.set_num_threads(config.threads)
    torch.use_deterministic_algorithms(True, warn_only=device != "cpu")
    model = SentenceTransformer(str(base), device=device)
    model.train()
    for name, parameter in model.named_parameters():
        if config.freeze_embeddings and "embeddings." in name:
            parameter.requires_grad = False
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for n, p in trained if not _no_decay(n)], "weight_decay": config.weight_decay},
            {"params": [p for n, p in trained if _no_decay(n)], "weight_decay": 0.0},
        ],
        lr=config.learning_rate,
    )
    per_epoch = (len(rows) + config.batch_size - 1) // config.batch_size
    steps = config.epochs * per_epoch
    warm = max(1, int(steps * config.warmup))

    def rate(step: int) -> float:
        return (step + 1) / warm if step < warm else max(0.0, (steps - step) / max(1, steps - warm))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    matrix = torch.tensor(np.ascontiguousarray(tools, dtype=np.float32), device=device)
    near = (matrix @ matrix.T) > config.duplicate  # near-duplicate tools: never each other's negatives
    start = time.perf_counter()
    losses: list[float] = []
    step = 0
    for epoch in range(config.epochs):
        order = list(rows)
        random.Random(config.seed + epoch).shuffle(order)
        for first in range(0, len(order), config.batch_size):
            batch = order[first : first + config.batch_size]
            queries = request_rows(model, [r.text.strip() for r in batch], config, device)
            logits = config.scale * queries @ matrix.T
            positives = torch.tensor([r.positive for r in batch], device=device)
            mask = near[positives].clone()
            for i, row in enumerate(batch):
                mask[i, list(row.relevant)] = True
            mask[torch.arange(len(batch), device=device), positives] = False
            loss = torch.nn.functional.cross_entropy(logits.masked_fill(mask, float("-inf")), positives)
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_([p for _, p in trained], 1.0)
            optimizer.step()
            schedule.step()
            losses.append(float(loss.item()))
            step += 1
            if step % 25 == 0 or step == steps:
                recent = losses[-25:]
                log(f"step {step}/{steps}  loss {sum(recent) / len(recent):.4f}  {time.perf_counter() - start:.0f}s")
    seconds = time.perf_counter() - start
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save(str(out))
    edge = max(1, min(25, steps // 10))
    return {
        "steps": steps,
        "rows": len(rows),
        "tools": int(matrix.shape[0]),
        "seconds": round(seconds, 1),
        "loss_start": round(sum(losses[:edge]) / edge, 4),
        "loss_end": round(sum(losses[-edge:]) / edge, 4),
        "device": device,
        "torch": torch.__version__,
    }


def request_rows(model: Any, texts: list[str], config: TrainConfig, device: str) -> Any:
    """Unit rows of requests, read as search reads them: a multi-part request's from all its pieces' tokens
    (embeddings.embed_request), each piece encoded alone."""
    try:
        import torch
    except ImportError as exc:
        raise missing_dependency(exc.name or "torch", "train") from None

    pieces = [(request_parts(t)[0] or [t]) if config.pieces else [t] for t in texts]
    flat = [(len(model.tokenizer.tokenize(p)), i, p) for i, parts in enumerate(pieces) for p in parts]
    flat.sort(key=lambda item: item[0])  # similar lengths run together: padding to the longest is cheap
    sums: Any = 0
    counts: Any = 0
    for first in range(0, len(flat), len(texts)):
        chunk = flat[first : first + len(texts)]
        owner = torch.tensor([i for _, i, _ in chunk], device=device)
        features = model.tokenizer(
            [p for _, _, p in chunk], padding=True, truncation=True, max_length=config.query_tokens,
            return_tensors="pt",
        )
        tokens = model({k: v.to(device) for k, v in features.items()})["token_embeddings"]
        mask = features["attention_mask"].to(device).unsqueeze(-1).to(tokens.dtype)
        pooled = (tokens * mask).sum(1)
        sums = sums + torch.zeros(len(texts), tokens.shape[-1], device=device).index_add(0, owner, pooled)
        counts = counts + torch.zeros(len(texts), 1, device=device).index_add(0, owner, mask.sum(1))
    return torch.nn.functional.normalize(sums / counts, dim=-1)


def _no_decay(name: str) -> bool:
    return name.endswith(".bias") or "LayerNorm" in name
