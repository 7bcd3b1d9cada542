"""The one redaction of configured URLs and command lines for messages, logs and reprs: credentials never leave
in text."""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from urllib.parse import unquote

__all__ = [
    "DSN_SECRET_KEYS", "RedactedRecords", "Scrubber", "basic_auth_secrets", "command_secrets", "redacted_argv",
    "redacted_command", "redacted_url", "redacted_words", "url_secrets",
]

HIDDEN = "***"
# A flag or variable whose name holds one of these carries a credential (`--api-key`, `--githubToken`, `DB_PASSWORD`)
_SECRET_INSIDE = ("token", "secret", "passw", "passphrase", "apikey", "credential", "bearer", "cookie", "privatekey")
# ... and these only as a whole part of the name (`--key`, `--private-key`, not `--keyboard`)
_SECRET_PARTS = frozenset({"key", "auth", "authorization", "pwd", "pat"})
# ... and these only as its last part (`DB_PASS`, `--pass`, `--pw`, `--jwt`, `--sig`): a name that goes on says what
# it is about (`--pass-through`, `--jwt-audience`, `--sig-alg`), and `--passes 3`, `--bypass` are no part of it
_PASSWORD_ENDINGS = frozenset({"pass", "pw"})  # (a password, which `_named_secret` hides however short)
_SECRET_ENDINGS = _PASSWORD_ENDINGS | {"jwt", "sig"}
# `-p` is a password on the command lines of these programs (`mysql -pSECRET`, `sshpass -p SECRET`, `mongosh -p
# SECRET`), and a port or something else for most others (`psql -p 5432`, `redis-cli -p`, `ssh -p`, `docker run -p
# 8080:80`): so it counts only after one of these names on the line (`docker exec db mysql -uroot -pSECRET`)
_P_IS_PASSWORD = frozenset({
    "mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mysqlpump", "mariadb",
    "mariadb-dump", "mariadb-admin", "mariadb-import", "mariadb-show", "mariadb-check", "mongo", "mongosh",
    "mongodump", "mongorestore", "mongoexport", "mongoimport", "mongostat", "mongotop", "mongofiles", "sshpass",
})
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
    if first is not None and first.start() == 0 and rest.startswith("/"):
        # an empty authority (`redis:///alice:pw@host`, a slash too many): what follows the slashes is read as an
        # authority, so a user info there counts (libpq and redis-py refuse such a URL, quoting it to no one)
        inner = rest.lstrip("/")
        end = _user_info_end(inner) if inner else -1
        return end if end < 0 else end + len(rest) - len(inner)
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


# libpq's parameters that hold a secret: the role's password, and the one that unlocks the client's TLS key
DSN_SECRET_KEYS = frozenset({"password", "sslpassword"})
# Such a secret in libpq's keyword form of a DSN (`host=db user=alice password=s3cret`): spaces may stand around its
# `=`, and its value may be quoted (`password='a b'`), so its extent is read as libpq reads it
# (a value already hidden, `password=***"` of a quoted word, keeps the quotes that close that word)
_KEYWORD_SECRET = re.compile(rf"\b({'|'.join(sorted(DSN_SECRET_KEYS, key=len, reverse=True))})(\s*=\s*)"
                             rf"({re.escape(HIDDEN)}(?=[\"'`]*(?:\s|$))|'(?:[^'\\]|\\.)*'?|\S+)", re.IGNORECASE)


def redacted_words(command: str) -> str:
    """A command line or message with every URL in it redacted (`npx mcp-remote https://user:pw@host/mcp`), and every
    value set under a credential's name: a keyword DSN's `password=s3cret` or `password = 'a b'` (as `query --store`
    shows a DSN), a word `--api-key=k-1` or `DB_PASSWORD=pw`."""
    shown: list[str] = []
    at = 0
    for found in _KEYWORD_SECRET.finditer(command):  # a DSN's secret, read as libpq does; the words around it apart
        shown += [_redacted_text(command[at:found.start()]), f"{found[1]}{found[2]}{HIDDEN}"]
        at = found.end()
    return "".join([*shown, _redacted_text(command[at:])])


