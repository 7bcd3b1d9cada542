"""`toolsearch mcp serve --transport http` refuses, before anything starts, authentication flags that cannot work.

Audit 53:
- F4: on an address other than loopback, `--auth-issuer` without `--resource-url` started (with
  `--auth-audience`) and sent OAuth clients to `http://0.0.0.0:PORT` for their tokens.
- F5: a user name or password in `--auth-jwks-url` or `--auth-issuer` went to the log and to error
  messages; such URLs are refused now, shown without their credentials, and a URL from the issuer's
  metadata is logged without them.
- F7: values that can never match were accepted: a scope with a space in it (every caller locked out),
  a URL as an allowed host, a wildcard or default port in an allowed origin.
- F8: `--auth-failures inf` was accepted, then every request carrying a token got 500.

In-process `main()` over a config whose one server cannot start: a refused command line never gets to
it (exit 2, one line naming the flag). The log of a real gateway process for the issuer's metadata.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fakes.attacks import INITIALIZE, MCP_HEADERS
from fakes.oauth_issuer import LocalIssuer
from mcp_servers import http_gateway, toy, write_config

from toolsearch.cli import EXIT_USAGE, main
from toolsearch.mcp.auth import AuthSettings, add_auth_arguments, check_exposure

SECRET = "S3cretPassw0rd"


def serve(tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    config = tmp_path / "servers.json"
    # a server that cannot start: every case below must be refused before the gateway tries it
    config.write_text(json.dumps({"mcpServers": {"absent": {"command": str(tmp_path / "no-such-server")}}}))
    code = main(["mcp", "serve", "--config", str(config), "--backend", "bm25", "--transport", "http", *flags])
    return code, capsys.readouterr().err


ISSUER = ["--auth-issuer", "https://id.example.com", "--auth-scope", "tools"]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        # F4: the audience does not stand in for the URL clients are sent to
        (["--host", "0.0.0.0", *ISSUER, "--auth-audience", "https://mcp.example.com/mcp"], "--resource-url"),
        (["--host", "10.1.2.3", *ISSUER], "--auth-issuer on 10.1.2.3 needs --resource-url"),
        # F5: credentials in a URL flag are refused, and not repeated
        (["--auth-issuer", f"http://u:{SECRET}@id.example.com", "--auth-scope", "tools"], "--auth-issuer"),
        ([*ISSUER, "--auth-jwks-url", f"http://svc:{SECRET}@127.0.0.1:9/jwks.json"], "--auth-jwks-url"),
        ([*ISSUER, "--auth-jwks-url", f"https://{SECRET}@id.example.com/jwks.json"], "--auth-jwks-url"),
        ([*ISSUER, "--resource-url", f"https://u:{SECRET}@mcp.example.com/mcp"], "--resource-url"),
        ([*ISSUER, "--auth-jwks-url", f"https://id.example.com/jwks?token={SECRET}"], "--auth-jwks-url"),
        # F7: values that can never match
        (["--auth-tokens", "t.json", "--auth-scope", "tools admin"], "--auth-scope 'tools admin' is not one scope"),
        (["--auth-tokens", "t.json", "--auth-scope", ""], "--auth-scope '' is not one scope"),
        (["--allowed-hosts", "http://mcp.internal:8000"], "--allowed-hosts 'http://mcp.internal:8000' is not a Host"),
        (["--allowed-hosts", "*.example.com"], "--allowed-hosts '*.example.com' is not a Host"),
        (["--allowed-hosts", "mcp.internal/mcp"], "--allowed-hosts 'mcp.internal/mcp' is not a Host"),
        (["--allowed-origins", "https://*.example.com"], "a wildcard such as https://*.example.com is not supported"),
        (["--allowed-origins", "https://app.example:443"], "default port, which a browser leaves out"),
        (["--allowed-origins", "*"], "--allowed-origins '*' is not an origin"),
        (["--allowed-origins", "null"], "--allowed-origins 'null' is sent by any sandboxed or data: page"),
        (["--allowed-origins", "https://app.example,NULL"], "--allowed-origins 'NULL' is sent by any sandboxed"),
        # F8: infinity is no limit a bucket or a timer can hold
        (["--auth-tokens", "t.json", "--auth-scope", "tools", "--auth-failures", "inf"], "--auth-failures"),
        (["--rate-limit", "inf"], "--rate-limit must be >= 0 (0 turns it off) and finite"),
        (["--header-timeout", "inf"], "--header-timeout must be > 0 seconds"),
        (["--body-timeout", "0"], "--body-timeout must be > 0 seconds"),
        (["--body-timeout", "nan"], "--body-timeout must be > 0 seconds"),
    ],
)
def test_flags_that_cannot_work_are_refused_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], said: str
) -> None:
    code, err = serve(tmp_path, capsys, *flags)
    lines = err.strip().splitlines()
    assert code == EXIT_USAGE and len(lines) == 1 and said in lines[0], err
    assert SECRET not in err


def parse(*argv: str) -> AuthSettings:
    parser = argparse.ArgumentParser()
    add_auth_arguments(parser)
    return AuthSettings.from_args(parser.parse_args(list(argv)), read_files=False)


def test_values_that_can_match_are_accepted() -> None:
    hosts = "mcp.internal:8000,mcp.internal:*,[::1]:8000,10.0.0.5,gateway_1"
    origins = "https://app.example:*,http://[::1]:3000,https://app.example:8443,http://app.example:443"
    settings = parse("--auth-scope", "tools:read", "--auth-scope", "urn:x", "--allowed-hosts", hosts,
                     "--allowed-origins", origins, "--forwarded-allow-ips", "10.0.0.0/8,::1", "--body-timeout", "5")
    assert settings.scopes == ("tools:read", "urn:x") and len(settings.allowed_hosts) == 5
    assert len(settings.allowed_origins) == 4 and settings.forwarded_allow_ips == ("10.0.0.0/8", "::1")
    assert settings.body_timeout == 5.0


def test_every_interface_with_an_issuer_starts_with_the_public_url() -> None:
    public = parse(*ISSUER, "--resource-url", "https://mcp.example.com/mcp")
    for host in ("0.0.0.0", "10.1.2.3", "::"):
        check_exposure(host, public)
    check_exposure("127.0.0.1", parse(*ISSUER))  # loopback's own URL is one its clients use


@pytest.fixture
def leaky_issuer() -> Iterator[str]:
    """An issuer whose metadata names a JWK set URL with a password in it (the set itself is missing)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/.well-known/oauth-authorization-server":
                self.send_error(404)
                return
            port = self.server.server_address[1]
            body = json.dumps({"issuer": f"http://127.0.0.1:{port}",
                               "jwks_uri": f"http://svc:{SECRET}@127.0.0.1:{port}/missing-jwks.json"}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_a_key_set_url_with_a_password_from_the_issuer_is_logged_without_it(leaky_issuer: str, tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"toy": toy()})
    with LocalIssuer() as signer, http_gateway(
        config, "--backend", "bm25", "--auth-issuer", leaky_issuer, "--auth-scope", "tools"
    ) as gateway:  # fmt: skip
        url = gateway.wait_ready()
        token = signer.mint("alice", audience=url, issuer=leaky_issuer)
        headers = [*MCP_HEADERS, ("authorization", f"Bearer {token}")]
        answer = httpx2.post(url, headers=headers, content=json.dumps(INITIALIZE), timeout=30)
        assert answer.status_code == 503
        assert gateway.logged("missing-jwks.json"), gateway.stderr
        assert SECRET not in gateway.stderr and "***@127.0.0.1" in gateway.stderr
