"""Plug-ins installed the way pip lays them out, without pip: a `<name>-1.0.dist-info` in a folder put on the path."""

from __future__ import annotations

import tomllib
from pathlib import Path

DEMO = Path(__file__).resolve().parent / "plugins" / "toolsearch_demo_backend"
"""The demo plug-in's source folder (its package imports from there once the folder is on the path)."""


def write_distribution(site: Path, distribution: str, entry_points: dict[str, dict[str, str]], **sources: str) -> Path:
    """Write `distribution`'s metadata (its entry points) and modules (`module=source`) into `site`."""
    info = site / f"{distribution.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    sections = [f"[{group}]\n" + "".join(f"{n} = {v}\n" for n, v in eps.items()) for group, eps in entry_points.items()]
    (info / "entry_points.txt").write_text("".join(sections))
    for module, source in sources.items():
        (site / f"{module}.py").write_text(source)
    return site


def demo_entry_points() -> dict[str, dict[str, str]]:
    """The entry points the demo plug-in's own pyproject.toml declares."""
    return tomllib.loads((DEMO / "pyproject.toml").read_text())["project"]["entry-points"]  # type: ignore[no-any-return]
