"""Which tools each caller may list, search and call: rules from a JSON policy file, denying by default.

A policy file holds rules; each rule says whom it applies to (`when`) and what it allows:

    {"rules": [
      {"when": {"scopes": ["tools:admin"]}, "servers": ["*"]},
      {"when": {"scopes": ["tools"]}, "servers": ["time", "docs"], "tools": ["github__list_*"]},
      {"when": {"claims": {"groups": "finance"}}, "tools": ["bank__*"]},
      {"when": {"issuer": "static", "subjects": ["ci-bot"]}, "tools": ["github__get_*"]}
    ]}

A rule applies when every condition it states holds: the caller has all `scopes`, each claim in
`claims` equals the value (or, when the claim is a list, contains it; a list value means any of
those), its credential came from `issuer` ("static": the gateway's token file; else the token
issuer's URL), and its subject is one of `subjects`. A subject names a principal only together with
its issuer: a gateway that accepts tokens from more than one (`check_issuers`) refuses a rule that
names subjects without one, since a token of either source with that subject would match it.
A rule with no `when` applies to every caller, anonymous ones included. `servers` and `tools` are
shell-style globs (case-sensitive) over server names and the gateway's namespaced tool names
(`server__tool`); a caller may use the union of what
its applying rules allow. **A caller no rule applies to gets no tools at all**: access is denied by
default, so a forgotten rule hides tools rather than exposing them. A loaded file is followed while the
gateway runs (`ToolPolicy.refresh`); a changed file that fails keeps the last good rules.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import logging
import os
import re
import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .._errors import PolicyError
from .caller import Caller
from .source import SEPARATOR

if TYPE_CHECKING:
    from ..catalog import Catalog

__all__ = ["ToolPolicy", "add_policy_arguments", "policy_from_args"]

logger = logging.getLogger("toolsearch.mcp")

_Claim = str | int | bool | list[str | int | bool]


class _When(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scopes: list[str] = Field(default_factory=list)
    claims: dict[str, _Claim] = Field(default_factory=dict)
    subjects: list[str] | None = None
    issuer: str | None = None


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    when: _When = Field(default_factory=_When)
    servers: list[str] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)

    @field_validator("servers", "tools")
    @classmethod
    def _globs(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if not pattern or pattern != pattern.strip():
                raise ValueError(
                    f"{pattern!r} is not a glob: give a non-empty name or pattern without spaces around it"
                )
        return patterns


class _PolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rules: list[_Rule]


def _claim_matches(actual: Any, wanted: Any) -> bool:
    options = wanted if isinstance(wanted, list) else [wanted]
    values = actual if isinstance(actual, list) else [actual]
    return any(type(v) is type(o) and v == o for v in values for o in options)


class ToolPolicy:
    """A `CallerPolicy` from rules; `allowed` returns the tool names a caller may use (None: all of them).

    Loaded from a file (`load`), it follows the file while the gateway runs: `refresh`, called once per
    request, compares the file's identity (mtime, size, inode) with the one it read and re-reads it when it
    changed. A changed file that cannot be read, parsed or checked leaves the last good rules in force, and
    the error is logged once per change (as a web server keeps its configuration on a bad reload).
    """

    def __init__(self, rules: Iterable[Mapping[str, Any] | _Rule], *, source: str = "policy") -> None:
        self.source = source
        self._state = _State.of(_validated(rules, source))
        # What the gateway checked the rules against at start (check_issuers, check_servers): a reload is held to it.
        self._issuers: frozenset[str] | None = None
        self._servers: dict[str, str] | None = None
        self._disabled: dict[str, str] = {}
        self._path: Path | None = None
        self._identity: _Identity | None = None
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | Path) -> ToolPolicy:
        """Read and check a policy file; PolicyError names the file and the rule at fault."""
        identity = _identity(Path(path))
        policy = cls(_read(path), source=str(path))
        policy._path, policy._identity = Path(path), identity
        return policy

    @property
    def _rules(self) -> tuple[_Rule, ...]:
        return self._state.rules

    def refresh(self) -> bool:
        """Re-read the file when its identity changed since it was read (one `os.stat`); True when new rules
        took effect. A file that fails keeps the last good rules, and its error is logged once per change."""
        if self._path is None:
            return False
        identity = _identity(self._path)
        if identity == self._identity:
            return False
        with self._lock:  # one reader per change, whichever thread asks first
            if identity == self._identity:
                return False
            self._identity = identity  # said once per change: the next request finds the file as it was
            try:
                rules = _read(self._path)
                self._check(rules)
            except PolicyError as exc:
                logger.error("%s; the gateway keeps serving the rules it read before (%d rules)", exc, len(self._rules))
                return False
            self._state = _State.of(rules)
        logger.info("policy %s reloaded: %d rules", self.source, len(rules))
        return True

    def applies(self, rule: _Rule, caller: Caller) -> bool:
        when = rule.when
        if any(s not in caller.scopes for s in when.scopes):
            return False
        if when.issuer is not None and caller.issuer != when.issuer:
            return False
        if when.subjects is not None and caller.subject not in when.subjects:
            return False
        return all(name in caller.claims and _claim_matches(caller.claims[name], v) for name, v in when.claims.items())

    def allowed(self, caller: Caller, catalog: Catalog) -> frozenset[str] | None:
        state = self._state  # one set of rules for the whole answer, though a reload may replace it meanwhile
        applying = tuple(i for i, (rule, *_) in enumerate(state.compiled) if self.applies(rule, caller))
        key = (catalog.hash, applying)
        if key in state.answers:
            return state.answers[key]
        answer = state.match(applying, catalog)
        if len(state.answers) >= _MAX_ANSWERS:  # a catalog change leaves old keys behind: start over
            state.answers.clear()
        state.answers[key] = answer
        return answer

    def grants(self, caller: Caller) -> bool:
        """Whether a rule that applies to `caller` names any server or tool, listed now or not: a caller with no
        tools listed may have rights whose servers are down (`allowed` answers for the catalog listed now)."""
        return any((rule.servers or rule.tools) and self.applies(rule, caller) for rule in self._state.rules)

    def check_issuers(self, issuers: Collection[str]) -> None:
        """Refuse rules that the gateway's token sources (`issuers`: "static" and/or issuer URLs; none without
        authentication) make unsafe or dead: subjects without an issuer when there is more than one source (whose
        subjects may coincide), and an issuer no source has (a typo, which would match nobody). PolicyError names
        the rule. A reload of the file is held to the same check."""
        self._issuers = frozenset(issuers)
        _check_issuers(self._rules, self.source, self._issuers)

    def check_servers(self, servers: Mapping[str, str], *, disabled: Mapping[str, str] | None = None) -> None:
        """Refuse rules naming a server the gateway does not front: `servers` maps each configured server's name
        to the prefix its tools' names start with (`my.bank` -> `my_bank`). A `servers` entry must match a
        configured name, and a `tools` pattern must not start with a server's name where its tools are named
        otherwise; PolicyError names the rule and the name to use. A reload of the file is held to the same check.

        `disabled` (same shape) holds the servers the config turns off (`"disabled": true`): a rule may name them
        (switching a server off must not mean editing the policy, which other gateways may share); that is logged
        at INFO, since such a rule allows nothing of them until the server is turned on again."""
        self._servers = dict(servers)
        self._disabled = dict(disabled or {})
        _check_servers(self._rules, self.source, self._servers, self._disabled)

    def unmatched_tools(self, catalog: Catalog) -> list[tuple[int, str]]:
        """(rule number from 1, pattern) for each `tools` pattern that matches no tool of `catalog`."""
        names = catalog.names
        return [
            (i, pattern)
            for i, rule in enumerate(self._rules, start=1)
            for pattern in rule.tools
            if not fnmatch.filter(names, pattern)
        ]

    def _check(self, rules: tuple[_Rule, ...]) -> None:
        if self._issuers is not None:
            _check_issuers(rules, self.source, self._issuers)
        if self._servers is not None:
            _check_servers(rules, self.source, self._servers, self._disabled)

    def __repr__(self) -> str:
        return f"ToolPolicy({self.source!r}, {len(self._rules)} rules)"


_MAX_ANSWERS = 256

_Identity = tuple[int, int, int]


def _identity(path: Path) -> _Identity | None:
    """What tells one version of a file from another without reading it; None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _read(path: str | Path) -> tuple[_Rule, ...]:
    where = str(path)
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise PolicyError(f"policy {where}: cannot read it ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise PolicyError(
            f"policy {where}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except UnicodeDecodeError:
        raise PolicyError(f"policy {where}: not UTF-8 text") from None
    try:
        parsed = _PolicyFile.model_validate(raw)
    except ValidationError as exc:
        raise PolicyError(_first_error(where, exc)) from None
    return tuple(parsed.rules)


def _validated(rules: Iterable[Mapping[str, Any] | _Rule], source: str) -> tuple[_Rule, ...]:
    checked: list[_Rule] = []
    for i, rule in enumerate(rules):
        try:
            checked.append(rule if isinstance(rule, _Rule) else _Rule.model_validate(rule))
        except ValidationError as exc:
            raise PolicyError(_first_error(source, exc, prefix=("rules", i))) from None
    return tuple(checked)


@dataclass(frozen=True, slots=True)
class _State:
    """One version of the rules, compiled, with the answers worked out from it (replaced whole on a reload)."""

    rules: tuple[_Rule, ...]
    compiled: list[tuple[_Rule, re.Pattern[str] | None, re.Pattern[str] | None, bool]]
    # The gateway asks on every request: the answer depends only on which rules apply to the
    # caller and on the catalog, so it is worked out once per (catalog, applying rules).
    answers: dict[tuple[str, tuple[int, ...]], frozenset[str] | None]

    @classmethod
    def of(cls, rules: tuple[_Rule, ...]) -> _State:
        compiled = [
            (rule, _compile(rule.servers), _compile(rule.tools), "*" in rule.servers or "*" in rule.tools)
            for rule in rules
        ]
        return cls(rules, compiled, {})

    def match(self, applying: tuple[int, ...], catalog: Catalog) -> frozenset[str] | None:
        names: set[str] = set()
        for i in applying:
            _, servers, tools, everything = self.compiled[i]
            if everything:
                return None
            for tool in catalog:
                if (servers and tool.namespace is not None and servers.fullmatch(tool.namespace)) or (
                    tools and tools.fullmatch(tool.name)
                ):
                    names.add(tool.name)
        return frozenset(names)


def _check_issuers(rules: Iterable[_Rule], source: str, issuers: Collection[str]) -> None:
    for i, rule in enumerate(rules, start=1):
        when = rule.when
        if when.issuer is not None and when.issuer not in issuers:
            accepted = ", ".join(map(repr, sorted(issuers))) or "none: it has no authentication"
            raise PolicyError(
                f"policy {source}: rule {i} names the issuer {when.issuer!r}, which is not one this gateway "
                f"accepts tokens from ({accepted}); it would apply to nobody"
            )
        if when.subjects is not None and when.issuer is None and len(issuers) > 1:
            raise PolicyError(
                f"policy {source}: rule {i} names subjects without an issuer, and this gateway accepts tokens "
                f"from {' and '.join(map(repr, sorted(issuers)))}: a token of either with one of those subjects "
                'would get its tools. Add "issuer" to its "when" (e.g. "issuer": "static" for --auth-tokens)'
            )


def _check_servers(
    rules: Iterable[_Rule], source: str, servers: Mapping[str, str], disabled: Mapping[str, str] | None = None
) -> None:
    disabled = disabled or {}
    renamed = {prefix: name for name, prefix in {**disabled, **servers}.items() if prefix != name}
    for i, rule in enumerate(rules, start=1):
        for pattern in rule.servers:
            if fnmatch.filter(servers, pattern):
                continue
            if fnmatch.filter(disabled, pattern):
                logger.info(
                    'policy %s: rule %d names the server %r, which the config turns off ("disabled": true); it '
                    "allows nothing of it until the server is turned on again",
                    source,
                    i,
                    pattern,
                )
                continue
            use = renamed.get(pattern)
            hint = f"use {use!r}, the name the config gives it" if use else (
                f"use one of {', '.join(map(repr, servers))}" if len(servers) <= 20 else "check the config's names"
            )
            raise PolicyError(
                f"policy {source}: rule {i} names the server {pattern!r}, which matches no server of this gateway's "
                f"config; it would allow nothing: {hint}"
            )
        for pattern in rule.tools:
            server, separator, rest = pattern.partition(SEPARATOR)
            prefix = servers.get(server, disabled.get(server))
            if separator and prefix is not None and prefix != server:
                raise PolicyError(
                    f"policy {source}: rule {i} names the tool {pattern!r}, but the gateway names the tools of server "
                    f"{server!r} {prefix}{SEPARATOR}...; it would allow nothing: use {prefix + SEPARATOR + rest!r}"
                )


def _compile(patterns: list[str]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    # fnmatchcase semantics (no case folding), compiled once for the whole catalog
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


def _first_error(where: str, exc: ValidationError, prefix: tuple[str | int, ...] = ()) -> str:
    first = exc.errors()[0]
    loc = [*prefix, *first["loc"]]
    # rules are counted from 1, as a reader of the file counts them
    rule = next((f"rule {int(loc[i + 1]) + 1}" for i, part in enumerate(loc[:-1]) if part == "rules"), None)
    path = ".".join(str(p) for p in loc)
    named = f"{rule} ({path})" if rule else path or "the file"
    return f"policy {where}: {named}: {first['msg']}"


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """`--tool-policy FILE`: the rules that limit which tools each caller may use."""
    parser.add_argument(
        "--tool-policy",
        metavar="FILE",
        help="JSON rules giving each caller (by scope, claim or subject) its servers and tools; "
        "a caller no rule applies to gets no tools (see docs/auth.md)",
    )


def policy_from_args(args: argparse.Namespace) -> ToolPolicy | None:
    """The policy `--tool-policy` names, loaded and checked (PolicyError), or None without the flag."""
    return ToolPolicy.load(args.tool_policy) if args.tool_policy else None
