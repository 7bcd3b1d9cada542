"""The one redaction of configured URLs, command lines and messages: user info, query values, fragments and values set
under a credential's name hidden; where stays readable."""

from __future__ import annotations

import pytest

from toolsearch._redact import redacted_command, redacted_url, redacted_words


@pytest.mark.parametrize(("url", "shown"), [
    ("memory", "memory"),
    ("memory://", "memory://"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("redis://:pw-1@127.0.0.1:6379/0", "redis://***@127.0.0.1:6379/0"),
    ("rediss://user:pw-1@[::1]:6380/2", "rediss://***@[::1]:6380/2"),
    ("unix:///run/redis.sock?password=pw-1&db=2", "unix:///run/redis.sock?password=***&db=***"),
    ("https://ghp_tok-1@host/mcp", "https://***@host/mcp"),  # a token as the user name
    ("https://a:b@c@host/mcp", "https://***@host/mcp"),  # an unescaped @ in the password
    ("https://host/mcp?token=t-1&api_key=k-1&flag&empty=", "https://host/mcp?token=***&api_key=***&***&empty="),
    ("https://host?access_token=t-1", "https://host?access_token=***"),
    ("https://host/cb#access_token=t-1", "https://host/cb#***"),
    ("https://host/a@b/mcp", "https://host/a@b/mcp"),  # an @ in the path is not user info
    # a password holding a URL delimiter, unencoded (generated passwords do): before, the text was cut at the
    # delimiter before the @ was looked for, and what came before it (`redis://:Xy7#***`) was shown
    ("redis://:Xy7#kQ2pLm@127.0.0.1:6379/0", "redis://***@127.0.0.1:6379/0"),
    ("redis://:Xy7?kQ2pLm@127.0.0.1:6379/0", "redis://***@127.0.0.1:6379/0"),
    ("redis://:Xy7/kQ2pLm@127.0.0.1:6379/0", "redis://***@127.0.0.1:6379/0"),
    ("rediss://user:a@b#c?d/e@[::1]:6380/2", "rediss://***@[::1]:6380/2"),
    ("https://u:p@host/mcp?next=a@b", "https://***@b"),  # ambiguous: more is hidden, never a password part
])
def test_a_url_keeps_where_it_points_and_loses_its_credentials(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


def test_every_url_of_a_command_line_is_redacted() -> None:
    assert redacted_words("npx -y mcp-remote https://u:pw-1@host/mcp --header x") == (
        "npx -y mcp-remote https://***@host/mcp --header x"
    )


@pytest.mark.parametrize(("text", "shown"), [
    # a keyword DSN, read as libpq reads it: spaces around `=`, a quoted value holding spaces or a quote
    ("--store host=db user=alice password=s3cretPW42 dbname=tools",
     "--store host=db user=alice password=*** dbname=tools"),
    ("connect to host=db password = 'a b c' dbname=tools: refused",
     "connect to host=db password = *** dbname=tools: refused"),
    ("host=db sslpassword='it\\'s k3y' user=alice", "host=db sslpassword=*** user=alice"),
    ("host=db PASSWORD =s3cret", "host=db PASSWORD =***"),
    # a word that sets a credential-named flag or variable
    ("unrecognized arguments: --api-key=k-1 --verbose", "unrecognized arguments: --api-key=*** --verbose"),
    ("the server exited: DB_PASSWORD=pw-9 is not accepted", "the server exited: DB_PASSWORD=*** is not accepted"),
    ("--token=${GITHUB_TOKEN} LOG_LEVEL=debug --keyboard=us", "--token=${GITHUB_TOKEN} LOG_LEVEL=debug --keyboard=us"),
])
def test_a_message_loses_every_value_set_under_a_credential_s_name(text: str, shown: str) -> None:
    # Each form has one path (the keyword DSN's reading, or the word's): one that is dropped fails here.
    assert redacted_words(text) == shown


@pytest.mark.parametrize(("argv", "shown"), [
    (["npx", "-y", "@modelcontextprotocol/server-github"], "npx -y @modelcontextprotocol/server-github"),
    (["srv", "--api-key", "k-1", "--verbose"], "srv --api-key *** --verbose"),
    (["srv", "--apiKey=k-1", "--privateKeyFile", "/k"], "srv --apiKey=*** --privateKeyFile ***"),
    (["srv", "--auth", "--port", "3"], "srv --auth --port 3"),  # a switch: the next flag is not its value
    (["srv", "--keyboard", "us", "--monkey", "x"], "srv --keyboard us --monkey x"),  # `key` only as a whole part
    (["env", "SLACK_BOT_TOKEN=xoxb-1", "LOG_LEVEL=debug", "srv"], "env SLACK_BOT_TOKEN=*** LOG_LEVEL=debug srv"),
    (["docker", "run", "-e", "GITHUB_TOKEN", "img"], "docker run -e GITHUB_TOKEN img"),  # a name without a value
    (["srv", "-H", "X-Api-Key: k-1", "--header=Cookie: c-1"], 'srv -H "X-Api-Key: ***" "--header=Cookie: ***"'),
    (["srv", "--header", "opaque-1"], "srv --header ***"),
    (["srv", "--password", "${env:PW}", "PW=${input:pw}"], "srv --password ${env:PW} PW=${input:pw}"),
    (["mcp-remote", "https://u:pw-1@host/mcp?token=t-1"], "mcp-remote https://***@host/mcp?token=***"),
])
def test_a_command_line_loses_the_values_of_its_credential_named_arguments(argv: list[str], shown: str) -> None:
    assert redacted_command(argv) == shown


def test_a_scrubber_hides_a_secret_as_a_whole_token_never_inside_another_word() -> None:
    # Before: a password `all` and a user name `install`... were replaced as substrings: "not ***owed", "c*** inst***".
    from toolsearch._redact import Scrubber

    scrub = Scrubber(secrets=["all", "pw-12"], named=[("API_KEY", "sk-abc12345"), ("AUTH_TYPE", "none")])
    assert scrub("all of it is not allowed; call install; none") == "*** of it is not allowed; call install; none"
    assert scrub("key=sk-abc12345, 'pw-12' and xpw-12 or sk-abc123456") == "key=***, '***' and xpw-12 or sk-abc123456"
