"""The servers configs MCP clients already use (`mcpServers`, VS Code's `servers` + `inputs`), variables expanded.

Variables are expanded where the desktop clients expand them (Claude Code, Cursor, VS Code): in
`command`, `args`, `env`, `cwd`, `url` and `headers`. The forms:
- `${VAR}`, `${env:VAR}`: the environment variable VAR; an unset one is an error naming it;
- `${VAR:-default}`, `${env:VAR:-default}`: VAR, or `default` when VAR is unset;
- `${input:ID}` (VS Code): an entry of the config's `inputs`. VS Code prompts for it; a gateway
  cannot, so the value comes from the environment variable `TOOLSEARCH_INPUT_<ID>` (ID upper-cased,
  every character other than a letter or digit turned into `_`: `github-token` reads
  `TOOLSEARCH_INPUT_GITHUB_TOKEN`), else the input's `default`, else it is an error naming both;
- `${userHome}` and `${workspaceFolder}` (VS Code, Cursor): the home folder, and the folder the
  config belongs to (the parent of a `.vscode` / `.cursor` folder holding it, else its own folder).

A stdio server's `envFile` (VS Code) is read as a dotenv file (python-dotenv, the parser the Python
world shares, rather than one more of our own): its variables reach the server, under the `env`
entries, which win; its values are taken as written (no expansion), its path expanded and resolved
like `cwd`. A missing file, or a line without a value, is an error naming the server and the file.
Messages name a variable, never its value: a server is described by its settings as written, its URLs
redacted (`toolsearch._redact`).
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .._errors import MCPConfigError
from .._redact import (
    Scrubber,
    basic_auth_secrets,
    command_secrets,
    redacted_command,
    redacted_url,
    redacted_words,
    url_secrets,
)

__all__ = [
    "ChangedTools", "MCPConfig", "MCPConfigError", "ServerConfig", "input_variable",
    "load_config", "parse_config",
]

Transport = Literal["stdio", "http", "sse"]
ChangedTools = Literal["keep", "block"]
"""What a gateway does when an upstream changes a tool a session has loaded (docs/mcp.md, "Pinned tool definitions")."""

DEFAULT_STARTUP_TIMEOUT = 30.0
DEFAULT_CALL_TIMEOUT = 300.0
_SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# ${NAME}, ${env:NAME}, ${NAME:-default}, ${input:ID}, ${command:...}: the kind, the name, the default
_VARIABLE = re.compile(r"\$\{(?:(?P<kind>[A-Za-z]+):(?!-))?(?P<name>[^}:]*)(?::-(?P<default>[^}]*))?\}")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
INPUT_ENV_PREFIX = "TOOLSEARCH_INPUT_"
_CLIENT_FOLDERS = (".vscode", ".cursor")
# Spellings other clients write for the transport, mapped to ours.
_TYPE_ALIASES = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamablehttp": "http",
    "sse": "sse",
}


class _ServerEntry(BaseModel):
    """One `mcpServers` entry as written; unknown keys (client-specific extras) are ignored."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    type: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    env_file: str | None = Field(default=None, alias="envFile")
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    disabled: bool = False
    # toolsearch extras: seconds allowed for start + handshake + listing, and for one call
    startup_timeout: float = Field(default=DEFAULT_STARTUP_TIMEOUT, gt=0, alias="startupTimeout")
    call_timeout: float = Field(default=DEFAULT_CALL_TIMEOUT, gt=0, alias="callTimeout")
    # the largest call result passed on (bytes of its JSON), and what to do with tools that change;
    # unset: the gateway's setting (`mcp serve --max-result-bytes / --changed-tools`)
    max_result_bytes: int | None = Field(default=None, gt=0, alias="maxResultBytes", strict=True)
    changed_tools: ChangedTools | None = Field(default=None, alias="changedTools")

    @field_validator("env", "headers", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        # Numbers and booleans in env blocks are common; the process env only takes strings. Anything else (null,
        # an object, a list) has no one string form: as JSON text it reached the server as "null" (an
        # `Authorization: null` header), so it is left for the string check to refuse, naming the key.
        if isinstance(value, Mapping):
            return {str(k): json.dumps(v) if isinstance(v, bool | int | float) else v for k, v in value.items()}
        return value


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """How to reach one upstream MCP server."""

    name: str
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    call_timeout: float = DEFAULT_CALL_TIMEOUT
    max_result_bytes: int | None = None  # None: the caller's default (DEFAULT_MAX_RESULT_BYTES)
    changed_tools: ChangedTools | None = None  # None: the gateway's setting
    # the command line or URL as the config writes it, variables unexpanded (for messages and logs; a command
    # line with its credential-named arguments already hidden, since its argument boundaries are gone once joined)
    written: str | None = None
    # what its `${VAR}`s (environment variables, inputs) expanded to: kept out of what its server's text shows
    variable_values: tuple[str, ...] = ()

    def scrubber(self) -> Scrubber:
        """What keeps this server's configured values out of the text it sends back (an error quoting the token it
        was given): its env and header values (and each word of a header: `Bearer <token>`), the values of the
        credential-named flags and headers on its command line (`--api-key sk-...`, `--token=...`: what `describe`
        hides), the credentials of its URL or of a URL in its env or its arguments (in the `Basic` form too, which
        the HTTP client sends for a URL's `user:password@`), and every value a variable expanded to (a URL's path
        may hold one). See `Scrubber` for which count."""
        flagged = command_secrets(self.args)
        named = [*self.env.items(), *self.headers.items(), *flagged]
        urls = [self.url or "", *(value for value in [*self.env.values(), *self.args] if "://" in value)]
        secrets = [part for url in urls for part in url_secrets(url)]
        basic = [token for url in urls for token in basic_auth_secrets(url)]  # already decoded: no `unquote` below
        headers = [*self.headers.values(), *(value for _, value in flagged)]
        values = [*self.variable_values, *(word for value in headers for word in value.split())]
        quoted = [(name, unquote(value)) for name, value in named if "%" in value]  # a server may quote it decoded
        return Scrubber(
            secrets=[*secrets, *(unquote(s) for s in secrets), *basic], named=[*named, *quoted], values=values
        )

    def describe(self) -> str:
        """A short human description for messages: as written, so no expanded variable, header or env value,
        every URL redacted and, on a command line, the values of credential-named flags and variables hidden (a
        password or token written literally in the config stays out of messages and logs)."""
        if self.transport == "stdio":
            if self.written is not None:
                return redacted_words(self.written)
            return redacted_command([self.command or "", *self.args]).strip()
        written = self.written if self.written is not None else self.url or ""
        return f"{redacted_url(written)} ({self.transport})"

    def __repr__(self) -> str:
        # not the dataclass's: that one would print the URL, the headers and the env, credentials included
        return f"ServerConfig(name={self.name!r}, {self.describe()!r})"


@dataclass(frozen=True, slots=True)
class MCPConfig:
    """The enabled servers, in the order the config lists them; `disabled`: the names of those it turns off."""

    servers: tuple[ServerConfig, ...]
    source: Path | None = None
    disabled: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.servers]

    def __len__(self) -> int:
        return len(self.servers)

    def __getitem__(self, name: str) -> ServerConfig:
        for server in self.servers:
            if server.name == name:
                return server
        raise KeyError(name)


