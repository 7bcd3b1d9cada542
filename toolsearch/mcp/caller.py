"""Who a gateway request is served for, resolved at the request's edge: its caller, its protocol era, the policy hook.

The one place that reads a request's identity and era: the HTTP authentication layer records the
caller in the ASGI scope (`CALLER_SCOPE_KEY`); `caller_of_request` reads it back for an MCP handler
(LOCAL on stdio, ANONYMOUS over HTTP without authentication); `is_modern` is the one rule for "is
this a 2026-07-28 request?", applied to the version the SDK negotiated (`ctx.protocol_version`) or to
the `MCP-Protocol-Version` header (`scope_version`) as the SDK's own HTTP routing reads it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

if TYPE_CHECKING:
    from ..catalog import Catalog

__all__ = [
    "ANONYMOUS",
    "CALLER_SCOPE_KEY",
    "LOCAL",
    "Caller",
    "CallerPolicy",
    "caller_of_request",
    "caller_of_scope",
    "is_modern",
    "is_modern_scope",
    "request_scope",
    "scope_version",
]

CALLER_SCOPE_KEY = "toolsearch.caller"
"""The ASGI scope key under which the HTTP authentication layer leaves the request's `Caller`.

The scope travels with the request into both protocol eras (the handshake era's session task sees
it through `ctx.request.scope`), where a context variable set in middleware would not.
"""


@dataclass(frozen=True, slots=True)
class Caller:
    """The principal a request is served for.

    `key` names the principal stably without holding a credential: session store keys, context
    handles and usage-log entries are bound to it, so one caller can never name another's state.
    `subject` is what logs show; `scopes` and `claims` are what a policy decides on. `issuer` is who
    vouched for the subject ("static" for the gateway's token file, else the token issuer's URL; ""
    unauthenticated): a subject names a principal only together with it.
    """

    key: str
    subject: str
    scopes: frozenset[str] = frozenset()
    claims: Mapping[str, Any] = field(default_factory=dict)
    authenticated: bool = False
    issuer: str = ""

    @classmethod
    def authenticated_as(
        cls,
        kind: str,
        subject: str,
        *,
        scopes: frozenset[str] | set[str] | tuple[str, ...] = frozenset(),
        claims: Mapping[str, Any] | None = None,
    ) -> Caller:
        """A caller proven by a credential of `kind` (e.g. the token issuer, or "static")."""
        digest = hashlib.sha256(f"{kind}\0{subject}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return cls(
            key=f"c-{digest}", subject=subject, scopes=frozenset(scopes), claims=dict(claims or {}), authenticated=True,
            issuer=kind,
        )


LOCAL = Caller(key="local", subject="local")
"""stdio: the user who started the gateway process."""

ANONYMOUS = Caller(key="anonymous", subject="anonymous")
"""HTTP without authentication (loopback, or an explicit --no-auth)."""


def caller_of_scope(scope: Mapping[str, Any] | None) -> Caller | None:
    """The caller the authentication layer recorded in an ASGI scope, or None."""
    if scope is None:
        return None
    caller = scope.get(CALLER_SCOPE_KEY)
    return caller if isinstance(caller, Caller) else None


def request_scope(ctx: Any) -> MutableMapping[str, Any] | None:
    """The ASGI scope of the HTTP request an MCP handler serves; None on stdio (no HTTP request)."""
    request = getattr(ctx, "request", None)
    if request is None:
        return None
    scope = getattr(request, "scope", None)
    return scope if isinstance(scope, MutableMapping) else {}


def caller_of_request(ctx: Any) -> Caller:
    """The caller an MCP request is served for: what the HTTP authentication layer recorded for this very
    request (its current token), else ANONYMOUS; LOCAL on stdio."""
    scope = request_scope(ctx)
    if scope is None:
        return LOCAL
    return caller_of_scope(scope) or ANONYMOUS


_VERSION_HEADER = b"mcp-protocol-version"
VERSION_HEADER = _VERSION_HEADER.decode()  # its name, for lists of headers (the CORS answers of guard.py)


def is_modern(version: str | None) -> bool:
    """Whether a request speaks the 2026-07-28 era: a protocol version the initialize handshake does not own.

    The SDK's own routing rule (a known handshake version goes to the handshake era, anything else to
    the modern entry, which refuses a version it does not speak); for a handler, `ctx.protocol_version`.
    """
    return version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS


def scope_version(scope: Mapping[str, Any]) -> str | None:
    """The `MCP-Protocol-Version` header of an HTTP request (ASGI scope), or None."""
    return next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == _VERSION_HEADER), None)


def is_modern_scope(scope: Mapping[str, Any]) -> bool:
    """`is_modern` for an HTTP request not yet parsed (ASGI middleware): its version header decides."""
    return is_modern(scope_version(scope))


class CallerPolicy(Protocol):
    """Which tools a caller may list, search and call (the spec lets tool lists vary by authorization)."""

    def allowed(self, caller: Caller, catalog: Catalog) -> frozenset[str] | None:
        """The tool names `caller` may use in `catalog`; None means every tool."""
        ...
