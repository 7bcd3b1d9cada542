"""Whatever a token holds, its refusal is a proper 401 whose WWW-Authenticate keeps to RFC 6750's characters.

Audit 53 F6: a JWT whose header `alg` held a character above U+FFFF (an emoji) got 500 Internal Server
Error and a traceback in the log, unauthenticated: the description quoted it into WWW-Authenticate,
which cannot be encoded. A quoted-string there may hold only %x20-21 / %x23-5B / %x5D-7E.

A real gateway process over the toy server and the tests' local issuer; raw HTTP requests.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator

import httpx2
import pytest
from fakes.attacks import INITIALIZE, MCP_HEADERS
from fakes.oauth_issuer import LocalIssuer
from mcp_servers import GatewayProcess, http_gateway, toy, write_config

pytestmark = pytest.mark.slow


def b64(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = write_config(tmp_path_factory.mktemp("challenge") / "servers.json", {"toy": toy()})
    with LocalIssuer() as issuer, http_gateway(
        config, "--backend", "bm25", "--auth-issuer", issuer.url, "--auth-scope", "tools", "--auth-failures", "0"
    ) as served:  # fmt: skip
        yield served


@pytest.mark.parametrize("alg", ["\U0001f600", "\u00e9", "\u2028", 'a"b', "a\\b", "\x7f", "\U0010ffff" * 30])
def test_a_token_with_any_algorithm_name_gets_a_401_with_a_well_formed_challenge(
    gateway: GatewayProcess, alg: str
) -> None:
    token = b64({"alg": alg, "typ": "JWT"}) + "." + b64({"sub": "x"}) + ".sig"
    headers = [*MCP_HEADERS, ("authorization", f"Bearer {token}")]
    answer = httpx2.post(gateway.wait_ready(), headers=headers, content=json.dumps(INITIALIZE), timeout=30)
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"] == "invalid_token" and "algorithm" in answer.json()["error_description"]
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="invalid_token", error_description="')
    for value in re.findall(r'="([^"]*)"', challenge):
        assert re.fullmatch(r"[\x20\x21\x23-\x5b\x5d-\x7e]*", value), value
    assert "Exception in ASGI application" not in gateway.stderr