def input_variable(input_id: str) -> str:
    """The environment variable a VS Code `${input:ID}` is read from: `TOOLSEARCH_INPUT_` + ID upper-cased."""
    return INPUT_ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", input_id).upper()


@dataclass(frozen=True, slots=True)
class _Variables:
    """What `${...}` may refer to: the environment, the config's inputs, the config's folder."""

    environ: Mapping[str, str]
    inputs: Mapping[str, Mapping[str, Any]]
    workspace: Path | None
    expanded: list[str] = field(default_factory=list)  # each environment or input value used, in order

    def value(self, kind: str | None, name: str, default: str | None, where: str) -> str:
        written = "${" + (f"{kind}:" if kind else "") + name + "}"
        if kind == "input":
            found = self._input(name, where)
            self.expanded.append(found)
            return found
        if kind is None and name in ("userHome", "workspaceFolder") and name not in self.environ:
            return self._predefined(name, where)
        if kind not in (None, "env"):
            raise MCPConfigError(
                f"{where} uses {written}: toolsearch expands ${{VAR}}, ${{env:VAR}}, ${{VAR:-default}}, "
                "${input:ID}, ${userHome} and ${workspaceFolder}, not "
                f"${{{kind}:...}}; write the value or an environment variable instead"
            )
        if not _ENV_NAME.match(name):
            raise MCPConfigError(f"{where} uses {written}, which is not a variable name (letters, digits, '_')")
        if name in self.environ:
            self.expanded.append(self.environ[name])
            return self.environ[name]
        if default is not None:
            return default
        raise MCPConfigError(f"{where} uses {written} but {name} is not set; export it or write ${{{name}:-default}}")

    def _input(self, input_id: str, where: str) -> str:
        variable = input_variable(input_id)
        if variable in self.environ:
            return self.environ[variable]
        declared = self.inputs.get(input_id)
        if declared is None:
            raise MCPConfigError(
                f"{where} uses ${{input:{input_id}}}, which the config's 'inputs' does not declare; "
                f"declare it, or set {variable}"
            )
        if isinstance(declared.get("default"), str):
            return str(declared["default"])
        about = f" ({declared['description']})" if isinstance(declared.get("description"), str) else ""
        raise MCPConfigError(
            f"{where} uses ${{input:{input_id}}}{about}: VS Code prompts for inputs, toolsearch reads them from "
            f"the environment; set {variable}"
        )

    def _predefined(self, name: str, where: str) -> str:
        if name == "userHome":
            return str(Path.home())
        if self.workspace is None:
            raise MCPConfigError(f"{where} uses ${{workspaceFolder}}, which only a config read from a file has")
        return str(self.workspace)


