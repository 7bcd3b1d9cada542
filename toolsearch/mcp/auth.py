"""The HTTP gateway as an OAuth 2.1 resource server: bearer tokens checked, the caller recorded, metadata served.

What the MCP authorization specification (2026-07-28, "basic/authorization") asks of a server, and
where it is met here:

- Protected Resource Metadata (RFC 9728) at `/.well-known/oauth-protected-resource` and its
  path-suffixed form (`.../oauth-protected-resource/mcp`), naming the issuer and the scopes; built
  with the mcp SDK's `ProtectedResourceMetadata` model and `build_resource_metadata_url`.
- 401 with `WWW-Authenticate: Bearer resource_metadata="...", scope="..."` when a token is missing
  or invalid (no `error` code when none was sent, RFC 6750 §3.1), 403 `insufficient_scope` naming
  every required scope at once when a valid token lacks some.
- Access tokens validated as issued for this server: JWT signature against the issuer's JWKS,
  expiry (and not-before), issuer, audience = the gateway's resource URL (RFC 8707), required
  scopes. Date claims must be numbers (RFC 7519 NumericDate), checked here: PyJWT reads them with
  `int()`, which would take "9999999999" or `true`. Only asymmetric algorithms are accepted, so a
  JWKS public key can never serve as an HMAC secret, and `alg: none` never verifies.

The JOSE library is PyJWT (2.10+, with `cryptography`): the mcp SDK itself depends on
`pyjwt[crypto]`, so it adds nothing to install; it checks `exp`/`nbf`/`iss`/`aud` and required
claims in one call with a leeway, and parses JWK sets (`PyJWKSet`). joserfc is stricter about
RFC details but is not an mcp dependency and has no audience-list check of its own. The JWK set is
fetched with the SDK's own HTTP client (httpx2), asynchronously, so a slow issuer never blocks the
event loop.

Verified callers reach the gateway as `scope[CALLER_SCOPE_KEY]` (a `Caller`), and as the SDK's
`scope["user"]` (`AuthenticatedUser`), which makes the SDK's transport refuse a session id
presented with another principal's token. Small deployments can skip the issuer: a static token
file maps each token (or its SHA-256) to a subject and scopes; presented tokens are hashed and
compared with every entry in constant time, and neither the file nor a token is ever logged.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import ipaddress
import json
import logging
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from .._errors import AuthConfigError, named_error
from .._redact import redacted_url, redacted_words
from ..stores.limits import CallerLimits, TokenBuckets
from .caller import ANONYMOUS, CALLER_SCOPE_KEY, Caller
from .guard import (
    DEFAULT_BODY_TIMEOUT,
    LOOPBACK_HOSTS,
    OriginGuard,
    RateLimit,
    header_timeout_protocol,
    is_loopback,
    jsonrpc_error_response,
    spend,
)

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "AuthSettings",
    "JwtVerifier",
    "Refusal",
    "StaticTokens",
    "add_auth_arguments",
    "check_exposure",
    "default_resource_url",
    "protect",
]

log = logging.getLogger("toolsearch.mcp.auth")

ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
_PRM_PATH = "/.well-known/oauth-protected-resource"
_MIN_STATIC_TOKEN = 32  # characters: a static token is a password nobody types; short ones are guessable


# --- settings --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """How the HTTP gateway authenticates callers and guards requests (one value, passed whole)."""

    issuer: str | None = None
    jwks_url: str | None = None
    audience: str | None = None
    scopes: tuple[str, ...] = ()
    tokens_file: Path | None = None
    no_auth: bool = False
    resource_url: str | None = None
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    rate_limit: float = 600.0
    rate_burst: int = 60
    header_timeout: float = 10.0
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    auth_failures: float = 30.0
    sessions_per_caller: int = 100
    contexts_per_caller: int = 1000
    # Callers without authentication are told apart only by client address, so every local client of
    # a gateway without it shares one cap: set on its own, else the same as sessions_per_caller.
    sessions_per_address: int | None = None
    algorithms: tuple[str, ...] = ASYMMETRIC_ALGORITHMS
    # Proxies whose X-Forwarded-For (and -Proto) name the client: none by default, so a client can never pick
    # the address its refused-token budget and session cap are counted against.
    forwarded_allow_ips: tuple[str, ...] = ()

    def __repr__(self) -> str:
        # not the dataclass's: an issuer, key set or resource URL may carry credentials (`https://u:pw@...`,
        # `?token=...`), and a repr goes where a debugger, an error reporter or a test's diff shows it
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("issuer", "jwks_url", "resource_url"):
            if isinstance(shown[name], str):
                shown[name] = redacted_url(shown[name])
        return f"AuthSettings({', '.join(f'{name}={value!r}' for name, value in shown.items())})"

    @property
    def enabled(self) -> bool:
        """True when requests must carry a bearer token (an issuer or a token file is configured)."""
        return self.issuer is not None or self.tokens_file is not None

    @property
    def issuers(self) -> frozenset[str]:
        """Who may vouch for a caller, as `Caller.issuer` names it: "static" (the token file), the issuer's URL."""
        return frozenset(([StaticTokens.kind] if self.tokens_file is not None else [])
                         + ([self.issuer] if self.issuer is not None else []))

    @property
    def address_sessions(self) -> int:
        """The cap on open sessions that callers without authentication share per client address."""
        return self.sessions_per_caller if self.sessions_per_address is None else self.sessions_per_address

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, read_files: bool = True) -> AuthSettings:
        """Settings from `add_auth_arguments` flags, checked; AuthConfigError names the flag at fault.

        `read_files=False` checks the flags alone and leaves `--auth-tokens`'s file to `check_files()`.
        """
        settings = cls(
            issuer=_url_flag("--auth-issuer", args.auth_issuer),
            jwks_url=_url_flag("--auth-jwks-url", args.auth_jwks_url),
            audience=args.auth_audience,
            scopes=tuple(dict.fromkeys(args.auth_scope or ())),
            tokens_file=Path(args.auth_tokens) if args.auth_tokens else None,
            no_auth=bool(args.no_auth),
            resource_url=_url_flag("--resource-url", args.resource_url),
            allowed_origins=_listed(args.allowed_origins),
            allowed_hosts=_listed(args.allowed_hosts),
            rate_limit=float(args.rate_limit),
            rate_burst=int(args.rate_burst),
            header_timeout=float(args.header_timeout),
            body_timeout=float(args.body_timeout),
            auth_failures=float(args.auth_failures),
            sessions_per_caller=int(args.sessions_per_caller),
            contexts_per_caller=int(args.contexts_per_caller),
            sessions_per_address=None if args.sessions_per_address is None else int(args.sessions_per_address),
            forwarded_allow_ips=_listed(args.forwarded_allow_ips),
        )
        if read_files:
            settings.check()
        else:
            settings.check_flags()
        return settings

    def check(self) -> None:
        """Refuse contradictory or unsafe combinations, and an unusable token file, before anything starts."""
        self.check_flags()
        self.check_files()

    def check_flags(self) -> None:
        """Refuse contradictory or unsafe combinations and values out of range; no file is read."""
        if self.no_auth and self.enabled:
            raise AuthConfigError("--no-auth contradicts --auth-issuer/--auth-tokens; give one or the other")
        if self.enabled and not self.scopes:
            raise AuthConfigError(
                "authentication needs at least one --auth-scope (the scope every caller's token must carry, "
                "e.g. --auth-scope tools)"
            )
        if (self.jwks_url or self.audience) and not self.issuer:
            raise AuthConfigError("--auth-jwks-url and --auth-audience need --auth-issuer (the token issuer's URL)")
        if self.issuer and not _secure_or_local(self.issuer):
            raise AuthConfigError(
                f"--auth-issuer {redacted_url(self.issuer)} must be https:// (plain http only on loopback)"
            )
        if self.jwks_url and not _secure_or_local(self.jwks_url):
            raise AuthConfigError(
                f"--auth-jwks-url {redacted_url(self.jwks_url)} must be https:// (plain http only on loopback)"
            )
        for scope in self.scopes:
            if not _SCOPE_TOKEN.fullmatch(scope):
                # a token's `scope` claim is split at spaces: "tools admin" would be required whole and never held
                raise AuthConfigError(
                    f"--auth-scope {scope!r} is not one scope (RFC 6749: visible ASCII without spaces, quotes or "
                    "backslashes); give each scope its own flag, e.g. --auth-scope tools --auth-scope admin"
                )
        for origin in self.allowed_origins:
            problem = _origin_problem(origin)
            if problem:
                raise AuthConfigError(f"--allowed-origins {origin!r} {problem}")
        for host in self.allowed_hosts:
            if not _HOST_PATTERN.fullmatch(host):
                raise AuthConfigError(
                    f"--allowed-hosts {host!r} is not a Host header value: write host[:port] or host:* for any "
                    "port (e.g. mcp.internal:8000), without a scheme, path or wildcard name"
                )
        for proxy in self.forwarded_allow_ips:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise AuthConfigError(
                    f"--forwarded-allow-ips {proxy!r} is not an IP address or network: name the proxies in front "
                    "of the gateway (e.g. 10.0.0.5 or 10.0.0.0/24)"
                ) from None
        # `not (... >= ...)` refuses NaN, which compares false; infinity is no rate either
        if not (math.isfinite(self.rate_limit) and self.rate_limit >= 0) or not self.rate_burst >= 1:
            raise AuthConfigError("--rate-limit must be >= 0 (0 turns it off) and finite, and --rate-burst >= 1")
        if not (math.isfinite(self.header_timeout) and self.header_timeout > 0):
            raise AuthConfigError("--header-timeout must be > 0 seconds (and finite)")
        if not (math.isfinite(self.body_timeout) and self.body_timeout > 0):
            raise AuthConfigError("--body-timeout must be > 0 seconds (and finite)")
        if not (math.isfinite(self.auth_failures) and self.auth_failures >= 0):
            raise AuthConfigError("--auth-failures must be >= 0 (0 turns the limit off) and finite")
        if self.sessions_per_caller < 0 or self.contexts_per_caller < 0:
            raise AuthConfigError("--sessions-per-caller and --contexts-per-caller must be >= 0 (0: no cap)")
        if self.sessions_per_address is not None and self.sessions_per_address < 0:
            raise AuthConfigError("--sessions-per-address must be >= 0 (0: no cap)")

    def server_options(self) -> dict[str, Any]:
        """The `uvicorn.Config` options these settings decide: the header and body timeouts, and whose
        X-Forwarded-For names the client (for the refused-token budget, the rate limit and the session caps): only
        the proxies the operator names, where uvicorn's default trusts any loopback peer."""
        return {
            "http": header_timeout_protocol(self.header_timeout, self.body_timeout),
            "proxy_headers": bool(self.forwarded_allow_ips),
            "forwarded_allow_ips": _trusted_proxies(self.forwarded_allow_ips) or None,
        }

    def check_files(self) -> None:
        """Refuse a `--auth-tokens` file that cannot be used, naming the entry."""
        if self.tokens_file is not None:
            StaticTokens.load(self.tokens_file)  # a bad file fails here, at start-up, naming the entry


