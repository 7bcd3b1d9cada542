"""The oldest framework releases the plug-ins name in their errors are pyproject.toml's pins, to the character."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from toolsearch.integrations._gate import EXTRAS

ROOT = Path(__file__).resolve().parents[2]


def _pins(extra: str) -> dict[str, list[str]]:
    """Each distribution of pyproject's `extra` with the releases its `>=` specifiers name."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extra in extras, f"pyproject.toml has no extra {extra!r}, which EXTRAS in integrations/_gate.py names"
    requirements = [Requirement(line) for line in extras[extra]]
    return {canonicalize_name(r.name): [s.version for s in r.specifier if s.operator == ">="] for r in requirements}


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_every_plugins_minimum_release_is_its_extras_pin(extra: str) -> None:
    # Before: each plug-in's except-ImportError branch held its own hand copy of these, checked by nothing.
    pins = _pins(extra)
    for module, (_, distribution, minimum) in EXTRAS[extra].items():
        assert pins.get(canonicalize_name(distribution)) == [minimum], (
            f"EXTRAS[{extra!r}][{module!r}] says {distribution} >= {minimum}; pyproject.toml's `{extra}` extra pins "
            f"{pins.get(canonicalize_name(distribution))}: make the two agree"
        )


def test_every_plugin_module_has_its_extra_in_extras() -> None:
    # a new plug-in names its framework's release from its entry here when its import fails
    plugins = sorted(p.stem for p in (ROOT / "toolsearch" / "integrations").glob("*.py") if not p.stem.startswith("_"))
    assert sorted(EXTRAS) == sorted(name.replace("_", "-") for name in plugins)