def _expand(value: str, where: str, variables: _Variables) -> str:
    """Substitute every `${...}` of a value (see the module docstring for the forms)."""

    def replace(match: re.Match[str]) -> str:
        return variables.value(match.group("kind"), match.group("name"), match.group("default"), where)

    return _VARIABLE.sub(replace, value)


def _inputs(raw: Any) -> dict[str, Mapping[str, Any]]:
    """VS Code's `inputs`: a list of {"id", "type", "description", "password", "default"?}."""
    if raw is None:
        return {}
    if not isinstance(raw, list) or not all(isinstance(i, Mapping) and isinstance(i.get("id"), str) for i in raw):
        raise MCPConfigError("'inputs' must be a list of objects with an 'id' (VS Code's format)")
    return {i["id"]: i for i in raw}


def _workspace(base: Path | None) -> Path | None:
    if base is None:
        return None
    return base.parent if base.name in _CLIENT_FOLDERS else base


def _server(name: str, raw: Any, base: Path | None, environ: _Variables) -> ServerConfig | None:
    where = f"server {name!r}"
    if not isinstance(name, str) or not _SERVER_NAME.match(name):
        raise MCPConfigError(
            f"{where}: names must start with a letter or digit and use only letters, digits, '_', '-', '.' "
            "(at most 64 characters); they become the tools' namespace"
        )
    if not isinstance(raw, Mapping):
        raise MCPConfigError(f"{where}: expected an object with 'command' (stdio) or 'url' (HTTP)")
    first = len(environ.expanded)
    server = _server_entry(name, raw, base, environ, where)
    if server is None:
        return None
    return replace(server, variable_values=tuple(dict.fromkeys(environ.expanded[first:])))