def _trusted_proxies(entries: tuple[str, ...]) -> list[str]:
    """`--forwarded-allow-ips` as uvicorn matches it: each entry a network in normal form (uvicorn never matches
    `127.0.0.1/8`, whose host bits are set, and says nothing), and each IPv4 one also as the IPv4-mapped IPv6
    network (`::ffff:127.0.0.0/104`), which is how a proxy's address reads to a gateway listening on `::`."""
    out: list[str] = []
    for entry in entries:
        network = ipaddress.ip_network(entry, strict=False)  # checked in AuthSettings.check
        out.append(str(network))
        if isinstance(network, ipaddress.IPv4Network):
            out.append(f"::ffff:{network.network_address}/{96 + network.prefixlen}")
    return list(dict.fromkeys(out))


def _listed(values: list[str] | None) -> tuple[str, ...]:
    """A repeatable flag's values, each possibly comma-separated."""
    return tuple(item.strip() for value in values or () for item in value.split(",") if item.strip())


# RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")
# A Host header value: a name or IPv4 address, or a bracketed IPv6 address; then a port or `:*`
_HOST_PATTERN = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?)(:([0-9]{1,5}|\*))?")
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _origin_problem(origin: str) -> str | None:
    """Why `origin` can never equal a browser's `Origin` header (None when it can)."""
    if origin.lower() == "null":
        # any page can send `Origin: null` (a sandboxed iframe, a data: URL), so listing it would let every site call
        return (
            "is sent by any sandboxed or data: page, so allowing it would let every site call the gateway; list the "
            "page's real origin (scheme://host[:port]) instead"
        )
    found = re.fullmatch(r"(https?)://([^/?#\s@]+)", origin, re.IGNORECASE)
    if found is None:
        return "is not an origin; write scheme://host[:port] (or scheme://host:* for any port), without a path"
    host = _HOST_PATTERN.fullmatch(found.group(2))
    if host is None:
        return (
            "is not an origin a browser sends: its host must be a name or an address (a wildcard such as "
            "https://*.example.com is not supported); list each origin, scheme://host[:port] or scheme://host:*"
        )
    if host.group(4) == _DEFAULT_PORTS[found.group(1).lower()]:
        return f"names the default port, which a browser leaves out of Origin: write {found.group(1)}://{host.group(1)}"
    return None