def _redacted_text(text: str) -> str:
    return " ".join(_redacted_word(word) for word in text.split(" "))


def _redacted_word(word: str) -> str:
    if "://" in word:
        return redacted_url(word)
    return _hidden_assignment(word) or word


def _hidden_assignment(word: str) -> str | None:
    """`name=***` for a word that sets a credential-named flag or variable (`--api-key=k-1`, `DB_PASSWORD=pw`; a
    `${VAR}` reference is no value, and stays); None for any other word."""
    name, equals, value = word.partition("=")
    if equals and value and _NAME.fullmatch(name.lstrip("-")) and _secret_name(name) and not _VARIABLE.fullmatch(value):
        return f"{name}={HIDDEN}"
    return None


def redacted_command(argv: Sequence[str]) -> str:
    """A command and its arguments as one line, with the values of credential-named flags and variables hidden
    and every URL redacted: `server --api-key sk-1 --token=t-1 GITHUB_TOKEN=g-1 -H "Authorization: Bearer b-1"`
    -> `server --api-key *** --token=*** GITHUB_TOKEN=*** -H "Authorization: ***"`.

    What counts is the name (see `_SECRET_INSIDE`, `_SECRET_PARTS`, `_SECRET_ENDINGS`), since a value can look like
    anything; a false positive costs a log line some detail, a miss would put a credential in it.
    """
    return " ".join(_quoted(arg) for arg in redacted_argv(argv))


def redacted_argv(argv: Sequence[str]) -> list[str]:
    """`argv` word for word as `redacted_command` shows it, unquoted: for a caller that quotes the words its own way
    (a benchmark report's `shlex`-quoted command line). `-p` hides its value only on a line that names a program
    whose `-p` is a password (`_P_IS_PASSWORD`: `mysql -pSECRET`, `sshpass -p SECRET`)."""
    return [shown for shown, _ in _argv_words(argv)]


def _argv_words(argv: Sequence[str]) -> Iterator[tuple[str, tuple[str, str] | None]]:
    """Each word of `argv` as `redacted_argv` shows it, with the (name, value) of the credential it carries, or None:
    the one reading of a command line's grammar, so `command_secrets` gives the scrubber what `redacted_command`
    hides. A value may be a `${VAR}` reference or empty, which `command_secrets` leaves out."""
    secret_flag: str | None = None  # the name of the credential the next word is the value of
    header_next = client = False
    for arg in argv:
        if secret_flag is not None and not arg.startswith("-"):
            yield (arg if _VARIABLE.fullmatch(arg) else HIDDEN), (secret_flag, arg)
        elif header_next:
            yield _hidden_header(arg), _header_pair(arg)
        elif (attached := _short_password(arg, client)) is not None:
            yield f"-p{HIDDEN}", ("password", attached)  # named as what it is: `-p` says nothing to `Scrubber`
        else:
            yield _redacted_arg(arg)
        client = client or _password_program(arg)
        flag = arg.startswith("-") and "=" not in arg
        secret_flag = "password" if flag and client and arg == "-p" else arg if flag and _secret_name(arg) else None
        header_next = flag and arg in _HEADER_FLAGS


def _redacted_arg(arg: str) -> tuple[str, tuple[str, str] | None]:
    """A word that is no flag's value, shown, with the credential it sets: `--header=Authorization: Bearer b-1`,
    `--api-key=k-1`, `DB_PASSWORD=pw`."""
    name, _, value = arg.partition("=")
    if name in _HEADER_FLAGS and value:
        return f"{name}={_hidden_header(value)}", _header_pair(value)
    if hidden := _hidden_assignment(arg):
        return hidden, (name, value)
    # a URL, or a keyword DSN's `password=` inside a longer word (`--db "host=db password=s3cret"`)
    return (redacted_words(arg) if "://" in arg or _KEYWORD_SECRET.search(arg) else arg), None


