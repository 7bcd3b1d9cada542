"""The Tool record, converters from every provider's shape, and provider-safe names."""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from ._errors import DuplicateToolError, InvalidToolError, wrong_type
from ._untrusted import Walk, clean_text, describe, quoted

MAX_NAME_CHARS = 256
MAX_DESCRIPTION_CHARS = 64_000
# An input schema's JSON. The largest of 6,000 real tools' here is 4,969 characters (BFCL). A client takes in a
# tool's schema whole, in one message: the MCP SDK's HTTP client reads at most 1 MiB per event, and one 3.9 MB
# schema made a gateway's tool_search and tools/list fail at the protocol level for that client's session.
MAX_SCHEMA_CHARS = 256_000
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
_PROVIDER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool definition, provider-neutral; immutable and validated on creation.

    Every model-visible field is untrusted text, cleaned or checked here, so every converter and
    every source gets the same rule (toolsearch._untrusted): prose (description, titles, tags,
    schema descriptions, examples, defaults) is repaired; a hidden character in a name, property
    name, enum value or other value the server compares raises InvalidToolError.
    """

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=lambda: dict(_EMPTY_SCHEMA))
    namespace: str | None = None
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    fingerprint: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # a name over the limit is quoted only up to it: a 100,000-character one made a 100 KB error line
        where = (f"tool {quoted(self.name[:MAX_NAME_CHARS])}{'...' if len(self.name) > MAX_NAME_CHARS else ''}"
                 if isinstance(self.name, str) else "tool")
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidToolError(f"{where}: 'name' must be a non-empty string, got {self.name!r}")
        if self.name != self.name.strip():
            raise InvalidToolError(
                f"{where}: the name starts or ends with whitespace, so it would pass for {quoted(self.name.strip())} "
                f"while differing from it; remove the surrounding whitespace (name={quoted(self.name.strip())})"
            )
        if len(self.name) > MAX_NAME_CHARS:
            raise InvalidToolError(f"{where}: name is {len(self.name)} chars; the limit is {MAX_NAME_CHARS}")
        walk = Walk(where)
        walk.check("name", (), self.name)
        _refuse_breaks(where, "name", self.name)
        if self.description is None:
            object.__setattr__(self, "description", "")
        if not isinstance(self.description, str):
            raise InvalidToolError(
                f"{where}: 'description' must be a string, got {type(self.description).__name__}"
            )
        object.__setattr__(self, "description", clean_text(self.description))
        if len(self.description) > MAX_DESCRIPTION_CHARS:
            raise InvalidToolError(
                f"{where}: description is {len(self.description)} chars; the limit is {MAX_DESCRIPTION_CHARS}"
            )
        if self.namespace is not None and (not isinstance(self.namespace, str) or not self.namespace.strip()):
            raise InvalidToolError(f"{where}: 'namespace' must be a non-empty string or None, got {self.namespace!r}")
        if self.namespace is not None:
            # the name's rule: the meta-tool's enum offers the namespace as written, and a model's value is stripped
            if self.namespace != self.namespace.strip():
                raise InvalidToolError(
                    f"{where}: the namespace {quoted(self.namespace)} starts or ends with whitespace, so it would "
                    f"pass for {quoted(self.namespace.strip())} while differing from it; remove the surrounding "
                    f"whitespace (namespace={quoted(self.namespace.strip())})"
                )
            walk.check("namespace", (), self.namespace)
            _refuse_breaks(where, "namespace", self.namespace)
        tags = self.tags
        if not isinstance(tags, list | tuple) or not all(isinstance(t, str) for t in tags):
            raise InvalidToolError(f"{where}: 'tags' must be a list of strings")
        object.__setattr__(self, "tags", tuple(clean_text(t) for t in tags))
        schema = _validated_schema(walk, self.input_schema)
        object.__setattr__(self, "input_schema", schema)
        try:
            metadata = json.loads(json.dumps(dict(self.metadata), allow_nan=False))
        except (TypeError, ValueError) as exc:
            _refuse_nonfinite(where, ("metadata",), self.metadata)
            raise InvalidToolError(f"{where}: 'metadata' must be JSON-serialisable ({exc})") from None
        except RecursionError:
            raise InvalidToolError(f"{where}: 'metadata' is nested too deeply") from None
        object.__setattr__(self, "metadata", walk.metadata(metadata))
        digest = hashlib.sha256(_canonical(self.to_dict()).encode()).hexdigest()
        object.__setattr__(self, "fingerprint", digest)

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    @classmethod
    def _restore(cls, data: Mapping[str, Any], fingerprint: str) -> Tool:
        """Rebuild a tool this library validated and stored itself, skipping validation.

        Only for the index store, which checks the stored file's SHA-256 first: re-validating
        10,000 tools costs about a second, which would make loading an index slow.
        """
        tool = object.__new__(cls)
        for name, value in (
            ("name", data["name"]),
            ("description", data.get("description", "")),
            ("input_schema", data.get("input_schema") or dict(_EMPTY_SCHEMA)),
            ("namespace", data.get("namespace")),
            ("tags", tuple(data.get("tags") or ())),
            ("metadata", data.get("metadata") or {}),
            ("fingerprint", fingerprint),
        ):
            object.__setattr__(tool, name, value)
        return tool

    def to_dict(self) -> dict[str, Any]:
        """The dataset/JSONL shape, with namespace, tags and metadata when set."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }
        if self.namespace is not None:
            out["namespace"] = self.namespace
        if self.tags:
            out["tags"] = list(self.tags)
        if self.metadata:
            out["metadata"] = self.metadata
        return out

    def to_openai(self, *, name: str | None = None, responses: bool = False) -> dict[str, Any]:
        """OpenAI function tool: Chat Completions shape, or Responses shape when `responses`."""
        fn = {"name": name or self.name, "description": self.description, "parameters": self.input_schema}
        if responses:
            return {"type": "function", **fn}
        return {"type": "function", "function": fn}

    def to_anthropic(self, *, name: str | None = None) -> dict[str, Any]:
        """Anthropic Messages tool definition.

        Anthropic refuses (HTTP 400, the whole request) an `input_schema` with `oneOf`, `anyOf` or
        `allOf` at its top level: such a schema is sent folded into one object schema (see
        `anthropic_input_schema`). Calls are still validated against the tool's own schema.
        """
        schema = self.input_schema
        if any(key in schema for key in _COMBINATORS):  # folded once per definition: every request shows the tool
            folded = _FOLDED.get(self.fingerprint)
            if folded is None:
                if len(_FOLDED) >= _MAX_FOLDED:
                    _FOLDED.clear()
                folded = _FOLDED[self.fingerprint] = anthropic_input_schema(schema)
            schema = folded
        return {"name": name or self.name, "description": self.description, "input_schema": schema}

    def to_mcp(self, *, name: str | None = None) -> dict[str, Any]:
        """MCP `Tool` shape (camelCase inputSchema), with the `title` and `annotations` the tool came with.

        An MCP tool's `outputSchema`, `_meta` and `icons` stay in `metadata` and are not written here: a client
        shown an output schema expects every result to carry matching `structuredContent`, which the results
        this library relays do not promise.
        """
        out: dict[str, Any] = {
            "name": name or self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if isinstance(self.metadata.get("title"), str):
            out["title"] = self.metadata["title"]
        if isinstance(self.metadata.get("annotations"), Mapping):
            out["annotations"] = self.metadata["annotations"]
        return out

    # --- converters -----------------------------------------------------------------------

    @classmethod
    def from_openai(cls, definition: Mapping[str, Any], *, namespace: str | None = None) -> Tool:
        """From a Chat Completions (`{"type","function":{...}}`) or Responses function tool.

        The row's `namespace`, `tags` and `metadata` are read as a dataset row's; `strict` and every other key
        go into `metadata` (`to_openai` does not send `strict`: whether tools are sent strict is the model
        adapter's setting, as augmented fields and Anthropic's folding change a schema on the way).
        """
        _require_mapping(definition, "OpenAI tool")
        fn = definition.get("function", definition)
        _require_mapping(fn, "OpenAI tool 'function'")
        label = _label(fn.get("name"))
        if definition.get("type") is not None:
            _check_function_type(label, definition.get("type"), has_schema=fn.get("parameters") is not None)
        metadata = _row_metadata(label, definition, skip=_OPENAI_KEYS)
        if fn is not definition:
            metadata.update((k, v) for k, v in fn.items() if k not in _OPENAI_KEYS and v is not None)
        return cls(
            name=fn.get("name"),  # type: ignore[arg-type]
            description=_given(fn.get("description"), ""),
            input_schema=_given(fn.get("parameters"), dict(_EMPTY_SCHEMA)),
            namespace=namespace or definition.get("namespace"),
            tags=_given(definition.get("tags"), ()),
            metadata=metadata,
        )

    @classmethod
    def from_anthropic(cls, definition: Mapping[str, Any], *, namespace: str | None = None) -> Tool:
        """From an Anthropic Messages tool (`name`, `description`, `input_schema`; `type: "custom"` optional).

        Other keys (`cache_control`, ...) go into `metadata`; a server tool (`web_search_20250305`) is refused.
        """
        _require_mapping(definition, "Anthropic tool")
        return _from_row(cls, definition, "input_schema", namespace)

    @classmethod
    def from_mcp(cls, definition: Any, *, namespace: str | None = None) -> Tool:
        """From an MCP `Tool` object or its JSON (`inputSchema`; `title`, `annotations`, `outputSchema` and any other
        field are kept in `metadata`; `to_mcp` writes back `title` and `annotations`).

        `_meta` is left out: it is protocol metadata a server may change on every listing, and a tool's fingerprint
        covers its metadata, so a stamped listing would read as a changed tool (an index rebuilt, a gateway
        session's definition repinned) although the definition is the same.
        """
        data = (
            definition.model_dump(by_alias=True, exclude_none=True, mode="json")
            if hasattr(definition, "model_dump")
            else definition
        )
        _require_mapping(data, "MCP tool")
        data = {k: v for k, v in data.items() if k != "_meta"}
        return _from_row(cls, data, "inputSchema" if "inputSchema" in data else "input_schema", namespace)

    @classmethod
    def from_callable(
        cls, fn: Callable[..., Any], *, name: str | None = None, namespace: str | None = None
    ) -> Tool:
        """From a Python function: schema from its type hints, text from its docstring."""
        return _tool_from_callable(cls, fn, name=name, namespace=namespace)

    @classmethod
    def from_dict(cls, definition: Mapping[str, Any], *, namespace: str | None = None) -> Tool:
        """From any supported JSON shape, detected by its keys (see ACCEPTED_SHAPES).

        Keys a shape does not read go into `metadata`, except a JSON schema under an unread key in a row that
        gives none under a key it reads (`input_shema`, `args_schema`): that tool would be offered without
        parameters, so it is refused by the key's name. A `type` other than a function tool's is refused too.
        """
        _require_mapping(definition, "tool definition")
        if "function" in definition or "parameters" in definition:
            return cls.from_openai(definition, namespace=namespace)
        if "inputSchema" in definition:
            return cls.from_mcp(definition, namespace=namespace)
        if "name" not in definition:
            raise InvalidToolError(f"unrecognised tool shape (keys: {_some_keys(definition)}); {ACCEPTED_SHAPES}")
        gemini = next((k for k in _GEMINI_SCHEMA_KEYS if k in definition), None)
        if gemini is not None and "input_schema" not in definition:
            return _from_row(cls, definition, gemini, namespace)
        return _from_row(cls, definition, "input_schema", namespace)


# Keys each shape reads itself; every other key of a definition goes into `metadata`.
_ROW_KEYS = frozenset({"name", "description", "namespace", "tags", "metadata", "source", "type"})
_OPENAI_KEYS = _ROW_KEYS | {"function", "parameters"}
_GEMINI_SCHEMA_KEYS = ("parametersJsonSchema", "parameters_json_schema")  # a Gemini FunctionDeclaration's JSON Schema
# A key naming one of these holds what a tool returns, not its parameters (MCP outputSchema, Gemini response...).
_OUTPUT_WORDS = ("output", "response", "return", "result")


def _label(name: Any) -> str:
    return f"tool {quoted(name[:80])}" if isinstance(name, str) else "tool"


def _from_row(cls: type[Tool], definition: Mapping[str, Any], schema_key: str, namespace: str | None) -> Tool:
    """A tool from a row whose parameters are under `schema_key`: the dataset, Anthropic, MCP and Gemini shapes."""
    label = _label(definition.get("name"))
    schema = definition.get(schema_key)
    if definition.get("type") is not None:
        _check_function_type(label, definition.get("type"), has_schema=schema is not None)
    metadata = _row_metadata(label, definition, skip=_ROW_KEYS | {schema_key})
    if schema is None:
        _refuse_unread_schema(label, definition, _ROW_KEYS | {schema_key})
    return cls(
        name=definition.get("name"),  # type: ignore[arg-type]
        description=_given(definition.get("description"), ""),
        input_schema=_given(schema, dict(_EMPTY_SCHEMA)),
        namespace=namespace or definition.get("namespace"),
        tags=_given(definition.get("tags"), ()),
        metadata=metadata,
    )


def _row_metadata(label: str, definition: Mapping[str, Any], *, skip: frozenset[str]) -> dict[str, Any]:
    """A row's `metadata`, its `source`, and every key its shape does not read (None values left out)."""
    raw = definition.get("metadata")
    if raw is not None and not isinstance(raw, Mapping):
        raise InvalidToolError(f"{label}: 'metadata' must be a JSON object, got {type(raw).__name__}")
    metadata = dict(raw or {})
    if definition.get("source"):
        metadata["source"] = definition["source"]
    metadata.update((k, v) for k, v in definition.items() if k not in skip and v is not None)
    return metadata


def _check_function_type(label: str, kind: Any, *, has_schema: bool) -> None:
    """InvalidToolError for a definition whose `type` is not a function tool's."""
    if kind == "function" or (kind == "custom" and has_schema):  # Anthropic's client tool may say "custom"
        return
    if kind == "custom":
        raise InvalidToolError(
            f"{label}: 'type' is 'custom' with no JSON schema: an OpenAI custom tool, whose input is free text, "
            "not JSON arguments a search can show and a call can be checked against; define it as a function "
            "tool with parameters, or send it to the model yourself"
        )
    raise InvalidToolError(
        f"{label}: 'type' is {str(kind)[:60]!r}, not a function tool: a provider's built-in tool (Anthropic's "
        "web_search_20250305 or bash_20250124, OpenAI's web_search or file_search) runs at the provider, not in "
        "your code, so it cannot be searched for and called through a catalog; send it with each request "
        f"yourself, or describe your own function with 'type': 'function'. {ACCEPTED_SHAPES}"
    )


def _refuse_unread_schema(label: str, definition: Mapping[str, Any], read: frozenset[str]) -> None:
    """InvalidToolError for a JSON schema under a key the row's shape does not read, when the row gives none
    under a key it reads: the tool would be offered with no parameters (`input_shema`, LangChain's `args_schema`)."""
    for key, value in definition.items():
        if key in read or not isinstance(value, Mapping) or any(w in str(key).lower() for w in _OUTPUT_WORDS):
            continue
        if "properties" in value or value.get("type") == "object":
            raise InvalidToolError(
                f"{label}: {quoted(str(key)[:60])} holds a JSON schema, but a tool's parameters are read only from "
                "'input_schema' (Anthropic, dataset rows), 'inputSchema' (MCP), 'parameters' (OpenAI) or "
                "'parametersJsonSchema' (Gemini), so this tool would be offered without parameters; put its "
                f"schema under one of those keys. {ACCEPTED_SHAPES}"
            )


ACCEPTED_SHAPES = (
    'accepted shapes: OpenAI {"type": "function", "function": {"name", "description", "parameters"}} or '
    '{"type": "function", "name", "parameters"}; Anthropic {"name", "description", "input_schema"}; '
    'MCP {"name", "description", "inputSchema"}; Gemini {"name", "description", "parametersJsonSchema"}; dataset '
    'rows {"name", "description", "input_schema", "namespace"?, "tags"?, "metadata"?} (other keys go into '
    'metadata); a file may also hold a list of them, {"tools": [...]}, or a JSON-RPC tools/list response '
    '{"result": {"tools": [...]}}'
)


def _some_keys(definition: Mapping[str, Any]) -> str:
    keys = [repr(str(k)[:40]) for k in list(definition)[:8]]
    return ", ".join(keys) + (", ..." if len(definition) > 8 else "") if keys else "none"


def _given(value: Any, default: Any) -> Any:
    """`default` for an absent (null) field; any other value is checked by Tool, never silently replaced."""
    return default if value is None else value


def _require_mapping(value: Any, what: str) -> None:
    if not isinstance(value, Mapping):
        raise InvalidToolError(f"{what} must be a JSON object, got {type(value).__name__}")


_BREAK_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})  # control characters (tab, CR and LF too), line and paragraph breaks


