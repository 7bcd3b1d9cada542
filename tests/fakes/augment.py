"""The augmentation the augmentation tests share: a one-field `call_reason`, and a consumer that records it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

# The demo catalog has `reason` parameters of its own (github_close_issue, ...): the field is named apart.
REASON = {"type": "string", "description": "Why you call this tool, in one sentence."}


class Why(BaseModel):
    call_reason: str = Field(description="Why you call this tool, in one sentence.")


class Consumer:
    """An `on_augment` that records what it received."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict[str, Any], str]] = []

    def __call__(self, tool: str, values: Mapping[str, Any], call_id: str) -> None:
        self.got.append((tool, dict(values), call_id))
