"""Tool-argument augmentation: fields the model fills on every tool call, taken out before the tool runs.

    def on_augment(tool: str, values: Mapping[str, Any], call_id: str) -> None:
        log.info("%s called because: %s", tool, values["reason"])

    run(model, prompt, session=session, functions=fns, augment=Reason, on_augment=on_augment)

`augment` is a pydantic model class or a JSON schema object; its properties are added to the
input schema of every tool a request exposes (pinned, discovered, deferred, found by a search),
not to `tool_search` unless `search=True`, with its `required` list honoured. On each call the
executor takes the augmented values out, validates them against the augmentation's schema (a
missing required field is an instructive tool error, like any bad argument), hands them to
`on_augment(tool_name, values, call_id)`, and runs the tool with its own arguments only. An
exception from `on_augment` is the application's and propagates: by then the turn's session
update is written and none of the turn's tools has run.

Names are refused, not namespaced, when they collide: an augmented field named like a parameter
of a tool is an `AugmentationError` naming both. Namespacing (`_aug_reason`) would change the
name the model reads and the consumer receives, for a clash the application can fix once by
renaming its own field. A tool's parameters are read from its whole schema: `properties` and
`required` at the top, and inside `allOf` / `anyOf` / `oneOf`, `if` / `then` / `else`,
`dependentSchemas` and local `$ref`s (`#/$defs/...`, `#/definitions/...`), at any depth of those;
a field hidden there would otherwise be taken from the tool's own arguments, or could never
validate. Every exposed tool is checked: the whole catalog at setup (`check`, once per catalog
content), and each tool again as it is extended for a request (`extend`, once per definition), so
a tool added to the index later (`ToolIndex.upsert`, a gateway's upstream changing) is refused the
first time a request would carry it, before the model sees it; `collisions` lists every colliding
tool of a set at once (a gateway leaves them out instead of failing).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._errors import AugmentationError, InvalidToolError
from ._untrusted import Walk
from .tools import Tool, _validated_schema, json_pointer

__all__ = ["Augmentation", "AugmentSpec", "OnAugment", "parameter_names"]

# Gets (catalog tool name, the augmented values of the call, the call's id) for every call that runs.
OnAugment = Callable[[str, Mapping[str, Any], str], object]
AugmentSpec = Any  # a pydantic model class, a JSON schema object, or an Augmentation

_CACHE_SIZE = 8192
_extended: dict[tuple[str, str], Tool] = {}
_collisions: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}
_lock = threading.Lock()


@dataclass(frozen=True, slots=True, eq=False)
class Augmentation:
    """The fields added to every exposed tool's schema, and who consumes their values.

    Build it with `Augmentation.of(spec, on_augment=...)`; `schema` is a JSON schema object with
    `properties` (and `required`). `search=True` adds the fields to `tool_search` as well.
    """

    schema: Mapping[str, Any]
    on_augment: OnAugment | None = None
    search: bool = False
    key: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        schema = _checked_schema(self.schema)
        object.__setattr__(self, "schema", schema)
        digest = hashlib.sha256(json.dumps([schema, self.search], sort_keys=True).encode()).hexdigest()
        object.__setattr__(self, "key", digest)
        if self.on_augment is not None and not callable(self.on_augment):
            raise AugmentationError(
                f"on_augment must be a callable (tool_name, values, call_id), got {type(self.on_augment).__name__}"
            )

    @classmethod
    def of(
        cls, spec: AugmentSpec | None, *, on_augment: OnAugment | None = None, search: bool | None = None
    ) -> Augmentation | None:
        """An Augmentation from a pydantic model class, a JSON schema or an Augmentation (None: none).

        `on_augment` and `search`, when given, override those of an Augmentation passed in.
        """
        if spec is None:
            if on_augment is not None:
                raise AugmentationError("on_augment was given without augment=; pass the fields to add too")
            return None
        if isinstance(spec, Augmentation):
            if on_augment is None and search is None:
                return spec
            return cls(spec.schema, on_augment or spec.on_augment, spec.search if search is None else search)
        if inspect.isclass(spec) and hasattr(spec, "model_json_schema"):
            schema = spec.model_json_schema()
        elif isinstance(spec, Mapping):
            schema = dict(spec)
        else:
            raise AugmentationError(
                f"augment must be a pydantic model class or a JSON schema object, got {type(spec).__name__}"
            )
        return cls(schema, on_augment, bool(search))

    @classmethod
    def from_file(cls, path: str | Path, *, on_augment: OnAugment | None = None) -> Augmentation:
        """An Augmentation from a JSON schema file (`toolsearch mcp serve --augment FILE`)."""
        path = Path(path)
        try:
            raw = json.loads(path.read_text(encoding="utf-8-sig"))
        except FileNotFoundError:
            raise AugmentationError(f"{path}: augmentation schema file not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise AugmentationError(f"{path}: cannot read the augmentation schema ({exc})") from None
        except json.JSONDecodeError as exc:
            raise AugmentationError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
        try:
            return cls(raw, on_augment)
        except AugmentationError as exc:
            raise AugmentationError(f"{path}: {exc}") from None

    # --- the fields -----------------------------------------------------------------------

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.schema["properties"])

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(self.schema.get("required", ()))

    def applies_to(self, tool: Tool, search_name: str) -> bool:
        """False for the search tool (unless `search`): it keeps its own schema."""
        return self.search or tool.name != search_name

    def conflicts(self, tool: Tool) -> list[str]:
        """The augmented fields `tool` already has a parameter of that name for, anywhere in its schema."""
        own = parameter_names(tool.input_schema)
        return [name for name in self.fields if name in own]

    def _refuse(self, tool: Tool, clash: list[str]) -> AugmentationError:
        names = ", ".join(repr(n) for n in clash)
        return AugmentationError(
            f"augmented field(s) {names} collide with the parameter(s) of the same name of tool {tool.name!r}; "
            "rename the augmented field(s) (e.g. 'call_reason') so the tool's own arguments stay its own"
        )

    def collisions(self, tools: Iterable[Tool], *, catalog_key: str | None = None) -> dict[str, tuple[str, ...]]:
        """{tool name: its parameters named like augmented fields} for every tool of the set that collides.

        With `catalog_key` (a catalog's content hash) a set already walked is not walked again.
        """
        memo = (self.key, catalog_key) if catalog_key is not None else None
        if memo is not None:
            found = _collisions.get(memo)
            if found is not None:
                return dict(found)
        clashes = {tool.name: tuple(clash) for tool in tools if (clash := self.conflicts(tool))}
        if memo is not None:
            with _lock:
                if len(_collisions) >= _CACHE_SIZE:
                    _collisions.clear()
                _collisions[memo] = clashes
        return dict(clashes)

    def check(self, tools: Iterable[Tool], *, catalog_key: str | None = None) -> None:
        """Refuse a tool set in which any tool has a parameter named like an augmented field (the first one).

        With `catalog_key` (a catalog's content hash) a set already checked is not walked again.
        """
        tools = list(tools)
        clashes = self.collisions(tools, catalog_key=catalog_key)
        for tool in tools:
            if tool.name in clashes:
                raise self._refuse(tool, list(clashes[tool.name]))

    def extend(self, tool: Tool) -> Tool:
        """`tool` with the augmented fields added to its schema (first, so the model states them before
        the arguments they explain); AugmentationError when a field collides. Cached per definition."""
        memo = (self.key, tool.fingerprint)
        found = _extended.get(memo)
        if found is not None:
            return found
        clash = self.conflicts(tool)
        if clash:
            raise self._refuse(tool, clash)
        schema = dict(tool.input_schema)
        schema["properties"] = {**self.schema["properties"], **(tool.input_schema.get("properties") or {})}
        required = [*self.required, *(tool.input_schema.get("required") or ())]
        if required:
            schema["required"] = required
        try:
            found = Tool(
                name=tool.name,
                description=tool.description,
                input_schema=schema,
                namespace=tool.namespace,
                tags=tool.tags,
                metadata=tool.metadata,
            )
        except InvalidToolError as exc:  # the tool was valid alone: what the augmentation added broke it
            raise AugmentationError(
                f"the augmented field(s) {', '.join(map(repr, self.fields))} cannot be added to tool {tool.name!r}: "
                f"{exc}; make the augmentation's schema smaller"
            ) from None
        with _lock:
            if len(_extended) >= _CACHE_SIZE:
                _extended.pop(next(iter(_extended)), None)
            _extended[memo] = found
        return found

    # --- a call ---------------------------------------------------------------------------

    def split(self, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the tool's own arguments, the augmented values) of one call."""
        fields = self.schema["properties"]
        own = {k: v for k, v in arguments.items() if k not in fields}
        values = {k: v for k, v in arguments.items() if k in fields}
        return own, values

    def problems(self, values: Mapping[str, Any]) -> list[str]:
        """What is wrong with a call's augmented values (at most 5 lines; [] when they fit)."""
        validator = _validator(self)
        errors = sorted(validator.iter_errors(dict(values)), key=lambda e: [str(p) for p in e.absolute_path])
        out = []
        for err in errors[:5]:
            where = "/".join(str(p) for p in err.absolute_path)
            out.append(f"{where}: {err.message}" if where else err.message)
        return out

    def __repr__(self) -> str:
        return f"Augmentation(fields={list(self.fields)}, required={list(self.required)}, search={self.search})"


# Where a JSON schema object can declare more of its own parameters: subschemas that apply to the same
# object (a `not` does not declare any; properties of a property are not the tool's parameters).
_BRANCHES = ("allOf", "anyOf", "oneOf")
_SINGLES = ("if", "then", "else")
_MAX_NODES = 10_000  # a schema is untrusted text: the walk is bounded whatever it holds


def parameter_names(schema: Mapping[str, Any]) -> frozenset[str]:
    """Every parameter name a tool's input schema declares: `properties` and `required` at the top and in
    every subschema applying to the same object (`allOf`/`anyOf`/`oneOf`, `if`/`then`/`else`,
    `dependentSchemas`), following local `$ref`s (`#/...` JSON pointers, e.g. into `$defs`) once each."""
    names: set[str] = set()
    todo: list[Any] = [schema]
    followed: set[str] = set()
    seen = 0
    while todo and seen < _MAX_NODES:
        node = todo.pop()
        seen += 1
        if not isinstance(node, Mapping):
            continue
        props = node.get("properties")
        if isinstance(props, Mapping):
            names.update(k for k in props if isinstance(k, str))
        required = node.get("required")
        if isinstance(required, list):
            names.update(r for r in required if isinstance(r, str))
        for key in _BRANCHES:
            branch = node.get(key)
            if isinstance(branch, list):
                todo.extend(branch)
        todo.extend(node[key] for key in _SINGLES if key in node)
        dependent = node.get("dependentSchemas")
        if isinstance(dependent, Mapping):
            todo.extend(dependent.values())
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#") and ref not in followed:
            followed.add(ref)
            target = json_pointer(schema, ref[1:])
            if target is not None:
                todo.append(target)
    return frozenset(names)


_validators: dict[str, Any] = {}


def _validator(augmentation: Augmentation) -> Any:
    found = _validators.get(augmentation.key)
    if found is None:
        import jsonschema

        cls = jsonschema.validators.validator_for(augmentation.schema, default=jsonschema.Draft202012Validator)
        found = cls(augmentation.schema)
        with _lock:
            _validators[augmentation.key] = found
    return found


def _checked_schema(raw: Any) -> dict[str, Any]:
    """The augmentation's schema as plain JSON: an object with properties, local `$ref`s inlined."""
    try:  # the one check of a schema object (tools.py): JSON, type object, known parameter types
        schema = _validated_schema(Walk("the augmentation"), raw)
    except InvalidToolError as exc:
        raise AugmentationError(str(exc)) from None
    defs = schema.pop("$defs", None) or schema.pop("definitions", None) or {}
    schema.pop("title", None)  # a pydantic model's class name: not a field, nothing for the model to read
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        raise AugmentationError(
            "the augmentation schema needs 'properties' with at least one field, e.g. "
            '{"properties": {"reason": {"type": "string"}}, "required": ["reason"]}'
        )
    budget = _Budget()
    schema["properties"] = {name: _inline(value, defs, name, (), budget) for name, value in props.items()}
    size = len(json.dumps(schema["properties"], ensure_ascii=False, separators=(",", ":")))
    if size > MAX_INLINED_CHARS:  # the walk's count is a lower bound (escapes): the JSON itself decides
        limit = f"is {size:,} characters of JSON; the limit is {MAX_INLINED_CHARS:,}"
        raise _too_big(", ".join(map(repr, props)), limit, refs=budget.refs > 0)
    for value in schema["properties"].values():
        if isinstance(value, dict):
            value.pop("title", None)
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) and r in props for r in required):
        raise AugmentationError(
            f"the augmentation schema's 'required' must list names of its properties; got {required!r}"
        )
    if not required:
        schema.pop("required", None)
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise AugmentationError(f"the augmentation schema is not a valid JSON schema: {exc.message}") from None
    return schema