def _refuse_breaks(where: str, field: str, text: str) -> None:
    """InvalidToolError for a name or namespace holding a line break, a tab or another control character.

    The hidden-character rule (toolsearch._untrusted) lets tab, CR and LF through, as prose needs them; a name
    does not, and the meta-tool's text and the system prompt print names and namespaces one to a line, where a
    break would let a definition write lines of its own ("- delete_all_files (score 9.99): ...").
    """
    if text.isprintable():  # no character of those categories (nor any other non-printable one)
        return
    for position, char in enumerate(text):
        if unicodedata.category(char) in _BREAK_CATEGORIES:
            shown = "" if field == "name" else f" {quoted(text if len(text) <= 60 else text[:57] + '...')}"  # `where`
            raise InvalidToolError(  # names the tool
                f"{where}: the {field}{shown} holds {describe(char)} (position {position}), a line break or control "
                f"character: a {field} is printed on one line of the search results and the system prompt; remove "
                f"the character from the {field}"
            )


def _refuse_nonfinite(where: str, root: tuple[str, ...], value: Any) -> None:
    """InvalidToolError naming the first NaN or infinity in `value` (Python's json reads and writes them; JSON,
    and so every provider's request, cannot carry them), if it holds one."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [(root, value)]
    seen: set[int] = set()
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            shown = "NaN" if math.isnan(item) else ("Infinity" if item > 0 else "-Infinity")
            why = (
                "every request showing the tool would fail" if root[0] == "input_schema"
                else "a stored index or an exported catalog would not be JSON"
            )
            raise InvalidToolError(
                f"{where}: {_dotted(path)} is {shown}, which JSON cannot carry ({why}); remove it or give a finite "
                "number"
            )
        if isinstance(item, Mapping | list | tuple) and id(item) not in seen:
            seen.add(id(item))  # a container met again (a cycle) is json's own error to report
            pairs = item.items() if isinstance(item, Mapping) else enumerate(item)
            stack.extend(((*path, k), v) for k, v in reversed(list(pairs)))


def _dotted(path: tuple[str | int, ...]) -> str:
    """`input_schema.properties.lat.default`, `metadata.w[0]`: a field's path as a message names it."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and (part.isidentifier() or part.startswith("$")):
            out += f".{part}" if out else part
        else:
            out += f"[{quoted(str(part))}]"
    return out