def _server_entry(
    name: str, raw: Mapping[str, Any], base: Path | None, environ: _Variables, where: str
) -> ServerConfig | None:
    try:
        entry = _ServerEntry.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "entry"
        raise MCPConfigError(f"{where}: {loc}: {first['msg']}") from None
    if entry.disabled:
        return None
    if not (entry.type or entry.command or entry.url):
        keys = ", ".join(repr(k) for k in raw) if isinstance(raw, Mapping) and raw else "none"
        raise MCPConfigError(
            f"{where}: neither 'command' (a stdio server) nor 'url' (an HTTP server) is given (its keys: {keys})"
        )
    kind = entry.type.lower().replace(" ", "") if entry.type else ("stdio" if entry.command else "http")
    transport = _TYPE_ALIASES.get(kind)
    if transport is None:
        raise MCPConfigError(f"{where}: unknown type {entry.type!r}; use 'stdio', 'http' (streamable HTTP) or 'sse'")
    if transport == "stdio":
        if not entry.command:
            raise MCPConfigError(f"{where}: a stdio server needs 'command' (and optional 'args', 'env', 'cwd')")
        cwd = None
        if entry.cwd:
            cwd = str(_config_path(_expand(entry.cwd, f"{where} cwd", environ), base))
        env = _env_file(entry.env_file, where, base, environ) if entry.env_file is not None else {}
        env.update((k, _expand(v, f"{where} env {k}", environ)) for k, v in entry.env.items())
        return ServerConfig(
            written=redacted_command([entry.command, *entry.args]),
            name=name,
            transport="stdio",
            command=_expand(entry.command, f"{where} command", environ),
            args=tuple(_expand(a, f"{where} args", environ) for a in entry.args),
            env=env,
            cwd=cwd,
            startup_timeout=entry.startup_timeout,
            call_timeout=entry.call_timeout,
            max_result_bytes=entry.max_result_bytes,
            changed_tools=entry.changed_tools,
        )
    if not entry.url:
        raise MCPConfigError(f"{where}: an HTTP server needs 'url' (and optional 'headers')")
    if entry.env_file is not None:
        raise MCPConfigError(f"{where}: 'envFile' sets a stdio server's environment; an HTTP server has none (give "
                             "its credentials in 'headers')")
    url = _expand(entry.url, f"{where} url", environ)
    if not url.startswith(("http://", "https://")):
        # as written: the expanded URL may hold a variable's value
        raise MCPConfigError(f"{where}: url must start with http:// or https://, got {redacted_url(entry.url)!r}")
    headers = {k: _expand(v, f"{where} header {k}", environ) for k, v in entry.headers.items()}
    # The HTTP client sends a URL's user info as `Authorization: Basic ...` over any Authorization header given to it:
    # the configured header would be dropped without a word
    authorization = next((k for k in headers if k.strip().lower() == "authorization"), None)
    if authorization is not None and basic_auth_secrets(url):
        raise MCPConfigError(
            f"{where}: url {redacted_url(entry.url)!r} carries a user name or password (user:password@), which is "
            f"sent as an 'Authorization: Basic' header, and 'headers' sets {authorization!r} too: the HTTP client "
            "would send the URL's and drop the header's; give the credential one way, by removing the user info "
            "from the url or the Authorization header"
        )
    return ServerConfig(
        written=entry.url,
        name=name,
        transport=transport,  # type: ignore[arg-type]
        url=url,
        headers=headers,
        startup_timeout=entry.startup_timeout,
        call_timeout=entry.call_timeout,
        max_result_bytes=entry.max_result_bytes,
        changed_tools=entry.changed_tools,
    )


def _config_path(written: str, base: Path | None) -> Path:
    """A path of the config (`cwd`, `envFile`), `~` expanded, relative ones against the config's folder."""
    path = Path(os.path.expanduser(written))
    return base / path if not path.is_absolute() and base is not None else path