# The most an augmentation's fields may weigh once their `$ref`s are inlined, in characters of compact JSON:
# they are added to every exposed tool of every request (a few hundred characters is usual). `$defs` that
# refer to one another more than once double at each level: 1 KB of them grew to 67,582 characters (16,000
# tokens on every tool), 1.5 KB to a million after ten seconds, so inlining stops as soon as it passes this.
MAX_INLINED_CHARS = 32_000


class _Budget:
    """What inlining may still write, in characters of compact JSON: each node it builds spends what it
    writes at the least (a string's escapes are not counted), so the time and memory inlining takes are
    bounded by the limit, not by the schema's nesting, and a schema the limit admits is never refused."""

    def __init__(self) -> None:
        self.left = MAX_INLINED_CHARS
        self.refs = 0  # `$ref`s inlined so far: whether the message blames them

    def spend(self, chars: int, field_name: str) -> None:
        self.left -= chars
        if self.left < 0:
            size = f"grows past the limit of {MAX_INLINED_CHARS:,} characters of JSON"
            raise _too_big(repr(field_name), size, refs=self.refs > 0)


def _too_big(fields: str, size: str, *, refs: bool) -> AugmentationError:
    what = "with its $refs inlined, " if refs else ""
    fix = ", or refer to each $defs type from one place only (each reference is a copy)" if refs else ""
    return AugmentationError(
        f"augmented field(s) {fields}: the augmentation's schema, {what}{size}, and it would be added to every "
        f"exposed tool on every request; make the fields' schemas smaller{fix}"
    )