def _hidden_header(value: str) -> str:
    name, colon, rest = value.partition(":")
    if _VARIABLE.fullmatch(rest.strip()) or _VARIABLE.fullmatch(value):
        return value
    return f"{name}: {HIDDEN}" if colon and _NAME.fullmatch(name.strip()) else HIDDEN


def _name_parts(name: str) -> list[str]:
    """The words of a flag's or variable's name: `--db-pass` -> db, pass; `dbPassword` -> db, password."""
    return [part.lower() for part in re.split(r"[-_.]|(?<=[a-z])(?=[A-Z])", name.lstrip("-")) if part]


def _folded(name: str) -> str:
    """A flag's or variable's name run together, for words that count anywhere in it: `--db-Pass_word` -> dbpassword."""
    return re.sub(r"[-_.]", "", name).lower()


def _secret_name(name: str) -> bool:
    folded = _folded(name)
    parts = _name_parts(name)
    return (
        any(word in folded for word in _SECRET_INSIDE)
        or bool(set(parts) & _SECRET_PARTS)
        or bool(parts and parts[-1] in _SECRET_ENDINGS)
    )


def _password_program(arg: str) -> bool:
    """Whether `arg` names a program whose `-p` is a password (`_P_IS_PASSWORD`), by path or not."""
    name = re.split(r"[\\/]", arg)[-1].lower()
    return name.removesuffix(".exe") in _P_IS_PASSWORD


def _short_password(arg: str, client: bool) -> str | None:
    """The password `arg` carries attached (`-pSECRET`) on a line where `-p` is one (`client`), or None."""
    if client and arg.startswith("-p") and len(arg) > 2 and not _VARIABLE.fullmatch(arg[2:]):
        return arg[2:]
    return None


def _quoted(arg: str) -> str:
    return f'"{arg}"' if " " in arg else arg


# Values scrubbed from text (`Scrubber`): one named a credential when it is long enough to be one and no plain word
# (`AUTH_TYPE=none` must not blank "none"); others only when they could be one (`_token_like`): `TZ=UTC`,
# `MODE=cursor`, `AWS_REGION=us-east-1` or `Accept: */*` must not blank words. A URL's password counts from
# `_SHORTEST_KNOWN`: it is a credential whatever it looks like.
_SHORTEST_KNOWN = 3
_SHORTEST_NAMED = 8
_SHORTEST_TOKEN = 8
# values a credential-named setting often holds that are no credential (`AUTH_MODE=disabled`, `API_KEY=optional`)
_PLAIN_VALUES = frozenset({
    "none", "null", "true", "false", "disabled", "enabled", "required", "optional", "anonymous", "password",
    "localhost", "default", "undefined", "bearer", "basic", "oauth", "apikey", "token", "secret",
})
# query parameters that carry a credential though `_secret_name` does not say so (`?sig=` of a signed URL)
_QUERY_SECRET_PARTS = frozenset({"sig", "signature", "code", "session", "sid", "jwt", "hmac", "credential"})
# Shapes of values that hold digits or mixed case but are settings, not credentials
_NOT_TOKENS = (
    # a cloud region or zone: `us-east-1`, `ap-southeast-2`, `europe-west4-a`, `us-central1`
    re.compile(r"(us|eu|ap|sa|ca|me|af|il|mx|cn|us-gov|europe|asia|australia|northamerica|southamerica|africa)"
               r"-[a-z]+(-?\d+)(-[a-z])?"),
    re.compile(r"[A-Z][A-Za-z_-]+(/[A-Z][A-Za-z_-]+)+|Etc/GMT[+-]\d{1,2}"),  # a time zone: `America/New_York`
    re.compile(r"([a-z]{2,3}_[A-Z]{2}|C)\.[A-Za-z0-9-]+(@\w+)?"),  # a locale: `en_US.UTF-8`
    re.compile(r"([a-z0-9-]+\.)+[a-z]{2,}(:\d+)?|[a-z][a-z0-9-]*:\d+"),  # a host name, a port: `db.internal:5432`
    re.compile(r"\d{4}-\d{2}-\d{2}([T ][0-9:.]+Z?)?"),  # a date
    re.compile(r"[A-Za-z]:[\\/].*"),  # a Windows path
    re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+"),  # an e-mail address
)


