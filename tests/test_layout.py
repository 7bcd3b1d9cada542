"""The tests mirror the package: one folder per subpackage, top-level modules' tests in tests/ itself."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
HELPERS = {"fakes", "mcp_servers", "interop", "skip_policy", "plugins", "__pycache__"}
EXTRA = {"e2e"}  # whole tasks across the package, not one subpackage's tests


def test_every_test_folder_is_a_subpackage_or_a_named_tier() -> None:
    subpackages = {p.parent.name for p in (ROOT / "toolsearch").glob("*/__init__.py")}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name not in HELPERS and not p.name.startswith(".")}
    assert folders - subpackages - EXTRA == set(), "a test folder must mirror a subpackage of toolsearch"
    tested = {f for f in folders if any((TESTS / f).glob("test_*.py"))}
    assert subpackages - {"data"} <= tested, f"subpackages without a test folder: {subpackages - {'data'} - tested}"


def test_test_file_names_are_unique_across_folders() -> None:
    # pytest imports test modules by file name (rootdir-relative, no __init__.py): two alike would collide.
    names = [p.name for p in TESTS.rglob("test_*.py") if not set(p.relative_to(TESTS).parts) & HELPERS]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
