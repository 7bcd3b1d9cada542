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


def _compact(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def test_fields_under_the_bound_with_no_ref_are_accepted_and_over_it_refused_without_blaming_refs() -> None:
    # a 6,000-item enum: 28,933 characters of JSON, refused by an estimate of 5 characters a number
    props = {"priority": {"type": "integer", "enum": list(range(1, 6001))}}
    assert 28_000 < _compact(props) < 32_000
    augmentation = Augmentation.of({"properties": props})
    assert augmentation is not None and augmentation.schema["properties"] == props
    over = {"priority": {"type": "integer", "enum": list(range(1, 7001))}}
    with pytest.raises(AugmentationError, match=r"'priority': the augmentation's schema, grows past .*32,000") as err:
        Augmentation.of({"properties": over})
    assert "$ref" not in str(err.value)  # there is none to blame


def test_refs_whose_inlined_json_is_under_the_bound_are_accepted() -> None:
    # each copy's own `description` replaces the target's: what the result holds, not what the walk visits, counts
    big = {"type": "string", "description": "d" * 9_000, "enum": [f"v{i}" for i in range(2_050)]}
    refs = {f"f{i}": {"$ref": "#/$defs/Big", "description": "x"} for i in range(2)}
    augmentation = Augmentation.of({"properties": refs, "$defs": {"Big": big}})
    assert augmentation is not None
    inlined = augmentation.schema["properties"]
    assert 28_000 < _compact(inlined) < 32_000 and inlined["f0"]["description"] == "x"
