"""A client cannot pick the address its limits are counted against: X-Forwarded-For counts only from named proxies.

Audit 53 F3: uvicorn trusts X-Forwarded-For from any loopback peer by default, so a client reaching the
gateway from loopback (a local client, an SSH tunnel, a same-host TCP proxy) chose its own address with
a new header each time: the refused-token budget (`--auth-failures`) and `--sessions-per-address` never
filled. Now the connection's address counts, unless `--forwarded-allow-ips` names the proxy the
connection comes from; then the address that proxy reports counts.

Real `toolsearch mcp serve` processes over the toy server; raw HTTP requests.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
from fakes.attacks import INITIALIZE, MCP_HEADERS
from mcp_servers import http_gateway, toy, write_config

pytestmark = pytest.mark.slow

BAD = "Bearer " + "x" * 43


def post(url: str, *headers: tuple[str, str]) -> int:
    answer = httpx2.post(url, headers=[*MCP_HEADERS, *headers], content=json.dumps(INITIALIZE), timeout=30)
    return answer.status_code


def forwarded(i: int) -> tuple[str, str]:
    return ("x-forwarded-for", f"10.0.0.{i}")


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    path.write_text(json.dumps({"tokens": [{"subject": "a", "scopes": ["tools"], "token": secrets.token_urlsafe(32)}]}))
    return path


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("servers") / "servers.json", {"toy": toy()})


@contextmanager
def gateway(config: Path, *flags: str) -> Iterator[str]:
    with http_gateway(config, "--backend", "bm25", *flags) as served:
        yield served.wait_ready()


def test_a_forged_forwarded_for_does_not_refill_the_refused_token_budget(config: Path, tokens: Path) -> None:
    with gateway(config, "--auth-tokens", str(tokens), "--auth-scope", "tools", "--auth-failures", "3") as url:
        assert [post(url, ("authorization", BAD)) for _ in range(3)] == [401, 401, 401]
        # the same client, claiming another address each time: still the one it connects from
        assert [post(url, ("authorization", BAD), forwarded(i)) for i in range(4)] == [429] * 4


def test_a_forged_forwarded_for_does_not_open_more_sessions_per_address(config: Path) -> None:
    with gateway(config, "--sessions-per-address", "2", "--rate-limit", "0") as url:
        assert [post(url) for _ in range(2)] == [200, 200]
        assert [post(url, forwarded(i)) for i in range(3)] == [429] * 3


def test_a_named_proxy_reports_the_client_address(config: Path, tokens: Path) -> None:
    flags = ["--auth-tokens", str(tokens), "--auth-scope", "tools", "--auth-failures", "2"]
    with gateway(config, *flags, "--forwarded-allow-ips", "127.0.0.1,::1") as url:
        # each client behind the proxy has its own budget: 10.0.0.1 is used up, 10.0.0.2 is not
        assert [post(url, ("authorization", BAD), forwarded(1)) for _ in range(3)] == [401, 401, 429]
        assert post(url, ("authorization", BAD), forwarded(2)) == 401


@pytest.mark.parametrize("value", ["proxy.internal", "10.0.0.300", "*"])
def test_a_forwarded_allow_ips_value_that_is_no_address_is_refused(
    config: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolsearch.cli import EXIT_USAGE, main

    code = main(["mcp", "serve", "--config", str(config), "--transport", "http", "--forwarded-allow-ips", value])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and f"--forwarded-allow-ips {value!r} is not an IP address or network" in err, err


@pytest.mark.parametrize(
    ("value", "peer"),
    [("127.0.0.1/8", "127.0.0.1"), ("127.0.0.1", "::ffff:127.0.0.1"), ("10.0.0.0/24", "::ffff:10.0.0.7")],
)
def test_a_named_proxy_is_matched_as_uvicorn_reads_its_address(value: str, peer: str) -> None:
    from uvicorn.middleware.proxy_headers import _TrustedHosts

    from toolsearch.mcp.auth import AuthSettings

    # Before: "127.0.0.1/8" (host bits set) was accepted and matched no peer; an IPv4 proxy read as an IPv4-mapped
    # address by a gateway on `::` was not matched either: X-Forwarded-For was then ignored for every client.
    options = AuthSettings(no_auth=True, forwarded_allow_ips=(value,)).server_options()
    assert peer in _TrustedHosts(options["forwarded_allow_ips"])
    assert "192.0.2.1" not in _TrustedHosts(options["forwarded_allow_ips"])
