"""The one redaction of configured URLs and command lines for messages, logs and reprs: credentials never leave
in text."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = ["Scrubber", "redacted_command", "redacted_url", "redacted_words", "url_secrets"]

HIDDEN = "***"
# A flag or variable whose name holds one of these carries a credential (`--api-key`, `--githubToken`, `DB_PASSWORD`)
_SECRET_INSIDE = ("token", "secret", "passw", "apikey", "credential", "bearer", "cookie", "privatekey")
# ... and these only as a whole part of the name (`--key`, `--private-key`, not `--keyboard`)
_SECRET_PARTS = frozenset({"key", "auth", "authorization", "pwd", "pat"})
_HEADER_FLAGS = frozenset({"-H", "--header", "--headers"})  # `--header "Authorization: Bearer t"`: the value goes
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
_VARIABLE = re.compile(r"\$\{[^${}]*\}")  # `${GITHUB_TOKEN}`: a reference, not a value, so it is shown


def redacted_url(url: str) -> str:
    """`url` with its credentials hidden: the user info (`user:password@`, or a token as user name),
    every query value (`?token=`, `?api_key=`, `?password=`: any of them may be one) and the fragment.

    Scheme, host, port, path and query parameter names stay, so a message still says where:
    `redis://:pw@host:6379/0` -> `redis://***@host:6379/0`, `https://h/mcp?token=t` -> `https://h/mcp?token=***`.
    A text that is not a URL (`memory`) is returned as it is, unless it holds an `@`.

    A password may hold an unencoded `#`, `?` or `/` (generated ones do), which a URL parser takes for the end of
    the authority (`redis://:Xy7#kQ@host/0`): see `_user_info_end`. Where the text is ambiguous, more is hidden.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    end = _user_info_end(rest)
    user_info, rest = ("", rest) if end < 0 else (f"{HIDDEN}@", rest[end + 1:])
    rest, hashed, fragment = rest.partition("#")
    rest, asked, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    if query:
        query = "&".join(_hidden_value(part) for part in query.split("&"))
    shown = f"{scheme}{sep}{user_info}{authority}{slash}{path}{asked}{query}"
    return f"{shown}#{HIDDEN}" if hashed and fragment else f"{shown}{hashed}"