def _token_like(value: str) -> bool:
    """Whether a value could be a credential though nothing names it one: one word of at least `_SHORTEST_TOKEN`
    characters holding a digit or mixed case, and not a number, a path, a URL (its credentials are found apart:
    `url_secrets`) or another shape of a setting (`_NOT_TOKENS`: a region, a time zone, a host name...), where
    `cursor`, `application/json`, `/home/bob` or `us-east-1` are words a message may need."""
    return (
        len(value) >= _SHORTEST_TOKEN
        and not any(c.isspace() for c in value)
        and (any(c.isdigit() for c in value) or (any(c.isupper() for c in value) and any(c.islower() for c in value)))
        and not value.replace(".", "").isdigit()
        and not value.startswith(("/", "~", "./", "../"))
        and "://" not in value
        and not any(shape.fullmatch(value) for shape in _NOT_TOKENS)
    )


def _named_secret(name: str, value: str) -> bool:
    """Whether `value`, set under `name`, is to be hidden: a credential's name, no plain word, and long enough to be
    one (`_SHORTEST_NAMED`; a password from `_SHORTEST_KNOWN`: `AUTH_TYPE=none` is a setting, `DB_PASSWORD=abc` a
    weak password), or a value that looks like one whatever its name."""
    if _secret_name(name) and value.lower() not in _PLAIN_VALUES:
        # a password is one whatever it looks like (as in a URL); a key or token shorter than this is a setting
        password = (any(word in _folded(name) for word in ("passw", "pwd", "passphrase"))
                    or any(part in _PASSWORD_ENDINGS for part in _name_parts(name)[-1:]))
        if len(value) >= (_SHORTEST_KNOWN if password else _SHORTEST_NAMED):
            return True
    return _token_like(value)


def _secret_query_key(name: str) -> bool:
    return _secret_name(name) or bool(set(_name_parts(name)) & _QUERY_SECRET_PARTS)


def url_secrets(url: str) -> list[str]:
    """The credentials in `url`, to scrub from text that quotes them on their own: its password (and its whole user
    info with it), a user name only when it looks like a token (`https://ghp_...@host`; `postgres` is a user name a
    message may need), the values of credential-named query parameters (`?token=`, `?sig=`; not `?format=json`)
    and a fragment that names one (`#access_token=...`). `redacted_url` hides more, since it shows the URL itself."""
    _, sep, rest = url.partition("://")
    if not sep:
        rest = url
    found: list[str] = []
    end = _user_info_end(rest)
    if end >= 0:
        user_info, rest = rest[:end], rest[end + 1:]
        user, colon, password = user_info.partition(":")
        if colon and password:
            found += [user_info, password]
        elif _token_like(user):
            found.append(user)
    rest, _, fragment = rest.partition("#")
    _, _, query = rest.partition("?")
    for part in [*query.split("&"), *fragment.split("&")]:
        name, equals, value = part.partition("=")
        if (equals and _secret_query_key(name)) or (not equals and _token_like(name)):
            found.append(value if equals else name)
    return [text for text in found if text]


