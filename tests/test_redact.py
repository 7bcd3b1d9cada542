"""The one redaction of configured URLs: user info, query values and fragments hidden; where stays readable."""

from __future__ import annotations

import pytest

from toolsearch._redact import redacted_url, redacted_words


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
])
def test_a_url_keeps_where_it_points_and_loses_its_credentials(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


def test_every_url_of_a_command_line_is_redacted() -> None:
    assert redacted_words("npx -y mcp-remote https://u:pw-1@host/mcp --header x") == (
        "npx -y mcp-remote https://***@host/mcp --header x"
    )