def _url_flag(flag: str, value: str | None) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment or parts.query:
        raise AuthConfigError(
            f"{flag} {redacted_url(value)!r} is not an absolute http(s) URL without query or fragment"
        )
    if parts.username is not None or parts.password is not None:
        # refused, not scrubbed: it would go to every log line and error that names the URL, and to the
        # issuer as Basic authentication; an issuer's `iss`, its key set and a resource URL hold none
        raise AuthConfigError(
            f"{flag} {redacted_url(value)!r} holds a user name or password: give the URL without them "
            "(a JWK set and an issuer's metadata are public documents)"
        )
    return value  # unchanged: an issuer is compared with the token's `iss` exactly (RFC 8414 §3.3)


def _secure_or_local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme == "https" or is_loopback(parts.hostname or "")


def add_auth_arguments(parser: argparse.ArgumentParser) -> None:
    """The authentication and request-guard flags of `toolsearch mcp serve --transport http`."""
    group = parser.add_argument_group("HTTP authentication and request guards")
    group.add_argument(
        "--auth-issuer", metavar="URL", help="OAuth issuer whose JWT access tokens are accepted (https, exact `iss`)"
    )
    group.add_argument(
        "--auth-jwks-url",
        metavar="URL",
        help="the issuer's JWK set (default: `jwks_uri` from the issuer's RFC 8414 or OpenID metadata)",
    )
    group.add_argument(
        "--auth-audience", metavar="URI", help="the `aud` tokens must carry (default: the gateway's resource URL)"
    )
    group.add_argument(
        "--auth-scope",
        action="append",
        metavar="SCOPE",
        help="a scope every caller's token must carry (repeatable; required with --auth-issuer/--auth-tokens)",
    )
    group.add_argument(
        "--auth-tokens",
        metavar="FILE",
        help="static bearer tokens: JSON mapping each token (or sha256) to subject, scopes",
    )
    group.add_argument(
        "--no-auth",
        action="store_true",
        help="serve a non-loopback address without authentication (only behind a proxy that authenticates)",
    )
    group.add_argument(
        "--resource-url",
        metavar="URL",
        help="the gateway's public URL, e.g. https://mcp.example.com/mcp (default: http://HOST:PORT/PATH)",
    )
    group.add_argument(
        "--allowed-origins",
        action="append",
        metavar="ORIGIN[,ORIGIN...]",
        help="browser origins allowed to call, answered with CORS headers (scheme://host[:port], or :* for any "
        "port; repeatable); others get 403",
    )
    group.add_argument(
        "--allowed-hosts",
        action="append",
        metavar="HOST[,HOST...]",
        help="more Host header values accepted (host[:port] or host:*; repeatable)",
    )
    group.add_argument(
        "--rate-limit",
        type=float,
        default=600.0,
        metavar="N",
        help="requests a minute per caller (default 600; 0 turns the limit off); shared by the workers of a "
        "Redis --session-store, per worker with the memory store",
    )
    group.add_argument(
        "--rate-burst", type=int, default=60, metavar="N", help="requests a caller may burst (default 60)"
    )
    group.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="close a connection that does not send complete request headers in this time (default 10)",
    )
    group.add_argument(
        "--body-timeout",
        type=float,
        default=DEFAULT_BODY_TIMEOUT,
        metavar="SECONDS",
        help="close a connection that does not send a request's whole body in this time once its headers are "
        f"in (default {DEFAULT_BODY_TIMEOUT:g})",
    )
    group.add_argument(
        "--forwarded-allow-ips",
        action="append",
        metavar="IP[,IP...]",
        help="proxies (addresses or networks) whose X-Forwarded-For names the client; from any other address the "
        "header is ignored (default: none, the connection's address counts; repeatable)",
    )
    group.add_argument(
        "--auth-failures",
        type=float,
        default=30.0,
        metavar="N",
        help="refused bearer tokens a client address may send a minute, in bursts of N; past that it gets 429 "
        "before its token is even checked (default 30; 0 turns the limit off)",
    )
    group.add_argument(
        "--sessions-per-caller",
        type=int,
        default=100,
        metavar="N",
        help="open handshake-era sessions per authenticated caller; one more gets 429 (default 100; 0: no cap)",
    )
    group.add_argument(
        "--sessions-per-address",
        type=int,
        default=None,
        metavar="N",
        help="without authentication callers are told apart only by client address, so all local clients share "
        "this one cap on open sessions; one more gets 429 (default: --sessions-per-caller; 0: no cap)",
    )
    group.add_argument(
        "--contexts-per-caller",
        type=int,
        default=1000,
        metavar="N",
        help="2026-07-28 context handles per caller; past that a search keeps no new context and says why "
        "(default 1000; 0: no cap)",
    )


