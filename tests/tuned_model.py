"""A request encoder that does not ship with toolsearch, made as `toolsearch tune` exports one, without torch.

The shipped encoder's weights widened to float and exported again under the tuned id: a real model folder (int8
weights, card, digest) whose id differs from the shipped model's, for the tests of what carries and serves one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toolsearch.embeddings import ToolsEmbedder
from toolsearch.model_file import export_int8
from toolsearch.training.tune import TUNED_MODEL_ID, float_folder


@pytest.fixture(scope="session")
def tuned_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("tuned")
    base = float_folder(ToolsEmbedder(), work / "base")
    export_int8(base, base, work / "model", {"name": "tuned", "version": 1, "model_id": TUNED_MODEL_ID,
                                              "hyperparameters": {"pieces": True}})
    return work / "model"