def basic_auth_secrets(url: str) -> list[str]:
    """The token an HTTP client sends for the user info of `url` (`https://user:pw@host/mcp`) in its `Authorization:
    Basic <token>` header, to scrub from text that quotes the header back: base64 of `user:pw` as httpx builds it,
    each half percent-decoded and a missing one empty (`user:` for a token given as the user name, `:pw`). The user
    info is read both as httpx reads it (the authority ends at the first `/`, `?` or `#`; the user info at its last
    `@`) and as `redacted_url` does (a password holding such a delimiter unencoded); [] for a URL without one."""
    _, sep, rest = url.partition("://")
    if not sep:
        return []
    authority = _DELIMITERS.split(rest, maxsplit=1)[0]
    end = _user_info_end(rest)
    readings = [authority.rpartition("@")[0], rest[:end] if end >= 0 else ""]
    found: list[str] = []
    for user_info in dict.fromkeys(readings):
        user, _, password = user_info.partition(":")
        pair = f"{unquote(user)}:{unquote(password)}"
        if pair != ":":  # httpx sends no header for an empty user info (`https://@host`, `https://:@host`)
            found.append(base64.b64encode(pair.encode()).decode())
    return found


def command_secrets(argv: Sequence[str]) -> list[tuple[str, str]]:
    """(name, value) of what `redacted_command` hides on a command line: the values of credential-named flags and
    variables (`--api-key sk-1`, `--token=t-1`, `GITHUB_TOKEN=g-1`) and headers given by flag (`-H "Authorization:
    Bearer b-1"`), to scrub from text that quotes them (`Scrubber`'s `named`)."""
    found = [secret for _, secret in _argv_words(argv) if secret is not None]
    return [(name, value) for name, value in found if value and not _VARIABLE.fullmatch(value)]


def _header_pair(header: str) -> tuple[str, str]:
    name, colon, value = header.partition(":")
    return (name.strip(), value.strip()) if colon else ("", header)


class Scrubber:
    """Removes known secret values (what a server was configured with: env and header values, the values its
    `${VAR}`s expanded to, the credentials of its URL) from text that someone else wrote and may quote them back:
    an upstream's error message, a line it printed. Each is replaced by HIDDEN where it stands as a whole token
    (never inside another word: a password `all` leaves "allowed" alone), the longest first (so a value holding
    another is hidden whole).

    Only values are known, not what a text is: `secrets` are hidden whatever they look like (from 3 characters),
    `named` (name, value) pairs when the name says it is a credential (`_secret_name`: `API_TOKEN`,
    `Authorization`) and the value is long enough to be one and no plain word, or the value could be one
    (`_token_like`), `values` only when they could be one.
    """

    def __init__(
        self, *, secrets: Iterable[str] = (), named: Iterable[tuple[str, str]] = (), values: Iterable[str] = ()
    ) -> None:
        kept = {v for v in secrets if len(v) >= _SHORTEST_KNOWN}
        kept.update(v for name, v in named if _named_secret(name, v))
        kept.update(v for v in values if _token_like(v))
        self.secrets = tuple(sorted(kept, key=len, reverse=True))
        # a whole token: no letter, digit or `_` right before or after it
        alternatives = "|".join(re.escape(secret) for secret in self.secrets)
        self._pattern = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)") if self.secrets else None

    def __call__(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(HIDDEN, text)

    def __bool__(self) -> bool:
        return bool(self.secrets)


class RedactedRecords(logging.Filter):
    """A logger's filter that shows each record's message and traceback as `redacted_words` does: for the loggers of
    libraries that log a URL whole (an HTTP client's `HTTP Request: POST https://bob:pw@host/mcp?token=t ...`), which
    a host's `logging.basicConfig(level=logging.INFO)` would otherwise write with its credentials."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # arguments that do not fit the format: logging says so when it writes the record
            return True
        shown = redacted_words(message)
        if shown != message:
            record.msg, record.args = shown, None
        if record.exc_info and not record.exc_text:
            # an HTTP error's text names its URL too; a formatter writes `exc_text` where it is set
            trace = logging.Formatter().formatException(record.exc_info)
            shown = redacted_words(trace)
            if shown != trace:
                record.exc_text = shown
        return True