def default_resource_url(host: str, port: int, path: str) -> str:
    """The URL the gateway serves when no --resource-url names its public one (IPv6 bracketed)."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}{path}"


def check_exposure(host: str, settings: AuthSettings) -> None:
    """Refuse to serve a non-loopback address unauthenticated, or an issuer's tokens without the public resource URL."""
    if not is_loopback(host) and not settings.enabled:
        if not settings.no_auth:
            raise AuthConfigError(
                f"refusing to listen on {host} without authentication: anyone who can reach the port could "
                "search and call every upstream tool. Give --auth-issuer URL --auth-scope SCOPE (OAuth tokens) or "
                "--auth-tokens FILE --auth-scope SCOPE (static tokens); or --no-auth when a proxy in front "
                "authenticates every request; or listen on 127.0.0.1"
            )
        log.warning("listening on %s without authentication (--no-auth): every client that reaches it is trusted", host)
    # Off loopback the default resource URL (http://HOST:PORT/PATH) is no address clients use: the 401 challenge
    # and the metadata would send OAuth clients to get tokens for it (on 0.0.0.0, for http://0.0.0.0:...), which
    # the gateway refuses when --auth-audience names another; --auth-audience does not take its place.
    if settings.issuer and not is_loopback(host) and not settings.resource_url:
        raise AuthConfigError(
            f"--auth-issuer on {host} needs --resource-url (the gateway's public URL, e.g. "
            "https://mcp.example.com/mcp): OAuth clients are told to get tokens for it, and the issuer must know "
            "it as the resource"
        )


# --- verifiers -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a token was not accepted: the HTTP status, the RFC 6750 error code and a description."""

    description: str
    status: int = 401
    error: str = "invalid_token"
    retry_after: int | None = None  # seconds, with a 503: when the answer may differ


@dataclass(frozen=True, slots=True)
class Verified:
    """A token accepted: the SDK's AccessToken view of it and the caller it stands for."""

    access: Any  # mcp.server.auth.provider.AccessToken
    caller: Caller


