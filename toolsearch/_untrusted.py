"""Untrusted text: hidden and unencodable characters, cleaned out of prose and refused in names and values.

Everything a tool definition carries reaches a model (and often a terminal or a reviewer's screen),
and most definitions come from someone else: an MCP server, a file, a SaaS connector. Five classes
of character can hide text from the person who reviews a definition while the model still reads
it, or break whatever prints or encodes it:

- tag characters (U+E0000..U+E007F, assigned or not): invisible ASCII look-alikes (ASCII smuggling);
- bidirectional controls (U+202A..U+202E overrides and embeddings, U+2066..U+2069 isolates, the
  marks U+200E, U+200F, U+061C): text that displays in another order than it reads;
- zero-width and other invisible format characters (U+200B..U+200D, U+2060, U+FEFF, U+00AD and
  the rest of Unicode category Cf);
- control characters, C0 and C1 (ANSI escape sequences start with one), except tab, line feed and
  carriage return;
- lone surrogates (U+D800..U+DFFF): a JSON `\\ud800` escape decodes to one, and no UTF-8 encoder
  accepts it;
- stray variation selectors (U+FE00..U+FE0F, U+E0100..U+E01EF): invisible marks that a run of can
  encode any bytes after one visible character ("variation-selector smuggling"). A selector is
  legitimate only right after the character it varies (an emoji, a CJK ideograph, a keycap digit),
  one per character; every other selector is hidden text. Unlike the other classes this depends on
  the character before it, so `hidden_kind` alone cannot tell and `first_hidden` checks the context.

The rule, for every model-visible field of a tool (see `Tool` in toolsearch.tools):

- **Prose is repaired.** Descriptions, titles (the tool's, `annotations.title`, a schema's),
  `$comment`, `examples`, `default` and tags are documentation for the model: the hidden
  characters are removed (an ANSI sequence whole), a lone surrogate becomes U+FFFD, line ends
  become `\\n`. Nothing the server receives back depends on them.
- **Names and values are refused, never rewritten.** The tool's name and namespace, property names
  and every other key, `enum` and `const` values, `required`, `pattern`, `format`, `$ref`, `type`
  and any keyword this module does not know are what the model sends back or what the server
  validates against: cleaning them would make the model send something other than what the server
  expects. A hidden character there makes the definition invalid (`InvalidToolError` naming the
  tool, the field and the character), so an MCP source skips that one tool by name and keeps the
  rest of its server.
- Metadata that is not shown to models (everything but `title`, `annotations` and `outputSchema`)
  is kept as given, but a lone surrogate there is refused too: it cannot be stored or hashed.

Text from a model, a caller or a terminal is checked where it comes in: a query holding a lone
surrogate or a control character is refused (InvalidQueryError, which a model gets as a tool
result); tool-call arguments holding a lone surrogate are invalid arguments (providers._base);
chat message text gets U+FFFD for a lone surrogate; a CLI argument that is not UTF-8 is a usage error.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection
from typing import Any

from ._errors import InvalidToolError

# The version of these rules. Bump it when a rule cleans or refuses more than before: a stored index
# records the version it was built under, and one built under an older version re-checks each tool
# as it reads it (its tools were restored without validation, trusting the rules they were cleaned by).
RULES_VERSION = 3  # 2: stray variation selectors; 3: names with breaks, NaN, blank namespaces refused

MAX_DEPTH = 64  # deeper than any real schema; recursive walks elsewhere would choke on more

# Terminal escape sequences: CSI (`ESC [ ... m`, colours and cursor moves), OSC (`ESC ] ... BEL`,
# e.g. hyperlinks and window titles) and the other escapes (`ESC c` reset, `ESC ( B` charsets).
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]?|\x9b[0-?]*[ -/]*[@-~]")
# Every hidden character is one of these; plain printable ASCII (most text) is never looked at twice.
_CANDIDATE = re.compile(r"[^\t\n\r\x20-\x7e]")
_WHITESPACE_CONTROLS = frozenset("\t\n\r")
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060\ufeff\u180e")
_SELECTOR_RANGES = (("\ufe00", "\ufe0f"), ("\U000e0100", "\U000e01ef"))
_SELECTORS = "".join(f"{first}-{last}" for first, last in _SELECTOR_RANGES)
# A selector is stray at the start, after another selector, or after an ASCII character other than
# a keycap base (0-9, # and * take U+FE0F in keycap emoji): no other ASCII character has a variation
# sequence. Lookbehinds see the original text, so in a run only the first selector can survive.
_ANY_SELECTOR = re.compile(f"[{_SELECTORS}]")
_STRAY_SELECTOR = re.compile(
    rf"(?:^|(?<=[\x00-\x22\x24-\x29\x2b-\x2f\x3a-\x7f{_SELECTORS}]))[{_SELECTORS}]"
)

# The classes, as named in error messages.
SURROGATE = "lone surrogate"
CONTROL = "control character"
ESCAPE = "ANSI escape character"
TAG = "tag character"
BIDI = "bidi control"
ZERO_WIDTH = "zero-width character"
SELECTOR = "stray variation selector"
FORMAT = "invisible format character"
SURROGATES = frozenset({SURROGATE})
UNUSABLE = frozenset({SURROGATE, CONTROL, ESCAPE})
"""What no text may hold anywhere (a query included): not encodable, or a terminal command."""


def hidden_kind(char: str) -> str | None:
    """The class of a hidden or unencodable character (e.g. BIDI), or None for text."""
    code = ord(char)
    if 0xD800 <= code <= 0xDFFF:
        return SURROGATE
    if 0xE0000 <= code <= 0xE007F:
        return TAG
    category = unicodedata.category(char)
    if category == "Cc":
        if char in _WHITESPACE_CONTROLS:
            return None
        return ESCAPE if char == "\x1b" else CONTROL
    if category == "Cf":
        if char in _BIDI:
            return BIDI
        return ZERO_WIDTH if char in _ZERO_WIDTH else FORMAT
    return None


def first_hidden(text: str, only: Collection[str] | None = None) -> tuple[int, str, str] | None:
    """(position, character, class) of the first hidden character in `text` (of the classes `only`), or None."""
    if text.isascii() and text.isprintable():
        return None
    for match in _CANDIDATE.finditer(text):
        char = match.group()
        kind = hidden_kind(char)
        # the context is read only for a selector: every other non-ASCII letter costs one comparison
        if kind is None and _is_selector(char) and _STRAY_SELECTOR.match(text, match.start()) is not None:
            kind = SELECTOR
        if kind is not None and (only is None or kind in only):
            return match.start(), match.group(), kind
    return None


def _is_selector(char: str) -> bool:
    return any(first <= char <= last for first, last in _SELECTOR_RANGES)


def with_article(kind: str) -> str:
    """`a bidi control`, `an ANSI escape character`: a class as a message names it."""
    return ("an " if kind[0].lower() in "aeiou" else "a ") + kind


def describe(char: str) -> str:
    """`U+200B ZERO WIDTH SPACE`: a character named so that a log line shows it without containing it."""
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")


def quoted(text: str) -> str:
    """`text` quoted for a message: repr escapes hidden characters, and this escapes selectors too (printable marks)."""
    return _ANY_SELECTOR.sub(lambda m: ascii(m.group())[1:-1], repr(text))


def repair_surrogates(text: str) -> str:
    """`text` with a surrogate pair stored as two code points joined and every lone surrogate made U+FFFD."""
    if text.isascii() or first_hidden(text, SURROGATES) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _repair(match: re.Match[str]) -> str:
    char = match.group()
    return char if hidden_kind(char) is None else ""


def clean_text(text: str) -> str:
    """Prose fit to index and to show a model: escapes and hidden characters removed, lone surrogates replaced.

    Line ends become `\\n`; tabs and newlines are kept; every visible script is kept as it is.
    """
    if text.isascii() and text.isprintable():
        return text  # the common case costs one scan
    text = _ANSI.sub("", repair_surrogates(text).replace("\r\n", "\n").replace("\r", "\n"))
    return _STRAY_SELECTOR.sub("", _CANDIDATE.sub(_repair, text))  # selectors last: a removed mark unmasks them


# --- paths and model output ---------------------------------------------------------------------

Path = tuple[str | int, ...]


def _render(path: Path) -> str:
    parts = [str(path[0])] if path else []
    for segment in path[1:]:
        if isinstance(segment, int):
            parts.append(f"[{segment}]")
        elif segment.isidentifier():
            parts.append(f".{segment}")
        else:
            parts.append(f"[{segment!r}]")
    return "".join(parts)


def surrogate_problem(value: Any, root: str) -> str | None:
    """Where a JSON value (a model's tool-call arguments) holds a lone surrogate, in words, or None.

    Iterative, so any nesting json.loads accepts is walked without recursion.
    """
    stack: list[tuple[Path, Any]] = [((root,), value)]
    while stack:
        path, item = stack.pop()
        texts: list[tuple[str, Path, str]] = []
        if isinstance(item, str):
            texts.append(("", path, item))
        elif isinstance(item, dict):
            for key, sub in item.items():
                texts.append(("a key of ", path, key))
                stack.append(((*path, key), sub))
        elif isinstance(item, list):
            stack.extend(((*path, i), sub) for i, sub in enumerate(item))
        for role, where, text in texts:
            found = first_hidden(text, SURROGATES)
            if found is not None:
                return (
                    f"{role}{_render(where)} holds {describe(found[1])} (position {found[0]}), a lone surrogate "
                    "(half of a UTF-16 pair, not a character)"
                )
    return None


# --- the walk over a tool's fields ----------------------------------------------------------------

# JSON Schema keywords by what their value is. Prose is repaired; schemas are walked; anything else
# (enum, const, required, pattern, format, $ref, type, unknown keywords) is checked as exact.
_PROSE_KEYWORDS = frozenset({"title", "description", "$comment", "examples", "default"})
_SCHEMA_KEYWORDS = frozenset({
    "items", "additionalItems", "additionalProperties", "contains", "not", "if", "then", "else",
    "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema",
})
_SCHEMA_LIST_KEYWORDS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_SCHEMA_MAP_KEYWORDS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
                                  "dependencies"})


class Walk:
    """Cleans or checks the fields of one tool; every refusal names the tool (`where`) and the field.

    Paths are tuples, rendered only for an error message: the walk runs for every tool ever built.
    """

    def __init__(self, where: str) -> None:
        self.where = where

    def refuse(self, role: str, path: Path, text: str, found: tuple[int, str, str]) -> InvalidToolError:
        position, char, kind = found
        shown = quoted(text if len(text) <= 60 else text[:57] + "...")
        at = f" at {_render(path)}" if path else ""
        if kind == SURROGATE:
            why = "half of a UTF-16 pair, not a character: it cannot be encoded, stored or sent"
        else:
            why = "hidden from a reader but read by the model; a name or value the server compares is never rewritten"
        return InvalidToolError(
            f"{self.where}: {role} {shown}{at} holds {describe(char)} (position {position}), "
            f"{with_article(kind)} ({why}), so this tool is refused: remove the character from its definition"
        )

    def check(self, role: str, path: Path, text: str, only: Collection[str] | None = None) -> None:
        """Refuse one string that must reach the server unchanged (a name, a key, a value)."""
        found = first_hidden(text, only)
        if found is not None:
            raise self.refuse(role, path, text, found)

    def exact(self, path: Path, value: Any, *, only: Collection[str] | None = None) -> None:
        """Refuse `value` (any JSON value) when a string or key in it holds a hidden character.

        `only` narrows the classes refused (to lone surrogates, for data no model sees).
        """
        if isinstance(value, str):
            self.check("value", path, value, only)
        elif isinstance(value, dict):
            self._deep(path)
            for key, item in value.items():
                self.check("key", path, key, only)
                self.exact((*path, key), item, only=only)
        elif isinstance(value, list):
            self._deep(path)
            for i, item in enumerate(value):
                self.exact((*path, i), item, only=only)

    def prose(self, path: Path, value: Any) -> Any:
        """`value` with every string cleaned (keys are names: checked, never rewritten)."""
        if isinstance(value, str):
            return clean_text(value)
        if isinstance(value, dict):
            self._deep(path)
            for key in value:
                self.check("key", path, key)
            return {key: self.prose((*path, key), item) for key, item in value.items()}
        if isinstance(value, list):
            self._deep(path)
            return [self.prose((*path, i), item) for i, item in enumerate(value)]
        return value

    def schema(self, path: Path, node: Any) -> Any:
        """A JSON Schema with its prose cleaned and its names and values checked, keyword by keyword."""
        if not isinstance(node, dict):
            self.exact(path, node)
            return node
        self._deep(path)
        out: dict[str, Any] = {}
        for key, value in node.items():
            self.check("keyword", path, key)
            here = (*path, key)
            if key in _PROSE_KEYWORDS:
                out[key] = self.prose(here, value)
            elif key in _SCHEMA_KEYWORDS and isinstance(value, dict):
                out[key] = self.schema(here, value)
            elif key in _SCHEMA_LIST_KEYWORDS and isinstance(value, list):
                out[key] = [self.schema((*here, i), item) for i, item in enumerate(value)]
            elif key in _SCHEMA_MAP_KEYWORDS and isinstance(value, dict):
                role = "property name" if key == "properties" else "name"
                for name in value:
                    self.check(role, here, name)
                out[key] = {name: self.schema((*here, name), sub) for name, sub in value.items()}
            else:
                self.exact(here, value)
                out[key] = value
        return out

    def metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """Metadata with its model-visible parts walked: `title`, `annotations`, `outputSchema` (also
        as `mcp.outputSchema`, where toolsearch.mcp keeps an upstream's); the rest is data no model
        reads, kept as given but refused when it holds a lone surrogate (it could not be stored)."""
        out: dict[str, Any] = {}
        for key, value in metadata.items():
            here: Path = ("metadata", key)
            if key in ("title", "annotations"):
                out[key] = self.prose(here, value)
            elif key == "outputSchema":
                out[key] = self.schema(here, value)
            elif key == "mcp" and isinstance(value, dict):
                out[key] = {k: self.schema((*here, k), v) if k == "outputSchema" else v for k, v in value.items()}
                self.exact(here, {k: v for k, v in value.items() if k != "outputSchema"})  # routing names
            else:
                self.check("key", ("metadata",), key, only=SURROGATES)
                self.exact(here, value, only=SURROGATES)
                out[key] = value
        return out

    def _deep(self, path: Path) -> None:
        if len(path) > MAX_DEPTH:
            raise InvalidToolError(f"{self.where}: {_render(path[:1])} is nested deeper than {MAX_DEPTH} levels")