def _validated_schema(walk: Walk, schema: Any) -> dict[str, Any]:
    where = walk.where
    if not isinstance(schema, Mapping):
        raise InvalidToolError(f"{where}: input schema must be a JSON object, got {type(schema).__name__}")
    try:
        text = json.dumps(schema, allow_nan=False)
        copy: dict[str, Any] = json.loads(text) if len(text) <= MAX_SCHEMA_CHARS else {}
    except (TypeError, ValueError) as exc:
        _refuse_nonfinite(where, ("input_schema",), schema)
        raise InvalidToolError(f"{where}: input schema is not JSON-serialisable ({exc})") from None
    except RecursionError:
        raise InvalidToolError(f"{where}: input schema is nested too deeply") from None
    if len(text) > MAX_SCHEMA_CHARS:
        raise InvalidToolError(
            f"{where}: input schema is {len(text):,} characters of JSON; the limit is {MAX_SCHEMA_CHARS:,}"
        )
    copy = walk.schema(("input_schema",), copy)
    kind = copy.setdefault("type", "object")
    if kind != "object":
        raise InvalidToolError(f"{where}: input schema 'type' must be 'object', got {kind!r}")
    props = copy.setdefault("properties", {})
    if not isinstance(props, dict):
        raise InvalidToolError(f"{where}: input schema 'properties' must be an object")
    for pname, pschema in props.items():
        if not isinstance(pschema, dict):
            raise InvalidToolError(f"{where}: parameter {pname!r} schema must be an object")
        ptype = pschema.get("type")
        types = ptype if isinstance(ptype, list) else [ptype] if ptype is not None else []
        bad = [t for t in types if t not in _JSON_TYPES]
        if bad:
            raise InvalidToolError(f"{where}: parameter {pname!r} has unknown JSON type {bad[0]!r}")
    required = copy.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise InvalidToolError(f"{where}: input schema 'required' must be a list of parameter names")
    return copy


