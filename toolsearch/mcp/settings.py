"""The gateway's settings as frozen values, checked when made and passed whole from the CLI to the server."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import regex

from .._errors import InvalidArgumentError
from .._redact import redacted_words
from ..augment import Augmentation
from .auth import AuthSettings, check_exposure
from .caller import CallerPolicy
from .identity import MCP_SESSION_HEADER
from .options import DEFAULT_MIN_RELATIVE_SCORE, GatewayOptions

__all__ = [
    "DEFAULT_SESSION_TTL",
    "GatewaySettings",
    "WorkerSettings",
    "check_header_name",
    "is_memory",
    "url_host",
]

DEFAULT_SESSION_TTL = 3600.0  # stateless sessions and context handles have no connection to end them: idle this long
Transport = Literal["stdio", "http"]


# An HTTP field name is a token (RFC 9110 5.1): an empty or spaced name would never match a request's header.
_HEADER_NAME = regex.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def check_header_name(name: str, what: str = "session_header (--session-header)") -> None:
    """Refuse a header name no request can carry (InvalidArgumentError naming `what`)."""
    if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"{what} {name!r} is not an HTTP header name: give a name such as x-user-id (letters, digits and "
            "!#$%&'*+-.^_`|~, no spaces)"
        )


def is_memory(url: str) -> bool:
    return url in ("memory", "memory://")


def url_host(host: str) -> str:
    """`host` as it goes in a URL: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """How a gateway process shares its state: session store, session identity, index folder, workers.

    `trust_proxy_header`: honour `session_header` (a header the deployment names, e.g. a user id
    set by an authenticating proxy). The proxy must strip that header from what clients send, or
    any client can name any session; without the flag a `session_header` is refused.
    """

    session_store: str = "memory"
    session_header: str | None = None
    session_ttl: float | None = None
    index_dir: Path | None = None
    # a Postgres holding the catalog, its embeddings and index for every worker (toolsearch.pg), and its name there
    store: str | None = None
    catalog: str = "default"
    catalog_poll: float = 1.0
    reuse_port: bool = False  # set in the worker processes of `--workers N`
    trust_proxy_header: bool = False

    def __post_init__(self) -> None:
        if self.session_ttl is not None and not self.session_ttl > 0:
            raise InvalidArgumentError(f"session_ttl must be a positive number of seconds, got {self.session_ttl}")
        if not self.catalog_poll > 0:
            raise InvalidArgumentError(f"catalog_poll must be a positive number of seconds, got {self.catalog_poll}")
        if self.session_header is not None:
            check_header_name(self.session_header)
        custom = self.session_header is not None and self.session_header.lower() != MCP_SESSION_HEADER
        if custom and not self.trust_proxy_header:
            raise InvalidArgumentError(
                "session_header is a header clients could forge: honour it only behind a proxy that strips it "
                "from client requests, and say so with trust_proxy_header (--trust-proxy-header)"
            )

    def __repr__(self) -> str:
        # not the dataclass's: the store URLs hold passwords (`redis://:pw@cache/0`, `postgresql://u:pw@db/x` or a
        # keyword DSN's `password=`), and a repr goes where a debugger, an error reporter or a test's diff shows it
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.repr}
        for name in ("session_store", "store"):
            if isinstance(shown[name], str):
                shown[name] = redacted_words(shown[name])
        return f"WorkerSettings({', '.join(f'{name}={value!r}' for name, value in shown.items())})"

    @property
    def shared_store(self) -> bool:
        return not is_memory(self.session_store)

    @property
    def identity_header(self) -> str | None:
        """The header naming each request's session, or None for one session per connection."""
        if self.session_header:
            return self.session_header
        return MCP_SESSION_HEADER if self.shared_store else None


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Everything `toolsearch mcp serve` was asked for, as one value.

    - `transport`, `host`, `port`, `path`: where clients reach the gateway.
    - `backend`: the search backend ("auto": hybrid when the vector extra and its model are
      installed, else bm25); `backend_options` go to it.
    - `pinned`: tools every client always has (names, server names or globs).
    - `max_discovered`: at most this many found tools per handshake-era session (LRU).
    - `min_relative_score`: a search exposes no hit scoring below this fraction of its best hit's
      score (default 0.25; 0 exposes every hit): weak matches are not added to a handshake-era
      client's list nor returned to a 2026-era one, and the result says how many were left out.
    - `call_tool`: offer the `call_tool` proxy to handshake-era clients (the 2026 era always has it).
    - `require_discovery`: refuse `call_tool` for tools the request's context never found.
    - `contexts`: let `tool_search` mint context handles (False: the 2026 era is fully stateless).
    - `policy`: which tools each caller may list, search and call (None: every tool, for everyone).
    - `auth`: HTTP authentication and request guards (docs/auth.md); none on loopback by default.
    - `options`: result size cap, changed-tool policy, usage log; `workers`: shared state.
    - `augment`: fields added to every upstream tool a client is shown, in both eras (not to the
      gateway's own tools); each call's values are taken out, logged, handed to its `on_augment`,
      and the upstream gets its own arguments only (see toolsearch.augment).
    """

    transport: Transport = "stdio"
    host: str = "127.0.0.1"
    port: int = 0
    path: str = "/mcp"
    backend: str = "auto"
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    pinned: tuple[str, ...] = ()
    max_discovered: int | None = None
    min_relative_score: float = DEFAULT_MIN_RELATIVE_SCORE
    call_tool: bool = True
    require_discovery: bool = False
    contexts: bool = True
    name: str = "toolsearch"
    policy: CallerPolicy | None = None
    auth: AuthSettings = field(default_factory=AuthSettings)
    options: GatewayOptions = field(default_factory=GatewayOptions)
    workers: WorkerSettings = field(default_factory=WorkerSettings)
    augment: Augmentation | None = None

    def __post_init__(self) -> None:
        if self.transport not in ("stdio", "http"):
            raise InvalidArgumentError(f"transport must be 'stdio' or 'http', got {self.transport!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise InvalidArgumentError(f"port must be a whole number from 0 to 65535, got {self.port!r}")
        if not self.path.startswith("/"):
            raise InvalidArgumentError(f"path must start with '/', got {self.path!r}")
        if self.max_discovered is not None and self.max_discovered < 1:
            raise InvalidArgumentError(f"max_discovered must be at least 1, got {self.max_discovered}")
        floor = self.min_relative_score
        if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 <= floor < 1:
            raise InvalidArgumentError(
                f"min_relative_score must be a fraction from 0 (expose every hit) up to but not including 1, "
                f"got {floor!r}"
            )
        object.__setattr__(self, "pinned", tuple(self.pinned))
        object.__setattr__(self, "backend_options", dict(self.backend_options))
        if self.workers.session_header is not None and self.transport != "http":
            raise InvalidArgumentError("session_header names an HTTP header: use it with the http transport")
        if self.transport != "http" and (self.auth.enabled or self.auth.no_auth):
            raise InvalidArgumentError(
                "authentication applies to the http transport; on stdio the gateway serves the user who started it"
            )
        if self.transport == "http":
            check_exposure(self.host, self.auth)  # AuthConfigError: no non-loopback address without auth
        check_issuers = getattr(self.policy, "check_issuers", None)  # (a ToolPolicy; a plug-in's own may not have it)
        if callable(check_issuers):  # without authentication there is no issuer: a rule naming one applies to nobody
            check_issuers(self.auth.issuers)  # PolicyError: subjects whose issuer is ambiguous, an issuer nobody is

    @property
    def url(self) -> str:
        """The HTTP endpoint's URL for `port` (the bound port once it listens may differ when 0)."""
        return f"http://{url_host(self.host)}:{self.port}{self.path}"
