"""Named tools: how often a request that names a tool outright gets that tool first, per backend and data set.

Every tool name of every data set, in four forms: the bare name (`get_gene_therapy_info`), its
split form ("get gene therapy info"), the name inside a sentence ("I need get_gene_therapy_info
now") and the split form inside a sentence. R@1 is counted over unique names (no other tool of
the set has the same spelling or the same words); regex is asked for the bare name only (its
queries are patterns). Written into the retrieval report (`--names`) or on its own.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["FORMS", "TEMPLATES", "forms_of", "run_names"]

FORMS = ("bare", "split", "sentence", "split sentence")
TEMPLATES = ("I need {} now", "Please use {} for this.", "Can you run {} for me?")
_REGEX_FORMS = ("bare",)


def forms_of(name: str, position: int) -> dict[str, str]:
    """The four requests that name `name` (the sentence template rotates with `position`)."""
    from toolsearch.text import split_identifier

    split = " ".join(split_identifier(name))
    template = TEMPLATES[position % len(TEMPLATES)]
    return {"bare": name, "split": split, "sentence": template.format(name), "split sentence": template.format(split)}


def unique_names(names: Sequence[str]) -> list[str]:
    """Names no other tool shares by spelling (case aside) or by identifier words."""
    from toolsearch.text import split_identifier

    spelled = Counter(n.strip().lower() for n in names)
    words = Counter(split_identifier(n) for n in names)
    return [
        n for n in names if spelled[n.strip().lower()] == 1 and words[split_identifier(n)] == 1 and split_identifier(n)
    ]


def run_names(
    indexes: dict[str, Any], names: Sequence[str], log: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """R@1 per backend and form over the unique names, with the first few misses of each."""
    unique = unique_names(names)
    out: dict[str, Any] = {"names": len(names), "unique": len(unique), "backends": {}}
    for backend, index in indexes.items():
        forms = _REGEX_FORMS if backend == "regex" else FORMS
        row: dict[str, Any] = {}
        started = time.perf_counter()
        for form in forms:
            first = 0
            misses: list[list[str]] = []
            for position, name in enumerate(unique):
                query = forms_of(name, position)[form]
                hits = index.search(query, 3).names
                if hits[:1] == [name]:
                    first += 1
                elif len(misses) < 5:
                    misses.append([query, *hits[:1]])
            row[form] = {"r1": round(first / len(unique), 4) if unique else None, "misses": misses}
        out["backends"][backend] = row
        if log:
            shown = ", ".join(f"{f} {row[f]['r1']}" for f in forms)
            log(f"  names, {backend}: {shown} ({time.perf_counter() - started:.0f}s)")
    return out


def names_markdown(results: dict[str, dict[str, Any]]) -> list[str]:
    """The exact-name table: one row per data set and backend, R@1 per form."""
    lines = [
        "| set | backend | unique names | " + " | ".join(f"R@1 {f}" for f in FORMS) + " |",
        "|---|---|---|" + "---|" * len(FORMS),
    ]
    for dataset, result in results.items():
        for backend, row in result["backends"].items():
            cells = [f"{row[f]['r1']:.4f}" if f in row else "—" for f in FORMS]
            lines.append(
                f"| {dataset} | {backend} | {result['unique']} of {result['names']} | " + " | ".join(cells) + " |"
            )
    misses = [
        f"- {dataset}, {backend}, {form}: "
        + "; ".join(f"`{q}` → `{hit[0] if hit else 'nothing'}`" for q, *hit in cell["misses"])
        for dataset, result in results.items()
        for backend, row in result["backends"].items()
        for form, cell in row.items()
        if cell["misses"]
    ]
    return lines + (["", "First misses:", *misses] if misses else [])
