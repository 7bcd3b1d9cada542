"""Large synthetic catalogs (up to millions of tools) and their vectors, varied from the shared data sets' real tools.

Tool `i` of a catalog is either a real tool (names prefixed `<dataset>_`) or a variant of one: the
real tool renamed `<name>_v<round>`, its description followed by the first sentence of another
real tool's description (the donor), its schema shared with the real tool. The plan is a few
integer arrays, so the catalog is generated lazily and a million tools cost about their own
strings; vectors are derived from the same plan (`derived_vectors`) without embedding a million
texts: a variant's vector is its real tool's, plus a little of its donor's, plus seeded noise.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SynthPlan", "derived_vectors", "first_sentence", "plan_catalog", "random_base_vectors"]

# Weight of the donor's vector in a variant's vector (its description gained one donor sentence)
# and the standard deviation of the per-component noise (a 384-d noise vector of norm ~0.3).
DONOR_WEIGHT = 0.3
NOISE_STD = 0.015
_CHUNK = 65_536


_ENCODER = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))  # Tool's canonical form


def _canonical(value: Any) -> str:
    return _ENCODER.encode(value)


def first_sentence(text: str) -> str:
    """The first sentence of a description, at most 200 characters."""
    text = text.strip()
    for stop in (". ", "! ", "? "):
        cut = text.find(stop)
        if 0 < cut < 200:
            return text[: cut + 1]
    return text[:200]


@dataclass(frozen=True)
class SynthPlan:
    """Which real tool (and donor) each catalog position derives from; `round_of` 0 = the real tool."""

    bases: list[Any]  # the real tools (toolsearch.tools.Tool), names prefixed by data set
    base_of: np.ndarray  # int32 per position
    donor_of: np.ndarray  # int32 per position (-1 for real tools)
    round_of: np.ndarray  # int32 per position
    pool: dict[str, int]  # real tools per data set
    seed: int

    def __len__(self) -> int:
        return len(self.base_of)

    @property
    def real_tools(self) -> int:
        return int(np.count_nonzero(self.round_of == 0))

    def info(self) -> dict[str, Any]:
        return {
            "size": len(self),
            "real_tools": self.real_tools,
            "variants": len(self) - self.real_tools,
            "max_variants_per_real_tool": int(self.round_of.max()) - 1 if len(self) > self.real_tools else 0,
            "pool": dict(self.pool),
        }

    def name(self, i: int) -> str:
        base = self.bases[int(self.base_of[i])].name
        rnd = int(self.round_of[i])
        if rnd == 0:
            return str(base)
        name = f"{base}_v{rnd}"
        while name in self._real_names:  # a real tool may itself be called `<name>_v2`
            name += "_"
        return name

    @property
    def _real_names(self) -> frozenset[str]:
        cached = self.__dict__.get("_names_cache")
        if cached is None:
            cached = frozenset(t.name for t in self.bases)
            object.__setattr__(self, "_names_cache", cached)
        return cached

    def names(self) -> list[str]:
        return [self.name(i) for i in range(len(self))]

    def tools(self) -> Iterator[Any]:
        """The catalog's tools in order. Variants share their real tool's schema object (the
        library never mutates a tool), so memory grows with names and descriptions only."""
        from toolsearch.text import clean_text
        from toolsearch.tools import Tool

        sentences = [first_sentence(t.description) for t in self.bases]
        # The fingerprint is SHA-256 of the tool's canonical JSON (sorted keys); the schema's part
        # is the same for every variant of a real tool, so it is serialised once per real tool.
        schemas = [_canonical(t.input_schema) for t in self.bases]
        for i in range(len(self)):
            b = int(self.base_of[i])
            base = self.bases[b]
            if self.round_of[i] == 0:
                yield base
                continue
            description = clean_text(f"{base.description} {sentences[int(self.donor_of[i])]}".strip())
            name = self.name(i)
            data = {"name": name, "description": description, "input_schema": base.input_schema}
            canonical = (
                f'{{"description":{_canonical(description)},"input_schema":{schemas[b]},"name":{_canonical(name)}'
            )
            if base.namespace is not None:
                data["namespace"] = base.namespace
                canonical += f',"namespace":{_canonical(base.namespace)}'
            yield Tool._restore(data, hashlib.sha256((canonical + "}").encode()).hexdigest())


def plan_catalog(datasets: Sequence[Any], size: int, *, seed: int = 0) -> SynthPlan:
    """A seeded plan of `size` tools over the data sets' real tools (all of them when `size` allows)."""
    from toolsearch.tools import Tool, load_tools

    if size < 1:
        raise ValueError(f"size must be positive, got {size}")
    bases: list[Tool] = []
    pool: dict[str, int] = {}
    for ds in datasets:
        tools = load_tools(ds.tools_path)
        pool[ds.name] = len(tools)
        bases += [
            Tool(name=f"{ds.name}_{t.name}", description=t.description, input_schema=t.input_schema, namespace=ds.name)
            for t in tools
        ]
    if not bases:
        raise ValueError("the data sets hold no tools")
    n_real = len(bases)
    rng = np.random.default_rng(seed)
    virtual = np.arange(size, dtype=np.int64)
    if size <= n_real:  # a seeded sample of real tools
        chosen = rng.permutation(n_real)[:size]
        base_of = chosen.astype(np.int32)
        round_of = np.zeros(size, dtype=np.int32)
        donor_of = np.full(size, -1, dtype=np.int32)
    else:
        extra = virtual[n_real:] - n_real
        base_of = np.concatenate([np.arange(n_real), extra % n_real]).astype(np.int32)
        round_of = np.concatenate([np.zeros(n_real, np.int64), 2 + extra // n_real]).astype(np.int32)
        donor_of = np.concatenate([np.full(n_real, -1), rng.integers(0, n_real, size - n_real)]).astype(np.int32)
        order = rng.permutation(size)
        base_of, round_of, donor_of = base_of[order], round_of[order], donor_of[order]
    return SynthPlan(bases, base_of, donor_of, round_of, pool, seed)


def random_base_vectors(n: int, dimension: int = 384, *, seed: int = 0) -> np.ndarray:
    """Seeded random unit vectors, one per real tool (when embedding the real tools is not wanted)."""
    rows = np.random.default_rng([seed, 7]).standard_normal((n, dimension)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def derived_vectors(plan: SynthPlan, base_vectors: np.ndarray, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Unit vectors for catalog positions `start:stop`: a real tool's own vector, a variant's
    real-tool vector plus `DONOR_WEIGHT` of its donor's plus seeded noise. Chunks are seeded by
    position, so any range comes out the same whether made at once or piece by piece."""
    stop = len(plan) if stop is None else stop
    dim = base_vectors.shape[1]
    out = np.empty((stop - start, dim), dtype=np.float32)
    first = start // _CHUNK
    for chunk in range(first, (stop - 1) // _CHUNK + 1 if stop > start else first):
        lo, hi = chunk * _CHUNK, min((chunk + 1) * _CHUNK, len(plan))
        noise = np.random.default_rng([plan.seed, 11, chunk]).standard_normal((hi - lo, dim), dtype=np.float32)
        rows = base_vectors[plan.base_of[lo:hi]].copy()
        variant = plan.round_of[lo:hi] > 0
        rows[variant] += DONOR_WEIGHT * base_vectors[plan.donor_of[lo:hi][variant]] + NOISE_STD * noise[variant]
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        a, b = max(lo, start), min(hi, stop)
        out[a - start : b - start] = rows[a - lo : b - lo]
    return out
