"""The gateway's log line for an issuer's key set it could not read names the error as `named_error` does: an
exception without a message (httpx's ConnectTimeout) is named alone, never `ConnectTimeout: ` with nothing after."""

from __future__ import annotations

import logging

import pytest
from fakes.oauth_issuer import LocalIssuer

from toolsearch.mcp.auth import JwtVerifier, Refusal


async def test_a_key_read_that_failed_without_a_message_is_logged_by_its_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with LocalIssuer() as issuer:
        audience = "http://127.0.0.2:1/mcp"
        # a connect deadline no connection can meet: httpx raises ConnectTimeout, whose text is empty
        verifier = JwtVerifier(issuer.url, audience=[audience], jwks_url=f"{issuer.url}/jwks.json", http_timeout=1e-9)
        with caplog.at_level(logging.WARNING, logger="toolsearch.mcp.auth"):
            outcome = await verifier.check(issuer.mint("alice", audience=audience))
    assert isinstance(outcome, Refusal) and outcome.status == 503
    # before: "cannot read the signing keys of http://127.0.0.1:PORT: ConnectTimeout: "
    assert [r.getMessage() for r in caplog.records if r.name == "toolsearch.mcp.auth"] == [
        f"cannot read the signing keys of {issuer.url}: ConnectTimeout"
    ]
