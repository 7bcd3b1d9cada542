"""An augmentation's `$ref`s are inlined within a size bound: one whose `$defs` refer to each other more than once
(doubling at each level) is refused at once with an AugmentationError naming its field, before any tool carries it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from toolsearch import Tool
from toolsearch._errors import AugmentationError
from toolsearch.augment import Augmentation
from toolsearch.tools import MAX_SCHEMA_CHARS

WEATHER = Tool("get_weather", "Weather for a city", {"type": "object", "properties": {"city": {"type": "string"}}})


def _doubling(levels: int) -> dict[str, Any]:
    """Each `$def` refers twice to the next: about 1 KB of JSON for 10 levels, 2**levels copies once inlined."""
    twice = {"type": "object", "properties": {"a": {"$ref": "#/$defs/D{}"}, "b": {"$ref": "#/$defs/D{}"}}}
    defs = {f"D{i}": json.loads(json.dumps(twice).replace("{}", str(i + 1))) for i in range(levels)}
    defs[f"D{levels}"] = {"type": "string"}
    return {"type": "object", "properties": {"reason": {"$ref": "#/$defs/D0"}}, "$defs": defs}


@pytest.mark.parametrize("levels", [10, 14, 40])  # 40 levels: 2**40 copies, were it inlined
def test_an_augmentation_that_grows_past_the_bound_when_inlined_is_refused_naming_its_field(levels: int) -> None:
    raw = _doubling(levels)
    assert len(json.dumps(raw)) < 5_000  # small as written
    with pytest.raises(AugmentationError, match=r"'reason'.*\$refs inlined.*32,000"):  # the bound, in characters
        Augmentation.of(raw)


def test_the_file_is_named_for_the_gateway(tmp_path: Path) -> None:
    path = tmp_path / "augment.json"
    path.write_text(json.dumps(_doubling(12)), encoding="utf-8")
    with pytest.raises(AugmentationError, match=rf"^{path}: augmented field\(s\) 'reason'"):
        Augmentation.from_file(path)


def test_a_nested_augmentation_within_the_bound_is_inlined_as_before() -> None:
    class Step(BaseModel):
        goal: str
        why: str

    class Plan(BaseModel):
        first: Step
        then: Step  # the same type twice: two copies, well inside the bound
        confidence: float

    augmentation = Augmentation.of(Plan)
    assert augmentation is not None and "$ref" not in json.dumps(augmentation.schema)
    extended = augmentation.extend(WEATHER)
    assert list(extended.input_schema["properties"]) == ["first", "then", "confidence", "city"]


def test_a_tool_the_fields_push_over_the_schema_limit_blames_the_augmentation() -> None:
    # a tool valid alone, close to the limit: the fields added to it make it too large
    big = Tool("big", "A tool with a long schema", {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "x" * (MAX_SCHEMA_CHARS - 200)}},
    })
    augmentation = Augmentation.of({"properties": {"reason": {"type": "string", "description": "why " * 100}}})
    assert augmentation is not None
    with pytest.raises(AugmentationError, match=r"augmented field\(s\) 'reason' cannot be added to tool 'big'"):
        augmentation.extend(big)
