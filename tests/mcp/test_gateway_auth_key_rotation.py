"""A signing-key rotation at the issuer: tokens signed by the new key wait for the key set, they do not lock anyone out.

Audit 53 F1: the issuer publishes a new key beside the old one. Before, a token signed by it within 30 s
of the gateway's last read of the JWK set got `401 the token is signed by a key the issuer does not
publish` (false, and no re-read), each counted against the client address's refused-token budget: after
`--auth-failures` of them every caller at that address, valid tokens included, got 429. Now such a token
gets `503 temporarily_unavailable` with Retry-After, uncounted, and once the set may be read again it
is read and the token verifies. A key id still missing from a set read after the token came is a 401.

A real gateway process over the toy server and the tests' local issuer; the JWT verifier itself, with a
short re-read interval, for what happens once the Retry-After has passed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from fakes.attacks import INITIALIZE, MCP_HEADERS
from fakes.oauth_issuer import LocalIssuer
from mcp_servers import GatewayProcess, http_gateway, toy, write_config

from toolsearch.mcp.auth import JwtVerifier, Refusal, Verified

pytestmark = pytest.mark.slow

NEW_KID = "new-1"


def rotate(issuer: LocalIssuer) -> Any:
    """Make the issuer publish a new key beside its old one (as issuers do before signing with it); the new key."""
    new = ec.generate_private_key(ec.SECP256R1())
    old_jwks = issuer.jwks

    def rotated() -> dict[str, Any]:
        public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(new.public_key()))
        return {"keys": [*old_jwks()["keys"], {**public, "kid": NEW_KID, "use": "sig", "alg": "ES256"}]}

    issuer.jwks = rotated  # type: ignore[method-assign]
    return new


def post(url: str, token: str) -> httpx2.Response:
    headers = [*MCP_HEADERS, ("authorization", f"Bearer {token}")]
    return httpx2.post(url, headers=headers, content=json.dumps(INITIALIZE), timeout=30)


@pytest.fixture
def issuer() -> Iterator[LocalIssuer]:
    with LocalIssuer() as local:
        yield local


@pytest.fixture
def gateway(issuer: LocalIssuer, tmp_path: Path) -> Iterator[GatewayProcess]:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    flags = ["--backend", "bm25", "--auth-issuer", issuer.url, "--auth-scope", "tools", "--auth-failures", "3"]
    with http_gateway(config, *flags) as served:
        yield served


def test_a_token_signed_by_a_just_published_key_gets_503_and_locks_no_one_out(
    issuer: LocalIssuer, gateway: GatewayProcess
) -> None:
    url = gateway.wait_ready()
    assert post(url, issuer.mint("alice", audience=url)).status_code == 200
    assert issuer.jwks_requests == 1
    new = rotate(issuer)
    # more of them than --auth-failures allows refused tokens: none of them is counted
    answers = [post(url, issuer.mint(f"user{i}", audience=url, key=new, kid=NEW_KID)) for i in range(5)]
    assert [a.status_code for a in answers] == [503] * 5
    for answer in answers:
        assert answer.json()["error"] == "temporarily_unavailable"
        assert 1 <= int(answer.headers["retry-after"]) <= 30
        said = answer.json()["error_description"]
        assert "does not publish" not in said and "retry in" in said, said
        assert "www-authenticate" not in answer.headers  # not a credential problem: nothing to sign in again for
    # the address is not locked out: a valid token from it is served
    again = post(url, issuer.mint("alice", audience=url))
    assert again.status_code == 200, again.text
    assert issuer.jwks_requests == 1  # a key id the set lacks re-reads it at most once every 30 s


def verifier(issuer: LocalIssuer, **kwargs: Any) -> JwtVerifier:
    return JwtVerifier(issuer.url, audience=["https://gw.example/mcp"], **kwargs)


def check(verifier: JwtVerifier, token: str) -> Verified | Refusal:
    async def run() -> Verified | Refusal:
        return await verifier.check(token)

    return anyio.run(run)


def test_after_its_retry_after_a_rotated_key_is_read_and_verifies(issuer: LocalIssuer) -> None:
    jwts = verifier(issuer, min_refresh_seconds=5.0)
    assert isinstance(check(jwts, issuer.mint("alice", audience="https://gw.example/mcp")), Verified)
    new = rotate(issuer)
    token = issuer.mint("bob", audience="https://gw.example/mcp", key=new, kid=NEW_KID)
    waiting = check(jwts, token)
    assert isinstance(waiting, Refusal) and waiting.status == 503, waiting
    assert waiting.retry_after is not None and 1 <= waiting.retry_after <= 5
    anyio.run(anyio.sleep, waiting.retry_after + 0.2)
    verified = check(jwts, token)
    assert isinstance(verified, Verified) and verified.caller.subject == "bob"
    assert issuer.jwks_requests == 2


def test_a_key_id_missing_from_a_set_read_after_the_token_came_is_a_401(issuer: LocalIssuer) -> None:
    jwts = verifier(issuer, min_refresh_seconds=0.5)
    assert isinstance(check(jwts, issuer.mint("alice", audience="https://gw.example/mcp")), Verified)
    anyio.run(anyio.sleep, 0.7)
    forged = issuer.mint("mallory", audience="https://gw.example/mcp", key=issuer.rogue_key, kid="made-up")
    refused = check(jwts, forged)  # the set is read again for it, and does not hold it: the issuer never published it
    assert isinstance(refused, Refusal) and refused.status == 401 and refused.error == "invalid_token"
    assert "no key the issuer publishes" in refused.description
    assert issuer.jwks_requests == 2


def test_a_rotated_key_while_the_issuer_cannot_be_reached_is_a_503() -> None:
    with LocalIssuer() as issuer:
        jwts = verifier(issuer, min_refresh_seconds=0.5, http_timeout=2.0)
        assert isinstance(check(jwts, issuer.mint("alice", audience="https://gw.example/mcp")), Verified)
        new = rotate(issuer)
        token = issuer.mint("bob", audience="https://gw.example/mcp", key=new, kid=NEW_KID)
    anyio.run(anyio.sleep, 0.7)  # the issuer is gone; the set may be read again, and cannot be
    refused = check(jwts, token)
    assert isinstance(refused, Refusal) and refused.status == 503 and refused.error == "temporarily_unavailable"
    assert refused.retry_after is not None and refused.retry_after >= 1
    assert "the issuer did not answer" in refused.description