# --- Anthropic's input_schema ------------------------------------------------------------------

_COMBINATORS = ("allOf", "anyOf", "oneOf")
_COMBINATOR_NOTE = {
    "allOf": "all of these apply",
    "anyOf": "at least one of these applies",
    "oneOf": "exactly one of these applies",
}
_MAX_NOTE_CHARS = 2_000
# Distinct branches whose own top-level combinators are folded too, per schema; past that a branch is read as
# written. Each is folded once whatever the paths to it (`_Fold.folded`): folded once per path, `$defs` whose
# entries each point twice at the next cost 2^depth (16 levels took 1.6 s, on every Anthropic request showing the
# tool). A schema's size is bounded (256,000 characters), and so is this, far above what real schemas hold (an
# OpenAPI `oneOf` over a few hundred event types, each `allOf` its parent and its own fields).
_MAX_NESTED_FOLDS = 4_096
_MAX_REF_HOPS = 64  # a chain of references followed for one branch (real ones have one or two)
_NOTE_ENCODER = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def anthropic_input_schema(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """`schema` as Anthropic's `input_schema` accepts it: no `oneOf` / `anyOf` / `allOf` at the top level.

    Each top-level combinator is folded into the object schema: its branches' properties are added
    (a property the branches define differently becomes the same combinator of their definitions),
    and a property is required when the top level requires it, when every branch of an anyOf/oneOf
    requires it, or when any branch of an allOf does. The alternatives themselves are written into
    the schema's `description`, so the model still reads which combinations are valid. A schema
    without a top-level combinator is returned as it is.

    A branch that is a local reference (`{"$ref": "#/$defs/ByCity"}`, `#/definitions/...`) is read
    as the schema it points to (a chain of references is followed; one that comes back to itself is
    left as it is). A branch's own top-level combinators are folded the same way, once per distinct
    branch however many references lead to it, for the first 4,096 such branches of a schema; the rest
    are read as written (the work stays bounded, whatever the schema). The folded schema keeps `$defs` /
    `definitions` only while something in it still references them.
    """
    if not any(key in schema for key in _COMBINATORS):
        return schema
    out = _folded(schema, _Fold(schema), frozenset())
    if not _references(out, skip=_DEFINITIONS):
        out = {k: v for k, v in out.items() if k not in _DEFINITIONS}
    return out


_DEFINITIONS = ("$defs", "definitions")
# Anthropic's input_schema by tool fingerprint, for the tools whose schema needs folding (a few, in most catalogs).
_FOLDED: dict[str, Mapping[str, Any]] = {}
_MAX_FOLDED = 1_024


class _Fold:
    """One schema's folding: the root its local references point into, each reference looked up once, each
    branch's own combinators folded once (by the branch object: every reference to a target reads that one
    object), and how many more distinct branches may be folded."""

    __slots__ = ("folded", "nested_left", "root", "targets")

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.targets: dict[str, Mapping[str, Any] | None] = {}
        # id(branch) -> (branch, its fold): the branch is kept so that its id is not reused meanwhile
        self.folded: dict[int, tuple[Mapping[str, Any], dict[str, Any]]] = {}
        self.nested_left = _MAX_NESTED_FOLDS

    def target(self, ref: str) -> Mapping[str, Any] | None:
        if ref not in self.targets:
            self.targets[ref] = _pointed(self.root, ref)
        return self.targets[ref]

    def resolved(
        self, branch: Mapping[str, Any], following: frozenset[str]
    ) -> tuple[Mapping[str, Any], frozenset[str]]:
        """`branch` with a local `$ref` (`#/...`) replaced by the schema it points to (its other keys kept over the
        target's), following a chain of them; a reference already being followed, or one that points nowhere,
        stays. A bare reference is its target itself: every branch naming it reads the same object."""
        for _ in range(_MAX_REF_HOPS):
            ref = branch.get("$ref")
            if not isinstance(ref, str) or ref in following:
                break
            target = self.target(ref)
            if target is None:
                break
            following = following | {ref}
            rest = {k: v for k, v in branch.items() if k != "$ref"}
            branch = {**target, **rest} if rest else target
        return branch, following


def _folded(schema: Mapping[str, Any], fold: _Fold, following: frozenset[str]) -> dict[str, Any]:
    """`schema` with its top-level combinators folded (see anthropic_input_schema); `following` holds the
    references being resolved on the way here (a cycle guard)."""
    out: dict[str, Any] = {k: v for k, v in schema.items() if k not in _COMBINATORS}
    properties: dict[str, Any] = dict(out.get("properties") or {})
    required: list[str] = list(out.get("required") or [])
    notes: list[str] = []
    for key in _COMBINATORS:
        found_branches = [b for b in schema.get(key) or () if isinstance(b, Mapping)]
        if not found_branches:
            continue
        branches: list[Mapping[str, Any]] = []
        for branch in found_branches:
            branch, seen = fold.resolved(branch, following)
            if id(branch) in fold.folded:  # a target other branches (here or anywhere in the schema) name
                branch = fold.folded[id(branch)][1]
            elif any(k in branch for k in _COMBINATORS) and fold.nested_left > 0:  # a branch's own combinators
                fold.nested_left -= 1
                folded = _folded(branch, fold, seen)
                fold.folded[id(branch)] = (branch, folded)
                branch = folded
            branches.append(branch)
        distinct = list({id(b): b for b in branches}.values())  # branches naming one reference read one object
        defined: dict[str, list[Any]] = {}
        for branch in distinct:
            for pname, pschema in (branch.get("properties") or {}).items():
                if pschema not in defined.setdefault(pname, []):
                    defined[pname].append(pschema)
        for pname, found in defined.items():
            if pname not in properties:
                properties[pname] = found[0] if len(found) == 1 else {key: found}
        sets = [set(b.get("required") or ()) for b in distinct]
        wanted = set.union(*sets) if key == "allOf" else set.intersection(*sets)
        required.extend(r for r in sorted(wanted) if r not in required)
        notes.append(f"The arguments must match {key}, {_COMBINATOR_NOTE[key]}: {_listed(branches)}")
    out["type"] = "object"
    out["properties"] = properties
    if required:
        out["required"] = required
    note = " ".join(notes)
    if len(note) > _MAX_NOTE_CHARS:
        note = note[: _MAX_NOTE_CHARS - 3] + "..."
    description = out.get("description")
    out["description"] = f"{description}\n\n{note}" if isinstance(description, str) and description else note
    return out


def _listed(branches: list[Mapping[str, Any]]) -> str:
    """`(1) {...}; (2) {...}`: the branches' canonical JSON, written only as far as the note can show."""
    parts: list[str] = []
    size = 0
    for i, branch in enumerate(branches, 1):
        if size > _MAX_NOTE_CHARS:
            break  # the note is cut there anyway
        chunks: list[str] = []
        for chunk in _NOTE_ENCODER.iterencode(branch):  # lazily: a branch's JSON may be far longer than a note
            chunks.append(chunk)
            size += len(chunk)
            if size > _MAX_NOTE_CHARS:
                break
        parts.append(f"({i}) {''.join(chunks)}")
        size += len(str(i)) + 5
    return "; ".join(parts)


def json_pointer(root: Mapping[str, Any], pointer: str, *, fragment: bool = False) -> Any:
    """The node a JSON pointer (`/$defs/Refund`, RFC 6901) names in `root`, or None; `fragment`: the pointer comes
    from a URI fragment (`#/$defs/X` less its `#`), whose parts are percent-encoded too."""
    node: Any = root
    for raw in pointer.split("/")[1:] if pointer else []:
        part = (unquote(raw) if fragment else raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _pointed(root: Mapping[str, Any], ref: str) -> Mapping[str, Any] | None:
    """The schema a local JSON pointer (`#/$defs/X`) names in `root`, or None."""
    if not ref.startswith("#/"):
        return None  # the root itself (`#`, a recursion) or an anchor (`#name`): not followed
    node = json_pointer(root, ref[1:], fragment=True)
    return node if isinstance(node, Mapping) else None


def _references(value: Any, *, skip: tuple[str, ...] = ()) -> bool:
    """Whether `value` holds a local `$ref` anywhere (outside the top-level keys in `skip`).

    Each object is looked at once: a folded schema holds one referenced schema in many places.
    """
    stack: list[Any] = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if not isinstance(item, Mapping | list) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, list):
            stack.extend(item)
            continue
        ref = item.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            return True
        stack.extend(v for k, v in item.items() if item is not value or k not in skip)
    return False


# --- callables -------------------------------------------------------------------------------

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters)\s*:\s*$", re.IGNORECASE)
_ARG_LINE = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its summary and per-argument descriptions."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    summary: list[str] = []
    params: dict[str, str] = {}
    in_args = in_other_section = False
    for line in lines:
        indented = line.startswith((" ", "\t"))
        if _ARGS_HEADER.match(line):
            in_args, in_other_section = True, False
            continue
        if in_args:
            if not line.strip() or indented:
                m = _ARG_LINE.match(line)
                if m:
                    params[m.group(1)] = m.group(2).strip()
                elif line.strip() and params:
                    last = next(reversed(params))
                    params[last] += " " + line.strip()
                continue
            in_args = False  # an unindented line ends the section and is read below
        if line.strip().endswith(":") and line.strip()[:-1].isalpha():  # Returns:, Raises:, ...
            in_other_section = True
            continue
        if in_other_section:
            if not line.strip() or indented:
                continue  # that section's body is not part of the description
            in_other_section = False
        summary.append(line)
    return "\n".join(summary).strip(), params


