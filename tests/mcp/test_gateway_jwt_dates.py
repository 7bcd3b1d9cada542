"""JWT date claims must be numbers (RFC 7519 NumericDate), checked through a real `toolsearch mcp serve`.

A real gateway process on 127.0.0.2 with a local OAuth issuer (tests/fakes/oauth_issuer.py). PyJWT
reads `exp`, `nbf` and `iat` with `int()`, so a string such as "9999999999" passed as a date; a
token whose dates are not numbers is now refused with 401, naming the claim.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from fakes.attacks import INITIALIZE, MCP_HEADERS
from fakes.oauth_issuer import LocalIssuer
from mcp_servers import http_gateway, toy, write_config

pytestmark = pytest.mark.slow


class Served:
    def __init__(self, url: str, issuer: LocalIssuer) -> None:
        self.url = url
        self.issuer = issuer

    def post(self, **claims: Any) -> httpx2.Response:
        """initialize with a token of the issuer whose claims are the usual ones, with `claims` over them."""
        now = int(time.time())
        payload = {"iss": self.issuer.url, "sub": "mallory", "aud": self.url, "iat": now, "exp": now + 600}
        payload["scope"] = "tools"
        token = self.issuer.mint_claims({**payload, **claims})
        headers = [*MCP_HEADERS, ("authorization", f"Bearer {token}")]
        return httpx2.post(self.url, headers=headers, content=json.dumps(INITIALIZE), timeout=30)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("jwt-dates")
    config = write_config(folder / "servers.json", {"toy": toy()})
    with LocalIssuer() as issuer, http_gateway(
        config, "--backend", "bm25", "--host", "127.0.0.2", "--auth-issuer", issuer.url, "--auth-scope", "tools",
        "--rate-limit", "0", "--auth-failures", "0",
    ) as gateway:  # fmt: skip
        yield Served(gateway.url or "", issuer)


LATER = int(time.time()) + 3600


@pytest.mark.parametrize(
    ("claim", "value"),
    [
        ("exp", str(LATER)),  # a numeral in a string: the date is right, the type is not
        ("exp", "9999999999"),
        ("exp", True),  # a boolean is not a number in JSON either
        ("nbf", "0"),
        ("iat", str(LATER - 3600)),
        ("exp", [LATER]),
    ],
    ids=["exp-numeral-string", "exp-far-string", "exp-true", "nbf-string", "iat-string", "exp-list"],
)
def test_a_date_claim_that_is_not_a_number_is_refused_and_named(served: Served, claim: str, value: Any) -> None:
    answer = served.post(**{claim: value})
    assert answer.status_code == 401
    said = answer.json()["error_description"]
    assert said == f"the token's {claim!r} claim must be a number of seconds since 1970 (RFC 7519 NumericDate)"
    assert "invalid_token" in answer.headers["www-authenticate"]


@pytest.mark.parametrize(
    "dates",
    [{}, {"exp": LATER + 0.5}, {"nbf": LATER - 7200, "iat": LATER - 3600.25}],
    ids=["whole", "fractional-exp", "fractional-iat"],
)
def test_date_claims_that_are_numbers_are_accepted(served: Served, dates: dict[str, Any]) -> None:
    assert served.post(**dates).status_code == 200  # whole or fractional seconds, as the RFC allows
