"""What the speed benchmarks share: a catalog pooled from the data sets, query samples, a process's memory."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.synth import first_sentence

__all__ = [
    "WARMUP_QUERIES", "build_catalog", "cut_query", "peak_kib", "reset_peak", "rss_kib", "sample_long_queries",
    "sample_short_queries",
    "sample_queries",
]

WARMUP_QUERIES = 5  # untimed queries before a timed run (sample_queries returns this many extra)


def build_catalog(datasets: Sequence[Any], size: int, *, seed: int = 0) -> tuple[list[Any], dict[str, Any]]:
    """A seeded catalog of `size` tools pooled from the data sets, names prefixed `<dataset>_`.

    Above the number of real tools, variants fill the gap: a real tool renamed `<name>_v<n>`
    with a sentence of another tool's description appended, so no two definitions are equal.
    """
    from toolsearch.tools import Tool, load_tools

    pool: list[Tool] = []
    per_dataset: dict[str, int] = {}
    for ds in datasets:
        tools = load_tools(ds.tools_path)
        per_dataset[ds.name] = len(tools)
        for t in tools:
            pool.append(
                Tool(
                    name=f"{ds.name}_{t.name}",
                    description=t.description,
                    input_schema=t.input_schema,
                    namespace=ds.name,
                )
            )
    rng = random.Random(seed)
    rng.shuffle(pool)
    catalog = pool[:size]
    used = {t.name for t in pool}
    variants = 0
    round_no = 2
    while len(catalog) < size:
        for base in pool:
            if len(catalog) >= size:
                break
            donor = pool[rng.randrange(len(pool))]
            extra = first_sentence(donor.description)
            name = f"{base.name}_v{round_no}"
            while name in used:  # a real tool may already be called `<name>_v2`
                name += "_"
            used.add(name)
            catalog.append(
                Tool(
                    name=name,
                    description=f"{base.description} {extra}".strip(),
                    input_schema=base.input_schema,
                    namespace=base.namespace,
                )
            )
            variants += 1
        round_no += 1
    rng.shuffle(catalog)
    info = {"size": size, "real_tools": size - variants, "variants": variants, "pool": per_dataset}
    return catalog, info


def cut_query(text: str, max_chars: int = 1000) -> str:
    """A data set's query as the benchmarks search it: stripped and cut to `max_chars`."""
    return text.strip()[:max_chars].strip()


def sample_queries(datasets: Sequence[Any], n: int, *, seed: int = 0, max_chars: int = 1000) -> list[str]:
    """`n` distinct queries, an equal share from each data set, cut to `max_chars`."""
    from toolsearch.evaluation import load_queries

    per = -(-(n + WARMUP_QUERIES) // max(len(datasets), 1))
    seen: set[str] = set()
    buckets: list[list[str]] = []
    for ds in datasets:
        bucket = []
        for q in load_queries(ds.queries_path, seed=seed):
            text = cut_query(q.query, max_chars)
            if text and text not in seen:
                seen.add(text)
                bucket.append(text)
            if len(bucket) >= per:
                break
        buckets.append(bucket)
    out = [q for group in zip(*buckets, strict=False) for q in group]  # interleave the data sets
    rest = [q for bucket in buckets for q in bucket if q not in set(out)]
    return (out + rest)[: n + WARMUP_QUERIES]


def sample_short_queries(datasets: Sequence[Any], n: int, *, seed: int = 0) -> list[str]:
    """Up to `n` (+ warm-up) distinct real queries under 300 characters, an equal share from each data set.

    The sets' queries as they come (`sample_queries`) run up to 1,000 characters, a quarter of them 300 or more:
    these are the short requests, beside the 300-600-character ones of `sample_long_queries`.
    """
    from toolsearch.evaluation import load_queries

    buckets = [
        [q.query.strip() for q in load_queries(ds.queries_path, seed=seed) if 0 < len(q.query.strip()) < 300]
        for ds in datasets
    ]
    out = list(dict.fromkeys(q for group in zip(*buckets, strict=False) for q in group))
    rest = [q for bucket in buckets for q in bucket if q not in set(out)]
    return list(dict.fromkeys(out + rest))[: n + WARMUP_QUERIES]


def sample_long_queries(datasets: Sequence[Any], n: int, *, seed: int = 0) -> list[str]:
    """Up to `n` (+ warm-up) distinct real queries of 300-600 characters (multi-part requests)."""
    from toolsearch.evaluation import load_queries

    buckets = [
        [q.query.strip() for q in load_queries(ds.queries_path, seed=seed) if 300 <= len(q.query.strip()) <= 600]
        for ds in datasets
    ]
    out = list(dict.fromkeys(q for group in zip(*buckets, strict=False) for q in group))
    rest = [q for bucket in buckets for q in bucket if q not in set(out)]
    return (out + rest)[: n + WARMUP_QUERIES]


# --- a process's memory -----------------------------------------------------------------------


def rss_kib(field: str = "VmRSS") -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) so the next reading covers only what follows."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_kib() -> int | None:
    peak = rss_kib("VmHWM")
    if peak is None:
        import resource

        peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak
