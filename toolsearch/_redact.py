"""The one redaction of configured URLs for messages, logs and reprs: credentials never leave in text."""

from __future__ import annotations

__all__ = ["redacted_url", "redacted_words"]

HIDDEN = "***"


def redacted_url(url: str) -> str:
    """`url` with its credentials hidden: the user info (`user:password@`, or a token as user name),
    every query value (`?token=`, `?api_key=`, `?password=`: any of them may be one) and the fragment.

    Scheme, host, port, path and query parameter names stay, so a message still says where:
    `redis://:pw@host:6379/0` -> `redis://***@host:6379/0`, `https://h/mcp?token=t` -> `https://h/mcp?token=***`.
    A text that is not a URL (`memory`) is returned as it is, unless it holds an `@`.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    rest, hashed, fragment = rest.partition("#")
    rest, asked, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = f"{HIDDEN}@{authority.rpartition('@')[2]}"
    if query:
        query = "&".join(_hidden_value(part) for part in query.split("&"))
    shown = f"{scheme}{sep}{authority}{slash}{path}{asked}{query}"
    return f"{shown}#{HIDDEN}" if hashed and fragment else f"{shown}{hashed}"


def _hidden_value(parameter: str) -> str:
    name, equals, value = parameter.partition("=")
    if not equals:  # a bare `?secret`: the whole part may be the credential
        return HIDDEN if name else name
    return f"{name}={HIDDEN}" if value else parameter


def redacted_words(command: str) -> str:
    """A command line with every URL in it redacted (`npx mcp-remote https://user:pw@host/mcp`)."""
    return " ".join(redacted_url(word) if "://" in word else word for word in command.split(" "))