def _tool_from_callable(
    cls: type[Tool], fn: Callable[..., Any], *, name: str | None, namespace: str | None
) -> Tool:
    from pydantic import Field, create_model

    if not callable(fn):
        raise InvalidToolError(f"{fn!r} is not callable: pass the function (or method) the tool runs")
    summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    try:
        hints = inspect.get_annotations(fn, eval_str=True)
    except Exception:  # unresolvable forward references: fall back to raw annotations
        hints = getattr(fn, "__annotations__", {})
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or pname in ("self", "cls"):
            continue
        annotation = hints.get(pname, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (annotation, Field(default, description=arg_docs.get(pname)))
    tool_name = name or getattr(fn, "__name__", None) or "tool"
    try:
        model = create_model(f"{tool_name}_args", **fields)
        schema = model.model_json_schema()
    except Exception as exc:
        raise InvalidToolError(f"tool {tool_name!r}: cannot derive a JSON schema from its signature ({exc})") from None
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return cls(name=tool_name, description=summary, input_schema=schema, namespace=namespace)


# --- files -----------------------------------------------------------------------------------


def load_tools(path: str | Path, *, namespace: str | None = None) -> list[Tool]:
    """Read tools from a JSON or JSONL file in the OpenAI, Anthropic, MCP or dataset shape."""
    if not isinstance(path, (str, os.PathLike)):
        raise wrong_type("load_tools: path", path, "a file path (str or Path)")
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a BOM (Windows editors write one) is not content
    except FileNotFoundError:
        raise InvalidToolError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise InvalidToolError(
            f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02X} at offset {exc.start}); save it as UTF-8"
        ) from None
    except OSError as exc:
        raise InvalidToolError(f"{path}: cannot read ({exc})") from None
    items: list[tuple[int, Any]] = []
    stripped = text.lstrip()
    if path.suffix == ".jsonl" or (stripped.startswith("{") and "\n{" in stripped and not _is_one_json(text)):
        # "\n" alone ends a line ("\r\n" too: JSON reads the "\r" as white space): str.splitlines also splits
        # on U+2028, U+0085 and others, which JSON writers leave raw inside strings (JS JSON.stringify does)
        for lineno, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidToolError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
            except RecursionError:
                raise InvalidToolError(f"{path}:{lineno}: JSON nested too deeply") from None
            # a line may be one page of a `tools/list` conversation: each response's tools, in order
            page = _rpc_tools(item, f"{path}:{lineno}")
            if page is None:
                items.append((lineno, item))
            else:
                items.extend((lineno, tool) for tool in page)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidToolError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
        except RecursionError:
            raise InvalidToolError(f"{path}: JSON nested too deeply") from None
        page = _rpc_tools(data, str(path))
        if page is not None:
            data = page
        elif isinstance(data, Mapping) and isinstance(data.get("tools"), list):
            data = data["tools"]
        if isinstance(data, Mapping):
            data = [data]
        if not isinstance(data, list):
            raise InvalidToolError(
                f"{path}: expected a list of tools, an object with a 'tools' list, or a JSON-RPC tools/list response"
            )
        items = [(0, item) for item in data]
    tools: list[Tool] = []
    for lineno, item in items:
        try:
            tools.append(Tool.from_dict(item, namespace=namespace))
        except InvalidToolError as exc:
            where = f"{path}:{lineno}" if lineno else f"{path} (item {len(tools) + 1})"
            raise InvalidToolError(f"{where}: {exc}") from None
    _refuse_repeated(path, tools, [lineno for lineno, _ in items])
    return tools