def _env_file(written: str, where: str, base: Path | None, environ: _Variables) -> dict[str, str]:
    """The variables of a server's `envFile`, as written in it (module docstring)."""
    path = _config_path(_expand(written, f"{where} envFile", environ), base)
    try:
        from dotenv.parser import parse_stream
    except ImportError:
        raise MCPConfigError(f"{where}: reading 'envFile' needs python-dotenv; install it with: pip install "
                             "'toolsearch[mcp]'") from None
    if not path.is_file():
        raise MCPConfigError(f"{where}: envFile {written!r} is not a file ({path}); fix the path or remove 'envFile'")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise MCPConfigError(f"{where}: envFile {written!r} cannot be read ({exc})") from None
    values: dict[str, str] = {}
    # python-dotenv's own reader skips a line it cannot parse with a log line; here it is an error naming the line
    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        if binding.error:
            raise MCPConfigError(f"{where}: envFile {written!r} line {line} is not KEY=value; fix or remove it")
        if binding.key is None:
            continue  # a comment or a blank line
        if binding.value is None:
            raise MCPConfigError(f"{where}: envFile {written!r} line {line} names {binding.key!r} without a value; "
                                 "write KEY=value (KEY= for an empty one)")
        values[binding.key] = binding.value
    return values


def parse_config(
    data: Mapping[str, Any], *, base: Path | None = None, environ: Mapping[str, str] | None = None
) -> MCPConfig:
    """Validate a config object: `{"mcpServers": {name: {command,args,env} | {url,headers}}}`.

    VS Code's `{"servers": {...}, "inputs": [...]}` is read too. Variables (module docstring) are
    expanded from `environ` (default: the process environment); relative `cwd` paths resolve against
    `base`, the config file's folder.
    """
    if not isinstance(data, Mapping):
        raise MCPConfigError("the config must be a JSON object with an 'mcpServers' object")
    key = "mcpServers" if "mcpServers" in data else "servers"
    servers = data.get(key)
    if servers is None:
        raise MCPConfigError(
            "the config has no 'mcpServers' object (nor VS Code's 'servers'); see docs/mcp.md for the format"
        )
    if not isinstance(servers, Mapping):
        raise MCPConfigError(f"'{key}' must be an object mapping server names to their settings")
    variables = _Variables(os.environ if environ is None else environ, _inputs(data.get("inputs")), _workspace(base))
    parsed = [_server(name, raw, base, variables) for name, raw in servers.items()]
    enabled = tuple(s for s in parsed if s is not None)
    if not enabled:
        raise MCPConfigError("the config lists no enabled servers")
    # kept by name: a policy may name a server turned off here (toolsearch.mcp.policy.ToolPolicy.check_servers)
    disabled = tuple(name for name, server in zip(servers, parsed, strict=True) if server is None)
    return MCPConfig(enabled, disabled=disabled)


class _RepeatedKey(ValueError):
    """A JSON object of the config names one key twice."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key written twice: json keeps the last one, so a server listed twice under one name
    (or a repeated `env` entry) would drop the first silently."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _RepeatedKey(key)
        seen[key] = value
    return seen


def load_config(path: str | Path, *, environ: Mapping[str, str] | None = None) -> MCPConfig:
    """Read and validate a servers config file."""
    path = Path(path)
    try:
        # -sig: editors on Windows write a BOM
        data = json.loads(path.read_text(encoding="utf-8-sig"), object_pairs_hook=_unique_keys)
    except FileNotFoundError:
        raise MCPConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MCPConfigError(f"{path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise MCPConfigError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    except _RepeatedKey as exc:
        raise MCPConfigError(
            f"{path}: the key {exc.args[0]!r} is written twice in one object (JSON keeps only the last, so the first "
            "would be dropped); give each server, and each env or header entry, its own name"
        ) from None
    except RecursionError:
        raise MCPConfigError(f"{path}: JSON nested too deeply to be a servers config") from None
    try:
        config = parse_config(data, base=path.resolve().parent, environ=environ)
    except MCPConfigError as exc:
        raise MCPConfigError(f"{path}: {exc}") from None
    return MCPConfig(config.servers, source=path, disabled=config.disabled)