class _StaticEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    subject: str = Field(min_length=1)
    scopes: list[str] = Field(default_factory=list)
    token: str | None = None
    sha256: str | None = None

    @field_validator("token")
    @classmethod
    def _long_enough(cls, value: str | None) -> str | None:
        if value is not None and (len(value) < _MIN_STATIC_TOKEN or not re.fullmatch(r"[\x21-\x7e]+", value)):
            raise ValueError(
                f"a token must be at least {_MIN_STATIC_TOKEN} visible ASCII characters "
                "(make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        return value

    @field_validator("sha256")
    @classmethod
    def _hex_digest(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", value):
            raise ValueError("sha256 must be 64 hex digits (the SHA-256 of the token)")
        return value.lower() if value else value


class _StaticFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[_StaticEntry] = Field(min_length=1)


class StaticTokens:
    """Bearer tokens from a file, each standing for a subject with scopes; kept and compared as digests.

    The file is JSON: `{"tokens": [{"subject": "ci", "scopes": ["tools"], "sha256": "<hex>"}, ...]}`,
    an entry giving either `sha256` (preferred: the file then holds no usable secret) or `token`.
    """

    kind = "static"

    def __init__(self, entries: Sequence[tuple[bytes, str, frozenset[str]]], source: str) -> None:
        self._entries = tuple(entries)
        self.source = source

    def __repr__(self) -> str:  # never the digests
        return f"StaticTokens({self.source!r}, {len(self._entries)} tokens)"

    @classmethod
    def load(cls, path: Path) -> StaticTokens:
        where = str(path)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise AuthConfigError(f"--auth-tokens {where}: cannot read it ({exc.strerror or exc})") from None
        except (ValueError, UnicodeDecodeError) as exc:
            # the message of a JSON error can quote the file; only the position is shown
            at = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
            raise AuthConfigError(f"--auth-tokens {where}: not valid JSON{at}") from None
        try:
            parsed = _StaticFile.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise AuthConfigError(f"--auth-tokens {where}: {loc}: {first['msg']}") from None
        entries: list[tuple[bytes, str, frozenset[str]]] = []
        seen: set[bytes] = set()
        for i, entry in enumerate(parsed.tokens):
            if (entry.token is None) == (entry.sha256 is None):
                raise AuthConfigError(f"--auth-tokens {where}: tokens.{i}: give exactly one of 'token' or 'sha256'")
            digest = bytes.fromhex(entry.sha256) if entry.sha256 else hashlib.sha256(entry.token.encode()).digest()  # type: ignore[union-attr]
            if digest in seen:
                raise AuthConfigError(f"--auth-tokens {where}: tokens.{i}: the same token is listed twice")
            seen.add(digest)
            entries.append((digest, entry.subject, frozenset(entry.scopes)))
        return cls(entries, where)

    def check(self, token: str) -> Verified | Refusal:
        from mcp.server.auth.provider import AccessToken

        presented = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: tuple[bytes, str, frozenset[str]] | None = None
        for entry in self._entries:  # every entry compared: the time taken does not say which matched
            if hmac.compare_digest(presented, entry[0]):
                found = entry
        if found is None:
            return Refusal("the token is not one this gateway accepts")
        _, subject, scopes = found
        access = AccessToken(token="", client_id=subject, scopes=sorted(scopes), subject=subject)
        return Verified(access, Caller.authenticated_as(self.kind, subject, scopes=scopes))

    async def verify_token(self, token: str) -> Any:
        """The SDK's `TokenVerifier` interface: the token's `AccessToken`, or None when it is refused."""
        outcome = self.check(token)
        return outcome.access if isinstance(outcome, Verified) else None


class JwtVerifier:
    """JWT access tokens signed by one issuer's keys (its JWK set, cached and re-read on an unknown key id)."""

    def __init__(
        self,
        issuer: str,
        *,
        audience: Sequence[str],
        jwks_url: str | None = None,
        algorithms: Iterable[str] = ASYMMETRIC_ALGORITHMS,
        leeway: float = 30.0,
        cache_seconds: float = 300.0,
        min_refresh_seconds: float = 30.0,
        http_timeout: float = 5.0,
    ) -> None:
        import anyio

        self.issuer = issuer
        self.audience = tuple(audience)
        self.jwks_url = jwks_url
        self.algorithms = tuple(a for a in algorithms if a in ASYMMETRIC_ALGORITHMS)
        self.leeway = leeway
        self.cache_seconds = cache_seconds
        self.min_refresh_seconds = min_refresh_seconds
        self.http_timeout = http_timeout
        self._keys: list[tuple[Any, str | None]] | None = None  # (jwt.PyJWK, the "alg" it is published for)
        self._fetched_at = -float("inf")
        self._tried_at = -float("inf")
        self._lock = anyio.Lock()

    async def _get_json(self, client: Any, url: str) -> Any:
        response = await client.get(url, headers={"accept": "application/json"})
        response.raise_for_status()
        return response.json()

    async def _discover_jwks_url(self, client: Any) -> str:
        parts = urlsplit(self.issuer)
        base = f"{parts.scheme}://{parts.netloc}"
        candidates = [
            f"{base}/.well-known/oauth-authorization-server{parts.path.rstrip('/')}",  # RFC 8414 §3.1
            f"{self.issuer.rstrip('/')}/.well-known/openid-configuration",  # OpenID Connect Discovery
        ]
        problems = []
        for url in candidates:
            try:
                metadata = await self._get_json(client, url)
            except Exception as exc:
                problems.append(f"{url}: {type(exc).__name__}")
                continue
            if not isinstance(metadata, dict) or metadata.get("issuer") != self.issuer:
                problems.append(f"{url}: its 'issuer' is not {self.issuer}")
                continue
            jwks_uri = metadata.get("jwks_uri")
            if isinstance(jwks_uri, str) and _secure_or_local(jwks_uri):
                return jwks_uri
            problems.append(f"{url}: no usable https 'jwks_uri'")
        raise LookupError("; ".join(problems))

    def _next_read_in(self) -> int:
        """Whole seconds until the key set may be read again (at least 1: the Retry-After of a 503)."""
        return max(1, math.ceil(self._tried_at + self.min_refresh_seconds - time.monotonic()))

    async def _refresh(self, *, force: bool) -> None:
        import httpx2
        import jwt

        async with self._lock:
            now = time.monotonic()
            fresh = now - self._fetched_at < self.cache_seconds
            # an unknown key id re-reads the set, at most once per min_refresh_seconds: made-up key
            # ids cannot turn every request into a fetch from the issuer
            if (fresh and not force) or now - self._tried_at < self.min_refresh_seconds:
                return
            self._tried_at = now
            try:
                async with httpx2.AsyncClient(timeout=self.http_timeout, follow_redirects=False) as client:
                    if self.jwks_url is None:
                        self.jwks_url = await self._discover_jwks_url(client)
                    document = await self._get_json(client, self.jwks_url)
                keys = jwt.PyJWKSet.from_dict(document).keys  # unusable keys are skipped
                published = {k.get("kid"): k.get("alg") for k in document["keys"] if isinstance(k, dict)}
                self._keys = [(key, published.get(key.key_id)) for key in keys]
                self._fetched_at = time.monotonic()  # when read: a request that waited for it gets this set
            except Exception as exc:
                # the error may quote a URL from the issuer's metadata (httpx names the URL it failed on)
                log.warning(
                    "cannot read the signing keys of %s: %s",
                    redacted_url(self.issuer), named_error(exc, redacted_words(str(exc))),
                )  # fmt: skip

    async def check(self, token: str) -> Verified | Refusal:
        """The token's caller, or why it is refused (nothing raised: every failure is a `Refusal`)."""
        import jwt

        audience = self.audience

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return Refusal("the token is not a well-formed JWT")
        alg = header.get("alg")
        if alg not in self.algorithms:
            return Refusal(
                f"the token's algorithm {str(alg)[:20]!r} is not accepted (one of {', '.join(self.algorithms)})"
            )
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            return Refusal("the token is not a well-formed JWT")
        for claim in _DATE_CLAIMS:
            if claim in unverified and not _numeric_date(unverified[claim]):
                # PyJWT reads these with int(): "9999999999" or true would pass as a date
                return Refusal(
                    f"the token's {claim!r} claim must be a number of seconds since 1970 (RFC 7519 NumericDate)"
                )
        kid = header.get("kid")
        asked = time.monotonic()
        await self._refresh(force=False)
        key = self._key(kid, alg)
        if key is None and self._keys is not None and not self._holds(kid):
            await self._refresh(force=True)  # a key rotation: the issuer may publish a key it did not before
            key = self._key(kid, alg)  # (read by this request or by one that held the lock before it)
        if self._keys is None:
            return Refusal(
                "the gateway cannot read its token issuer's signing keys right now; try again shortly",
                status=503,
                error="temporarily_unavailable",
                retry_after=self._next_read_in(),
            )
        if key is None and kid is not None and not self._holds(kid) and self._fetched_at < asked:
            # The set held was read before this token came, and could not be read again now (too soon after the
            # last read, or the issuer did not answer): a key published since is not known yet. The client
            # should retry, not sign in again, and its address is not charged for the gateway's stale set.
            why = (
                "the issuer did not answer when it was read again"
                if self._tried_at >= asked
                else f"it is read again at most once every {self.min_refresh_seconds:g} s"
            )
            return Refusal(
                "the token's signing key is not in the issuer's key set as the gateway last read it, and "
                f"{why}; retry in {self._next_read_in()} s",
                status=503,
                error="temporarily_unavailable",
                retry_after=self._next_read_in(),
            )
        if key is None:
            return Refusal("the token's key id and algorithm ('kid', 'alg') name no key the issuer publishes")
        try:
            claims = jwt.decode(
                token,
                key=key.key,
                algorithms=[alg],
                audience=list(audience),
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            return Refusal("the token has expired; get a new one from the issuer")
        except jwt.InvalidAudienceError:
            return Refusal(f"the token is not issued for this resource (its audience must be {audience[0]})")
        except jwt.InvalidIssuerError:
            return Refusal(f"the token is not issued by {self.issuer}")
        except jwt.MissingRequiredClaimError as exc:
            return Refusal(f"the token has no {exc.claim!r} claim")
        except jwt.ImmatureSignatureError:
            return Refusal("the token is not valid yet")
        except jwt.InvalidSignatureError:
            return Refusal("the token's signature does not verify")
        except jwt.PyJWTError:
            return Refusal("the token is malformed")
        if not isinstance(claims.get("sub"), str) or not claims["sub"]:
            return Refusal("the token's 'sub' claim must be a non-empty string")
        scopes = _token_scopes(claims)
        aud = claims["aud"]
        matched = next((a for a in ([aud] if isinstance(aud, str) else aud) if a in audience), None)
        from mcp.server.auth.provider import AccessToken

        client_id = claims.get("client_id") or claims.get("azp") or claims["sub"]
        access = AccessToken(
            token="",  # the credential itself goes no further than this function
            client_id=str(client_id),
            scopes=sorted(scopes),
            expires_at=int(claims["exp"]),
            resource=matched,
            subject=claims["sub"],
            claims=claims,
        )
        caller = Caller.authenticated_as(self.issuer, claims["sub"], scopes=scopes, claims=claims)
        return Verified(access, caller)

    def _holds(self, kid: Any) -> bool:
        """Whether the key set read last holds a key with this id (usable for the token or not)."""
        return kid is not None and any(k.key_id == kid for k, _ in self._keys or ())

    def _key(self, kid: Any, alg: str) -> Any:
        if self._keys is None:
            return None
        usable = [(k, published) for k, published in self._keys if k.public_key_use in (None, "sig")]
        if kid is not None:
            usable = [(k, published) for k, published in usable if k.key_id == kid]
        elif len(usable) != 1:
            return None  # without a key id, only an unambiguous single key may verify
        if not usable or usable[0][1] not in (None, alg):
            return None  # no such key, or it is published for another algorithm
        return usable[0][0]

    async def verify_token(self, token: str) -> Any:
        """The SDK's `TokenVerifier` interface: the token's `AccessToken`, or None when it is refused."""
        outcome = await self.check(token)
        return outcome.access if isinstance(outcome, Verified) else None


_DATE_CLAIMS = ("exp", "nbf", "iat")


def _numeric_date(value: Any) -> bool:
    """RFC 7519's NumericDate: a JSON number (whole or not), which a bool, a string or NaN is not."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _token_scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """Scopes from `scope` (RFC 9068: space-separated) or `scp` (a list, as some issuers write it)."""
    raw = claims.get("scope", claims.get("scp", ""))
    if isinstance(raw, str):
        return frozenset(raw.split())
    if isinstance(raw, list):
        return frozenset(s for s in raw if isinstance(s, str))
    return frozenset()


# --- the ASGI layers -------------------------------------------------------------------------------


def _quoted(text: str) -> str:
    """A value fit for a quoted-string in WWW-Authenticate: only RFC 6750's characters (%x20-21 / %x23-5B /
    %x5D-7E), so no quote, backslash, control or non-ASCII character a token put in a description gets there."""
    return re.sub(r"[^\x20\x21\x23-\x5b\x5d-\x7e]", "'", text)


@dataclass(slots=True)
class _Gate:
    """Requires a bearer token that a verifier accepts and that carries every required scope."""

    app: ASGIApp
    static: StaticTokens | None
    jwt: JwtVerifier | None
    scopes: tuple[str, ...]
    metadata_url: str | None
    failures_per_minute: float = 0.0
    shared: CallerLimits | None = None
    _challenge_scope: str = field(init=False, default="")
    _failures: TokenBuckets = field(init=False, default_factory=TokenBuckets)

    def __post_init__(self) -> None:
        self._challenge_scope = " ".join(self.scopes)

    async def _failure_budget(self, address: str, cost: int, send: Send) -> float | None:
        """Look at (cost 0) or spend from (cost 1) the address's bucket of refused tokens: the wait, or
        None when a shared store failed (answered with 503)."""
        burst = max(1, round(self.failures_per_minute))
        return await spend(
            self.shared, self._failures, address, self.failures_per_minute, burst, send,
            cost=cost, what="limit on refused tokens",
        )  # fmt: skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        values = Headers(scope=scope).getlist("authorization")
        if not values:
            await self._refuse(send, None)
            return
        client = scope.get("client")
        address = f"authfail:{client[0] if client else '?'}"
        if self.failures_per_minute > 0:
            # before any verification: an address that keeps sending bad tokens costs no signature checks
            wait = await self._failure_budget(address, 0, send)
            if wait is None:
                return
            if wait > 0:
                await self._too_many_failures(send, wait)
                return
        scheme, _, token = values[0].partition(" ")
        token = token.strip()
        if len(values) > 1 or scheme.lower() != "bearer" or not token:
            outcome: Verified | Refusal = Refusal("send exactly one 'Authorization: Bearer <token>' header")
        else:
            outcome = await self._verify(token)
        if isinstance(outcome, Refusal):
            counted = outcome.status == 401 and self.failures_per_minute > 0
            if counted and await self._failure_budget(address, 1, send) is None:
                return
            await self._refuse(send, outcome)
            return
        missing = [s for s in self.scopes if s not in outcome.caller.scopes]
        if missing:
            await self._refuse(
                send,
                Refusal(f"the token lacks the scope(s) {' '.join(missing)}", status=403, error="insufficient_scope"),
            )
            return
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from starlette.authentication import AuthCredentials

        scope["user"] = AuthenticatedUser(outcome.access)
        scope["auth"] = AuthCredentials(list(outcome.caller.scopes))
        scope[CALLER_SCOPE_KEY] = outcome.caller
        await self.app(scope, receive, send)

    async def _too_many_failures(self, send: Send, wait: float) -> None:
        retry = max(1, math.ceil(wait))
        log.warning("refusing requests from an address that sent too many bad tokens (for %d s)", retry)
        await jsonrpc_error_response(
            send,
            429,
            -32029,
            f"Too many refused bearer tokens from this address: at most {self.failures_per_minute:g} a minute "
            f"(--auth-failures). Wait {retry} s (Retry-After), then send a valid token.",
            [("retry-after", str(retry))],
        )

    async def _verify(self, token: str) -> Verified | Refusal:
        refusal = Refusal("the token is not one this gateway accepts")
        if self.static is not None:
            outcome = self.static.check(token)
            if isinstance(outcome, Verified):
                return outcome
            refusal = outcome
        if self.jwt is not None and token.count(".") == 2:
            return await self.jwt.check(token)
        return refusal

    async def _refuse(self, send: Send, refusal: Refusal | None) -> None:
        parts = []
        if refusal is not None and refusal.status in (401, 403):
            parts += [f'error="{refusal.error}"', f'error_description="{_quoted(refusal.description)}"']
        if self.metadata_url:
            parts.append(f'resource_metadata="{self.metadata_url}"')
        parts.append(f'scope="{_quoted(self._challenge_scope)}"')
        status = 401 if refusal is None else refusal.status
        description = "this gateway needs 'Authorization: Bearer <token>'" if refusal is None else refusal.description
        body = json.dumps(
            {"error": "invalid_request" if refusal is None else refusal.error, "error_description": description}
        )
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if status in (401, 403):
            headers.append((b"www-authenticate", ("Bearer " + ", ".join(parts)).encode("latin-1")))
        else:
            retry = 5 if refusal is None or refusal.retry_after is None else refusal.retry_after
            headers.append((b"retry-after", str(retry).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body.encode()})


@dataclass(slots=True)
class _Anonymous:
    """Without authentication every request is served for the one anonymous caller."""

    app: ASGIApp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[CALLER_SCOPE_KEY] = ANONYMOUS
        await self.app(scope, receive, send)


@dataclass(slots=True)
class _ResourceMetadata:
    """Serves the Protected Resource Metadata document (GET, any origin: it is public); the rest goes on."""

    app: ASGIApp
    paths: frozenset[str]
    document: bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        cors = [(b"access-control-allow-origin", b"*"), (b"access-control-allow-methods", b"GET, OPTIONS")]
        if scope["method"] == "OPTIONS":
            await send({"type": "http.response.start", "status": 204, "headers": cors})
            await send({"type": "http.response.body", "body": b""})
            return
        if scope["method"] not in ("GET", "HEAD"):
            await send({"type": "http.response.start", "status": 405, "headers": [(b"allow", b"GET, OPTIONS"), *cors]})
            await send({"type": "http.response.body", "body": b""})
            return
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self.document)).encode()),
            (b"cache-control", b"public, max-age=3600"),
            *cors,
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else self.document})


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _guard_lists(settings: AuthSettings, resource_url: str) -> tuple[list[str], list[str] | None]:
    """Allowed origins and hosts: the configured ones, the resource URL's own, and loopback's when it is local."""
    parts = urlsplit(resource_url)
    host = (parts.hostname or "").lower()
    origins = [*settings.allowed_origins, _origin(resource_url)]
    hosts: list[str] | None = [*settings.allowed_hosts, parts.netloc.lower()]
    if is_loopback(host):
        local = [f"[{h}]" if ":" in h else h for h in LOOPBACK_HOSTS]
        origins += [f"http://{h}:*" for h in local] + [f"https://{h}:*" for h in local]
        hosts += [f"{h}:*" for h in local]  # type: ignore[operator]
    elif host in ("0.0.0.0", "::") and not settings.allowed_hosts:
        hosts = None  # every interface, no public name given: Host cannot be known (Origin still is checked)
    return origins, hosts


def protect(
    app: ASGIApp, settings: AuthSettings, *, path: str, resource_url: str, shared: CallerLimits | None = None
) -> ASGIApp:
    """Wrap an MCP streamable-HTTP ASGI app: metadata, Origin/Host checks, authentication, rate limit, in that order.

    `resource_url` is the gateway's URL as clients use it (`settings.resource_url`, or
    `default_resource_url(host, port, path)` once the port is bound); it is the default audience.
    `shared`: limits every worker shares (in a Redis session store) for the request rate and the
    refused-token budget; None keeps them in this process.

    The settings are checked here too (`AuthSettings.check_flags`), not only by the command line: an application
    that wraps its own app must not get, say, CORS for `Origin: null` that `mcp serve` refuses at start.
    """
    settings.check_flags()
    guarded: ASGIApp = app
    if settings.rate_limit > 0:
        guarded = RateLimit(guarded, per_minute=settings.rate_limit, burst=settings.rate_burst, shared=shared)
    metadata_url: str | None = None
    if settings.enabled:
        from mcp.server.auth.routes import build_resource_metadata_url
        from pydantic import AnyHttpUrl

        if settings.issuer:
            metadata_url = str(build_resource_metadata_url(AnyHttpUrl(resource_url)))
        audience = settings.audience or resource_url
        guarded = _Gate(
            guarded,
            static=StaticTokens.load(settings.tokens_file) if settings.tokens_file else None,
            jwt=JwtVerifier(
                settings.issuer,
                audience=tuple(dict.fromkeys([audience, audience.rstrip("/")])),
                jwks_url=settings.jwks_url,
                algorithms=settings.algorithms,
            )
            if settings.issuer
            else None,
            scopes=settings.scopes,
            metadata_url=metadata_url,
            failures_per_minute=settings.auth_failures,
            shared=shared,
        )
    else:
        guarded = _Anonymous(guarded)
    origins, hosts = _guard_lists(settings, resource_url)
    # CORS for the origins the operator listed only: pages on loopback origins pass the Origin check, as the SDK
    # lets them, but no page gets to read an answer (or send a preflighted request) unless the operator said so
    guarded = OriginGuard(guarded, allowed_origins=origins, allowed_hosts=hosts, cors_origins=settings.allowed_origins)
    if settings.issuer and metadata_url:
        from mcp.shared.auth import ProtectedResourceMetadata

        # validated from strings, so the model's own URL settings keep a path-less issuer exact (no "/" added)
        document = ProtectedResourceMetadata.model_validate(
            {
                "resource": resource_url,
                "authorization_servers": [settings.issuer],
                "scopes_supported": list(settings.scopes),
                "resource_name": "toolsearch MCP gateway",
            }
        ).model_dump_json(exclude_none=True)
        suffixed = urlsplit(metadata_url).path
        guarded = _ResourceMetadata(guarded, frozenset({_PRM_PATH, suffixed}), document.encode())
    return guarded