def _refuse_repeated(path: Path, tools: list[Tool], lines: list[int]) -> None:
    """DuplicateToolError for the names a file defines more than once (or in two Unicode forms, which print the
    same), each with the lines (JSONL) or items (a JSON list) defining it: Catalog, which knows no files, cannot."""
    groups: dict[str, list[int]] = {}
    for i, tool in enumerate(tools):
        groups.setdefault(tool.name if tool.name.isascii() else unicodedata.normalize("NFC", tool.name), []).append(i)
    repeated = [group for group in groups.values() if len(group) > 1]
    if not repeated:
        return

    def place(i: int) -> int:
        return lines[i] or i + 1

    word = "line" if lines and lines[0] else "item"
    shown = []
    for group in repeated[:10]:
        spellings = dict.fromkeys(tools[i].name for i in group)
        if len(spellings) == 1:
            at = list(dict.fromkeys(place(i) for i in group))
            plural = "s" if len(at) > 1 else ""
            shown.append(f"{quoted(tools[group[0]].name)} ({word}{plural} {', '.join(map(str, at))})")
        else:  # ascii() shows the difference that repr and a terminal hide
            forms = " and ".join(f"{tools[i].name!a} ({word} {place(i)})" for i in group)
            shown.append(f"{forms}, the same name in two Unicode forms (equal after NFC normalisation)")
    more = f" and {len(repeated) - 10} more" if len(repeated) > 10 else ""
    raise DuplicateToolError(
        f"{path}: {len(repeated)} tool name(s) defined more than once: {'; '.join(shown)}{more}; give each tool a "
        "unique name (or a namespace prefix)",
        list(dict.fromkeys(tools[i].name for group in repeated for i in group)),
    )