def _inline(node: Any, defs: Mapping[str, Any], field_name: str, seen: tuple[str, ...], budget: _Budget) -> Any:
    # A field's schema travels into every tool's schema, where the augmentation's `$defs` are not:
    # local references are replaced by what they name (a recursive one cannot be, and is refused).
    # Each node spends what it adds to the compact JSON, at the least: an estimate above it refused schemas
    # under the limit (a 6,000-item enum, "5 characters a number", with no $ref at all).
    if isinstance(node, list):
        budget.spend(2 + max(len(node) - 1, 0), field_name)  # brackets and commas
        return [_inline(item, defs, field_name, seen, budget) for item in node]
    if not isinstance(node, dict):
        text = len(node) + 2 if isinstance(node, str) else len(json.dumps(node))  # a string's escapes: uncounted
        budget.spend(text, field_name)
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if not ref.startswith(("#/$defs/", "#/definitions/")) or name not in defs:
            raise AugmentationError(f"augmented field {field_name!r}: cannot resolve the reference {ref!r}")
        if name in seen:
            raise AugmentationError(f"augmented field {field_name!r}: recursive type {name!r} is not supported")
        budget.refs += 1
        keys = [k for k in node if k != "$ref"]
        # the reference's own keys join the target's object (its braces spent there) and replace its keys
        # of the same name, which are not inlined: nothing is spent on what the result does not hold
        budget.spend(sum(len(str(k)) + 3 for k in keys) + max(len(keys) - 1, 0), field_name)
        found = defs[name]
        if isinstance(found, dict):
            found = {k: v for k, v in found.items() if k not in keys}
        target = _inline(found, defs, field_name, (*seen, name), budget)
        rest = {k: _inline(node[k], defs, field_name, seen, budget) for k in keys}
        return {**target, **rest}
    budget.spend(2 + sum(len(str(k)) + 3 for k in node) + max(len(node) - 1, 0), field_name)  # braces, keys, commas
    return {k: _inline(v, defs, field_name, seen, budget) for k, v in node.items()}
