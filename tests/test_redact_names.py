"""Credential names the redaction knows (`pass`, `pw`, `jwt`, `sig` as a name's last word, `passphrase` anywhere, a
database client's `-p`), names it leaves alone, and the `Basic` form of a URL's user info as httpx sends it."""

from __future__ import annotations

import httpx2
import pytest

from toolsearch._redact import basic_auth_secrets, command_secrets, redacted_command, redacted_words
from toolsearch.mcp.config import parse_config


@pytest.mark.parametrize(("argv", "shown", "secret"), [
    # before: each value shown whole (audit 57 F6)
    (["srv", "--pass", "hunter2horse"], "srv --pass ***", "hunter2horse"),
    (["srv", "--passphrase", "correct horse"], "srv --passphrase ***", "correct horse"),
    (["srv", "--pw", "s3cr3tpw"], "srv --pw ***", "s3cr3tpw"),
    (["srv", "--jwt", "eyJhbGciOiJIUzI1NiJ9.e30.abc"], "srv --jwt ***", "eyJhbGciOiJIUzI1NiJ9.e30.abc"),
    (["srv", "--sig", "c2lnbmF0dXJl"], "srv --sig ***", "c2lnbmF0dXJl"),
    (["srv", "--db-pass=hunter2", "MYSQL_PASS=hunter2"], "srv --db-pass=*** MYSQL_PASS=***", "hunter2"),
    (["srv", "--dbPass", "hunter2", "DB_PASS=hunter2"], "srv --dbPass *** DB_PASS=***", "hunter2"),
    # a keyword DSN inside one argument: before, shown whole by the command line
    (["srv", "--db", "host=db password=hunter2"], 'srv --db "host=db password=***"', None),
    # `-p` of a program whose `-p` is the password: attached (mysql), or the next word (sshpass, mongosh)
    (["mysql", "-uroot", "-phunter2", "shop"], "mysql -uroot -p*** shop", "hunter2"),
    (["docker", "exec", "db", "/usr/bin/mysql", "-phunter2"], "docker exec db /usr/bin/mysql -p***", "hunter2"),
    (["sshpass", "-p", "hunter2", "ssh", "host"], "sshpass -p *** ssh host", "hunter2"),
    (["mongosh", "-u", "admin", "-p", "hunter2"], "mongosh -u admin -p ***", "hunter2"),
])
def test_a_credential_under_a_name_it_was_missed_by_is_hidden(argv: list[str], shown: str, secret: str | None) -> None:
    assert redacted_command(argv) == shown
    assert redacted_words(shown) == shown  # redacted again (`describe` does): nothing moves, the quotes stay
    if secret is not None:  # and the scrubber is given it, under a name that says it is a credential
        assert secret in {value for _, value in command_secrets(argv)}


@pytest.mark.parametrize("argv", [
    # a name that only begins or holds the word says what it is about: its value stays
    ["srv", "--passes", "3", "--pass-through", "stdin", "--bypass", "cache", "--compass", "north"],
    ["srv", "--jwt-audience", "my-api", "--sig-alg", "RS256", "--signal", "TERM", "--sigma", "0.5"],
    ["srv", "PASS_MODE=fast", "PASSES=3", "--pwm", "on"],
    # `-p` of other programs is a port, a publish, a path: left alone
    ["psql", "-h", "db", "-p", "5432"],
    ["redis-cli", "-p", "6380"],
    ["docker", "run", "-p", "3306:3306", "mysql"],  # before the program whose `-p` is a password
    ["mkdir", "-p", "/tmp/x"],
    ["ssh", "-p", "2222", "host"],
    ["mysql", "-p${DB_PASSWORD}"],  # a reference, not a value
])
def test_a_name_that_is_no_credential_keeps_its_value(argv: list[str]) -> None:
    assert redacted_command(argv) == " ".join(argv)
    assert command_secrets(argv) == []


def test_the_keyword_dsn_of_a_described_server_keeps_its_closing_quote() -> None:
    # `describe` redacts the command line once more: before, `--db "host=db password=***` (the quote taken with it)
    config = parse_config({"mcpServers": {"s": {"command": "srv", "args": ["--db", "host=db password=pw1", "-v"]}}},
                          environ={})
    assert config["s"].describe() == 'srv --db "host=db password=***" -v'


def test_a_value_under_a_password_name_is_scrubbed_whatever_it_looks_like() -> None:
    # before: an env `DB_PASS=correcthorsebatterystaple` quoted back by the server reached the model (a lowercase
    # passphrase has no token's shape, and `DB_PASS` was no credential's name)
    config = parse_config({"mcpServers": {"s": {
        "command": "srv", "args": ["--pw", "tr0ub4dor", "--jwt", "eyJhbGciOiJIUzI1NiJ9.e30.abc", "--pass", "letmein"],
        "env": {"DB_PASS": "correcthorsebatterystaple", "SSH_PASSPHRASE": "open sesame", "PASS_MODE": "fast"},
    }}}, environ={})
    scrub = config["s"].scrubber()
    said = ("the credential 'correcthorsebatterystaple' was rejected; 'open sesame' too; tr0ub4dor, letmein, "
            "eyJhbGciOiJIUzI1NiJ9.e30.abc; the mode is fast")
    assert scrub(said) == "the credential '***' was rejected; '***' too; ***, ***, ***; the mode is fast"


@pytest.mark.parametrize("url", [
    "https://bob:PWSECRET444@host/mcp",
    "https://ghpUSERTOKEN0123456789@host/mcp",  # a token as the user name: `token:`
    "https://:PWSECRET444@host/mcp",  # a password only: `:password`
    "https://b%40b:p%3Aw%2Fd%20x@host/mcp",  # each half percent-decoded, as httpx does
    "https://b:p@ss@host/mcp",  # an unencoded `@`: httpx takes the last one
    "https://b:p%zz%FF\u00e4@host/mcp",  # a bad escape, a byte that is no UTF-8, a non-ASCII letter
    "https://a:b:c@host/mcp",  # a second `:` belongs to the password
])
def test_the_basic_token_is_the_one_httpx_sends_for_the_url(url: str) -> None:
    # the HTTP client the MCP SDK connects with, as it sends the request (its in-memory transport sees the headers)
    sent: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.headers.get("Authorization", ""))
        return httpx2.Response(204)

    with httpx2.Client(transport=httpx2.MockTransport(answer)) as client:
        client.post(url)
    assert sent[0].startswith("Basic ")
    assert sent[0].removeprefix("Basic ") in basic_auth_secrets(url)


@pytest.mark.parametrize("url", ["https://host/mcp", "https://@host/mcp", "https://:@host/mcp", "memory"])
def test_a_url_without_user_info_has_no_basic_token(url: str) -> None:
    assert basic_auth_secrets(url) == []