def _rpc_tools(data: Any, where: str) -> list[Any] | None:
    """The tools of a JSON-RPC response to MCP's `tools/list` (`result.tools`), or None when `data` is not a response.

    What `curl` or an MCP inspector prints for a server's tools is such a response; one with an error, or with
    another method's result, is refused by name rather than read as a tool.
    """
    if not isinstance(data, Mapping) or "jsonrpc" not in data or not ({"result", "error"} & data.keys()):
        return None
    if "error" in data:
        error = data["error"]
        message = error.get("message") if isinstance(error, Mapping) else error
        raise InvalidToolError(f"{where}: a JSON-RPC error response ({str(message)[:200]!r}), not a tools/list result")
    result = data["result"]
    if not isinstance(result, Mapping) or not isinstance(result.get("tools"), list):
        keys = _some_keys(result) if isinstance(result, Mapping) else type(result).__name__
        raise InvalidToolError(
            f"{where}: a JSON-RPC response whose result has no 'tools' list (result keys: {keys}); give the response "
            "to a tools/list request"
        )
    return list(result["tools"])


def _is_one_json(text: str) -> bool:
    try:
        json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return False
    return True


# --- provider-safe names ---------------------------------------------------------------------


def provider_safe_name(name: str) -> str:
    """A name every LLM API accepts (`^[A-Za-z0-9_-]{1,64}$`), stable for a given input.

    >>> from toolsearch import provider_safe_name
    >>> provider_safe_name("get_weather")
    'get_weather'
    >>> provider_safe_name("math.factorial")  # no dots in OpenAI names: replaced, and a digest keeps it unique
    'math_factorial_7458e2de'
    """
    if not isinstance(name, str):
        raise wrong_type("provider_safe_name: name", name, "a tool name (str)")
    if _PROVIDER_NAME.match(name):
        return name
    base = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_") or "tool"
    digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]  # any name a model sends
    return f"{base[:SAFE_NAME_KEPT]}_{digest}"


SAFE_NAME_KEPT = 55  # how much of a name provider_safe_name rewrites it keeps, before its digest


class NameMap:
    """Reversible mapping between tool names and the provider-safe aliases sent to models."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._to_safe: dict[str, str] = {}
        self._to_name: dict[str, str] = {}
        for name in names:
            self.add(name)

    def add(self, name: str) -> str:
        """Register a name and return its alias."""
        if name in self._to_safe:
            return self._to_safe[name]
        safe = provider_safe_name(name)
        other = self._to_name.get(safe)
        if other is not None and other != name:
            raise DuplicateToolError(
                f"tools {other!r} and {name!r} map to the same provider name {safe!r}; rename one",
                [other, name],
            )
        self._to_safe[name] = safe
        self._to_name[safe] = name
        return safe

    def safe(self, name: str) -> str:
        """The alias for a registered (or new) name."""
        return self._to_safe.get(name) or self.add(name)

    def original(self, alias: str) -> str | None:
        """The tool name behind an alias, or None when the alias is unknown."""
        return self._to_name.get(alias)
