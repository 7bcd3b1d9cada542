"""Shared fixtures: dataset paths, small catalogs and an offline, shared embedding cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The embedding model ships in a package; nothing may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from toolsearch import Tool, load_tools

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"


@pytest.fixture(scope="session", autouse=True)
def _embedding_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    # One cache for the whole run: the model embeds each text once across tests.
    os.environ["TOOLSEARCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("toolsearch-cache"))


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    if not DATASETS.is_dir():
        pytest.skip(f"shared datasets not found at {DATASETS}")
    return DATASETS


@pytest.fixture(scope="session")
def bfcl_tools(datasets_dir: Path) -> list[Tool]:
    return load_tools(datasets_dir / "bfcl" / "tools.jsonl")


@pytest.fixture(scope="session")
def demo_tools() -> list[Tool]:
    return load_tools(ROOT / "toolsearch" / "data" / "demo_catalog.jsonl")
