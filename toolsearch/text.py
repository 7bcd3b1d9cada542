"""The one searchable-text builder every backend shares."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ._untrusted import clean_text as clean_text  # re-exported: its home is the untrusted-text module

if TYPE_CHECKING:  # only named in annotations
    from .tools import Tool

WORD_CHUNKS = re.compile(r"[^\W_]+")  # letters and digits of any script
# camelCase, PascalCase, acronyms (HTTPServer -> HTTP Server) and digit runs.
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_MAX_PARAM_DEPTH = 3
_MAX_ENUM_VALUES = 30


@lru_cache(maxsize=65_536)
def split_identifier(identifier: str) -> tuple[str, ...]:
    """`getUserById`, `get_user_by_id`, `math.factorial` -> lower-case words."""
    words: list[str] = []
    for chunk in WORD_CHUNKS.findall(identifier):
        if chunk.isascii():
            words.extend(part.lower() for part in _CAMEL.findall(chunk))
        else:  # case splitting is ASCII-only; other scripts keep the chunk whole, never drop letters
            words.append(chunk.lower())
    return tuple(words)


@dataclass(frozen=True, slots=True)
class ToolText:
    """A tool's text split into the fields backends index and boost separately."""

    name: str  # the raw name, for exact and regex matches
    name_words: str  # identifier split into words
    namespace: str
    description: str
    parameters: str  # parameter names (split), descriptions and enum values
    tags: str

    def joined(self) -> str:
        """Every field in one string, name first (regex and plain scans)."""
        parts = [self.name, self.name_words, self.namespace, self.description, self.parameters, self.tags]
        return "\n".join(p for p in parts if p)


def _param_lines(schema: Any, depth: int, out: list[str]) -> None:
    if depth > _MAX_PARAM_DEPTH or not isinstance(schema, dict):
        return
    props = schema.get("properties")
    if isinstance(props, dict):
        for pname, pschema in props.items():
            words = " ".join(split_identifier(str(pname)))
            line = [words if words != str(pname).lower() else str(pname)]
            if isinstance(pschema, dict):
                desc = pschema.get("description")
                if isinstance(desc, str) and desc:
                    line.append(desc)
                enum = pschema.get("enum")
                if isinstance(enum, list):
                    line.append(" ".join(str(v) for v in enum[:_MAX_ENUM_VALUES]))
                _param_lines(pschema, depth + 1, out)
                _param_lines(pschema.get("items"), depth + 1, out)
            out.append(" ".join(line))
    for key in ("anyOf", "oneOf", "allOf"):
        variants = schema.get(key)
        if isinstance(variants, list):
            for variant in variants:
                _param_lines(variant, depth + 1, out)


def tool_text(tool: Tool) -> ToolText:
    """Build the searchable fields of a tool."""
    params: list[str] = []
    _param_lines(tool.input_schema, 0, params)
    return ToolText(
        name=tool.name,
        name_words=" ".join(split_identifier(tool.name)),
        namespace=" ".join(split_identifier(tool.namespace)) if tool.namespace else "",
        description=tool.description.strip(),
        parameters="\n".join(params),
        tags=" ".join(tool.tags),
    )


def embedding_text(tool: Tool, *, max_chars: int = 2_000) -> str:
    """One passage for dense models: name words, namespace, description, then parameters."""
    text = tool_text(tool)
    head = text.name_words
    if text.namespace:
        head = f"{text.namespace}: {head}"
    # "name words: description" reads as a definition; a full stop after the name measurably
    # hurts MiniLM on short plugin descriptions (MetaTool nDCG@10 0.638 -> 0.667, others equal).
    body = f"{head}: {text.description}" if text.description else head
    if text.parameters:
        body += "\nParameters: " + "; ".join(text.parameters.splitlines())
    return body[:max_chars]