# What may follow the user info: a host (a name, an IPv4 or a bracketed IPv6 address) and a port, up to the path.
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]*\]|[^\[\]@/?#:]*)(:[0-9]*)?")
_DELIMITERS = re.compile(r"[/?#]")


def _user_info_end(rest: str) -> int:
    """Where the user info of `rest` (a URL after `scheme://`) ends: the index of its last `@`, or -1 (none).

    Read as RFC 3986 says, the authority ends at the first `/`, `?` or `#`, and its last `@` ends the user info.
    A password holding one of those delimiters, unencoded, moves part of it past that point, so an `@` found later
    also counts when the text before it cannot be a plain host (`:Xy7`, `user:pw`: a `:` or another `@`); then the
    user info runs to the last `@` that a plausible host[:port] follows. A URL with a port and an `@` in its path or
    query is read that way too: it loses some detail, where reading it strictly could show part of a password.
    """
    first = _DELIMITERS.search(rest)
    authority = rest if first is None else rest[: first.start()]
    end = authority.rfind("@")
    if first is None or "@" not in rest[first.start():]:
        return end
    if end < 0 and ":" not in authority:
        return -1  # `host/a@b`: an @ in the path of a URL without user info or port
    later = [i for i, c in enumerate(rest) if c == "@" and i > first.start()]
    for at in reversed(later):
        after = _DELIMITERS.search(rest, at + 1)
        if _HOST_PORT.fullmatch(rest[at + 1: len(rest) if after is None else after.start()]):
            return at
    return len(rest) - 1 - rest[::-1].index("@")  # no plausible host after any: hide up to the last @


def _hidden_value(parameter: str) -> str:
    name, equals, value = parameter.partition("=")
    if not equals:  # a bare `?secret`: the whole part may be the credential
        return HIDDEN if name else name
    return f"{name}={HIDDEN}" if value else parameter


def redacted_words(command: str) -> str:
    """A command line with every URL in it redacted (`npx mcp-remote https://user:pw@host/mcp`)."""
    return " ".join(redacted_url(word) if "://" in word else word for word in command.split(" "))


def redacted_command(argv: Sequence[str]) -> str:
    """A command and its arguments as one line, with the values of credential-named flags and variables hidden
    and every URL redacted: `server --api-key sk-1 --token=t-1 GITHUB_TOKEN=g-1 -H "Authorization: Bearer b-1"`
    -> `server --api-key *** --token=*** GITHUB_TOKEN=*** -H "Authorization: ***"`.

    What counts is the name (see `_SECRET_INSIDE`, `_SECRET_PARTS`), since a value can look like anything; a
    false positive costs a log line some detail, a miss would put a credential in it.
    """
    shown: list[str] = []
    hide_next = header_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            shown.append(arg if _VARIABLE.fullmatch(arg) else HIDDEN)
        elif header_next:
            shown.append(_quoted(_hidden_header(arg)))
        else:
            shown.append(_quoted(_redacted_arg(arg)))
        flag = arg.startswith("-") and "=" not in arg
        hide_next, header_next = flag and _secret_name(arg), flag and arg in _HEADER_FLAGS
    return " ".join(shown)


def _redacted_arg(arg: str) -> str:
    name, equals, value = arg.partition("=")
    if equals and value and _NAME.fullmatch(name.lstrip("-")):
        if name in _HEADER_FLAGS:
            return f"{name}={_hidden_header(value)}"
        if _secret_name(name) and not _VARIABLE.fullmatch(value):
            return f"{name}={HIDDEN}"
    return redacted_words(arg) if "://" in arg else arg


def _hidden_header(value: str) -> str:
    name, colon, rest = value.partition(":")
    if _VARIABLE.fullmatch(rest.strip()) or _VARIABLE.fullmatch(value):
        return value
    return f"{name}: {HIDDEN}" if colon and _NAME.fullmatch(name.strip()) else HIDDEN


def _secret_name(name: str) -> bool:
    bare = name.lstrip("-")
    folded = re.sub(r"[-_.]", "", bare).lower()
    parts = {part.lower() for part in re.split(r"[-_.]|(?<=[a-z])(?=[A-Z])", bare) if part}
    return any(word in folded for word in _SECRET_INSIDE) or bool(parts & _SECRET_PARTS)


def _quoted(arg: str) -> str:
    return f'"{arg}"' if " " in arg else arg


# Values scrubbed from text (`Scrubber`): any of at least this length whose name says it is a credential; others
# only when they could be one (`_token_like`): `TZ=UTC`, `MODE=cursor` or `Accept: */*` must not blank words.
_SHORTEST_NAMED = 3
_SHORTEST_TOKEN = 8


def _token_like(value: str) -> bool:
    """Whether a value could be a credential though nothing names it one: one word of at least `_SHORTEST_TOKEN`
    characters holding a digit or mixed case, and not a number or a path (`sk-ak-9fQ...`, `ghp_...`), where
    `cursor`, `application/json` or `/home/bob` are words a message may need."""
    return (
        len(value) >= _SHORTEST_TOKEN
        and not any(c.isspace() for c in value)
        and (any(c.isdigit() for c in value) or (any(c.isupper() for c in value) and any(c.islower() for c in value)))
        and not value.replace(".", "").isdigit()
        and not value.startswith(("/", "~", "./", "../"))
    )


def url_secrets(url: str) -> list[str]:
    """The parts of `url` that `redacted_url` hides (its user info, user name and password apart, each query value,
    the fragment), to scrub from text that quotes them on their own."""
    _, sep, rest = url.partition("://")
    if not sep:
        rest = url
    found: list[str] = []
    end = _user_info_end(rest)
    if end >= 0:
        user_info, rest = rest[:end], rest[end + 1:]
        found += [user_info, *user_info.split(":", 1)]
    rest, _, fragment = rest.partition("#")
    _, _, query = rest.partition("?")
    found += [part.partition("=")[2] or part for part in query.split("&") if part]
    found.append(fragment)
    return [text for text in found if text]


class Scrubber:
    """Removes known secret values (what a server was configured with: env and header values, the values its
    `${VAR}`s expanded to, the credentials of its URL) from text that someone else wrote and may quote them back:
    an upstream's error message, a line it printed. Each is replaced by HIDDEN, the longest first (so a value
    holding another is hidden whole).

    Only values are known, not what a text is: `secrets` are hidden whatever they look like (from 3 characters),
    `named` (name, value) pairs when the name says it is a credential (`_secret_name`: `API_TOKEN`,
    `Authorization`) or the value could be one (`_token_like`), `values` only when they could be one.
    """

    def __init__(
        self, *, secrets: Iterable[str] = (), named: Iterable[tuple[str, str]] = (), values: Iterable[str] = ()
    ) -> None:
        kept = {v for v in secrets if len(v) >= _SHORTEST_NAMED}
        kept.update(v for name, v in named if (_secret_name(name) and len(v) >= _SHORTEST_NAMED) or _token_like(v))
        kept.update(v for v in values if _token_like(v))
        self.secrets = tuple(sorted(kept, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, HIDDEN)
        return text

    def __bool__(self) -> bool:
        return bool(self.secrets)
