"""The one exception tree: every error toolsearch raises is defined here and exported from the root.

Each error that replaces a standard one keeps it as a second base, so `except ValueError` (or
`KeyError`, `ImportError`, ...) written against an older toolsearch still catches it. The tree,
with those bases in parentheses:

    ToolSearchError
    ├── InvalidToolError (ValueError)              a tool definition is malformed
    ├── DuplicateToolError (ValueError)            two definitions share one name
    ├── UnknownToolError (KeyError)                no tool has that name in the catalog
    ├── InvalidQueryError (ValueError)             a search request is unusable
    │   └── QueryTimeoutError                      a pattern ran past its time budget
    ├── AugmentationError (ValueError)             an `augment=` schema is unusable
    ├── InvalidArgumentError (ValueError)          an argument or setting is out of range or empty
    │   └── UnknownFormatError                     no wire format has that name
    ├── ArgumentTypeError (TypeError)              an argument is of the wrong kind
    ├── BackendError                               a backend is unknown or failed
    │   └── CatalogStoreError                      the shared catalog store in Postgres failed or refused us
    │       └── CatalogMovedError                  the catalog moved past the version a change was worked out on
    ├── MissingDependencyError (ImportError)       an optional package is not installed
    ├── StoredIndexError                           a stored index is unusable
    │   ├── IndexNotFoundError (FileNotFoundError)
    │   ├── IndexFormatError
    │   └── InvalidIndexNameError (ValueError)
    ├── SessionError                               a session cannot be used as asked
    │   ├── SessionRequiredError (ValueError)
    │   ├── UnknownSessionError (KeyError)
    │   ├── SessionStoreError                      the store failed or holds unreadable state
    │   │   └── SessionStateError (ValueError)     one stored state is malformed
    │   └── ToolNotAllowedError (PermissionError)
    ├── ProviderError                              a model provider call failed
    ├── ToolCancelledError                         an async tool ended cancelled: its call failed, not the turn
    ├── UsageError                                 a usage log or its file is unusable
    │   ├── UsageStoreUnreachableError             the shared usage store did not answer
    │   └── UsageLogReplacedError                  the stored log was created again under another salt
    ├── PriceTableError (ValueError)               a price table is unreadable or lacks a figure
    ├── DataSourceError (ValueError)               a benchmark data set source is unusable
    ├── MCPConfigError (ValueError)                an MCP servers config is unusable
    ├── UpstreamError                              an upstream MCP server failed
    ├── AuthConfigError (ValueError)               the gateway's authentication settings are unusable
    ├── PolicyError (ValueError)                   a tool policy file is unusable
    ├── PluginError                                a plug-in's entry point cannot be loaded or has the wrong shape
    ├── CommandError                               a CLI command cannot do what was asked
    └── EvalError                                  an evaluation cannot run as asked

    UserWarning
    ├── PluginWarning                              a plug-in was ignored, hidden or skipped
    └── UnknownModelPriceWarning                   a model the price table lacks was priced as a stand-in

Every message says which input is wrong, what is wrong with it and what to do instead.
"""

from __future__ import annotations

from collections.abc import Mapping


class ToolSearchError(Exception):
    """Root of every error toolsearch raises; the message says what to do.

    >>> from toolsearch import Tool, ToolIndex, ToolSearchError
    >>> index = ToolIndex.build([Tool("send_email", "Send an email")], "regex")
    >>> try:
    ...     index.search("")
    ... except ToolSearchError as exc:  # an InvalidQueryError, and a ValueError as before
    ...     print(type(exc).__name__, isinstance(exc, ValueError))
    InvalidQueryError True
    """


# --- tools, queries and arguments -------------------------------------------------------------


class InvalidToolError(ToolSearchError, ValueError):
    """A tool definition is malformed (missing name, non-string field, bad schema)."""


class DuplicateToolError(ToolSearchError, ValueError):
    """Two or more definitions share one name."""

    def __init__(self, message: str, names: list[str]) -> None:
        super().__init__(message)
        self.names = names


class UnknownToolError(ToolSearchError, KeyError):
    """No tool of that name is in the catalog (`catalog[name]`; `catalog.get(name)` returns None instead)."""

    def __str__(self) -> str:  # KeyError quotes its message otherwise
        return str(self.args[0]) if self.args else ""


class InvalidQueryError(ToolSearchError, ValueError):
    """A search request is unusable: empty or over-long query, bad k, unknown namespace."""


class QueryTimeoutError(InvalidQueryError):
    """A pattern took longer than its time budget (for example a catastrophic regex)."""


class AugmentationError(ToolSearchError, ValueError):
    """An `augment=` schema is unusable, or one of its fields collides with a tool's own parameter."""


class InvalidArgumentError(ToolSearchError, ValueError):
    """An argument or setting is out of range, empty, or not one of its choices (the message names it)."""


class UnknownFormatError(InvalidArgumentError):
    """No wire format is registered under the name given; the message lists the known ones."""


class ArgumentTypeError(ToolSearchError, TypeError):
    """An argument is of the wrong kind (a number where a name belongs, a sync call given an async handler)."""


# --- backends and stored indexes --------------------------------------------------------------


class BackendError(ToolSearchError):
    """A backend is unknown or failed in a way the caller cannot fix by changing the query."""


class CatalogStoreError(BackendError):
    """The shared catalog store (Postgres) is down, restarted, too slow, out of connections or refused the
    credentials, or refused a statement; the message names the store (never its password). Nothing was half
    written. `outage` says whether retrying later can help (the store failed) or not (a malformed DSN, a statement
    Postgres refused): the message says which."""

    outage: bool = True


class CatalogMovedError(CatalogStoreError):
    """A change worked out against one catalog version found the catalog at another, so nothing was written
    (`PostgresIndex.sync` works its change out again)."""

    def __init__(self, version: int) -> None:
        super().__init__(f"the catalog is at version {version} now; work the change out again")


class MissingDependencyError(ToolSearchError, ImportError):
    """An optional dependency is not installed; the message names the pip extra."""


class StoredIndexError(ToolSearchError):
    """Base for problems with a stored index."""


class IndexNotFoundError(StoredIndexError, FileNotFoundError):
    """No index exists under the given name or path."""


class IndexFormatError(StoredIndexError):
    """A stored index is corrupt, incomplete, from another format version or another model."""


class InvalidIndexNameError(StoredIndexError, ValueError):
    """An index name would escape the index folder or holds characters that are not allowed."""


# --- sessions ---------------------------------------------------------------------------------


class SessionError(ToolSearchError):
    """Base for session problems."""


class SessionRequiredError(SessionError, ValueError):
    """A call needs a session id and got none."""


class UnknownSessionError(SessionError, KeyError):
    """The session id is not known (never created, expired or evicted)."""

    def __str__(self) -> str:  # KeyError quotes its message otherwise
        return str(self.args[0]) if self.args else ""


class SessionStoreError(SessionError):
    """A session store failed: unreachable or too slow, or it holds state this version cannot read."""


class SessionStateError(SessionStoreError, ValueError):
    """A session state record is malformed or of another schema version (the message names the field)."""


class ToolNotAllowedError(SessionError, PermissionError):
    """A session tried to see or call a tool outside its allowed subset."""


# --- providers, usage, cost and data ----------------------------------------------------------


class ProviderError(ToolSearchError):
    """A model provider call failed; the SDK's own exception is chained as `__cause__`.

    What a caller needs to decide on a retry, whatever the SDK: `status`, the HTTP status the provider answered
    with (None when no answer came: a connection that failed or timed out, a stream cut short, a reply that could
    not be read); `retry_after`, the seconds the provider asked to wait before sending again (None when it named
    none); and `retryable`, whether sending the same request again may help: True for a rate limit, a failing or
    overloaded server, a timeout, a dropped connection or a stream cut short, False for a request the provider
    refused as it is (fix it first), None where nothing tells. The message says the same in words.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.retryable = retryable


class ToolCancelledError(ToolSearchError):
    """An async tool ended cancelled (it cancelled itself, or something it awaited was): its call failed, with this
    as its error, and the turn's other calls went on."""

    def __init__(self) -> None:
        super().__init__("the tool was cancelled before it returned")


class UsageError(ToolSearchError):
    """A usage log or its file is unusable (corrupt, another format version, bad setting)."""


class UsageStoreUnreachableError(UsageError):
    """The usage store did not answer (down, restarting, unreachable, refusing the credentials): try again later.

    A gateway feed that meets it keeps recording in memory and saves once the store answers.
    """


class UsageLogReplacedError(UsageError):
    """The stored log is not the one the entries were hashed for: it was created again under another salt
    (Redis restarted empty and another worker opened the log first). Open it again (`open_log`) and re-hash."""


class PriceTableError(ToolSearchError, ValueError):
    """A price table file that cannot be read or lacks a figure."""


class DataSourceError(ToolSearchError, ValueError):
    """A data set source that is missing, of another version, or not in the expected layout."""


# --- the MCP gateway --------------------------------------------------------------------------


class MCPConfigError(ToolSearchError, ValueError):
    """The servers config is unreadable or names a server it cannot describe."""


class UpstreamError(ToolSearchError):
    """An upstream MCP server could not be started, reached or listed."""


class AuthConfigError(ToolSearchError, ValueError):
    """The HTTP gateway's authentication settings are unusable or unsafe (the message says which flag)."""


class PolicyError(ToolSearchError, ValueError):
    """A tool policy file is unreadable or invalid (the message names the file and the rule)."""


# --- the command line -------------------------------------------------------------------------


class PluginError(ToolSearchError):
    """A plug-in's entry point cannot be imported, or gives an object of the wrong shape."""


class PluginWarning(UserWarning):
    """A plug-in was ignored because a built-in (or an earlier plug-in) already has its name, hidden by a registration
    in code of its name, or skipped because it failed to load where other plug-ins could answer instead."""


class UnknownModelPriceWarning(UserWarning):
    """A price may be wrong: a model the price table does not know was priced as its provider's default model, or
    one the table files under another provider than the wire format's was priced with no cache reads (warned once
    per model, and per format for the second)."""


class CommandError(ToolSearchError):
    """A command cannot do what was asked; the message says what to do instead."""


class EvalError(ToolSearchError):
    """The evaluation cannot run as asked: no queries, a usage log without query text."""


def wrong_type(what: str, value: object, expected: str) -> ArgumentTypeError:
    """Build the error for an argument of the wrong kind: `what` must be `expected`, and what it got."""
    return ArgumentTypeError(f"{what} must be {expected}, got {type(value).__name__}")


def check_seconds(name: str, value: object, error: type[ToolSearchError] = BackendError) -> None:
    """The one check of a setting in seconds (a store's `timeout`, `connect_timeout`, `lock_wait`; a local store's
    `lock_wait`; `--lock-wait`, `--session-ttl`): `error` naming `name` unless `value` is a finite number above 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise error(f"{name} must be a positive number of seconds, got {value!r}")


def named_error(exc: BaseException, message: str | None = None) -> str:
    """An exception as a message quotes it: `Name: message`, or its class name alone when it says nothing (a bare
    `sys.exit()`, a `TimeoutError()`), never a dangling `Name: `. `message` is its message as the caller shows it
    (cut short, on one line, with what it must not quote left out); `str(exc)` when not given."""
    text = str(exc) if message is None else message
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def joined_sentences(text: str, sentence: str) -> str:
    """`text`, then `sentence` after one full stop: none is added after a `text` that ends its own sentence (an SDK's
    "Request timed out."), so a message never reads `..`; `text` alone when `sentence` is empty."""
    if not sentence:
        return text
    text = text.rstrip()
    return f"{text}{'' if text.endswith(('.', '!', '?')) else '.'} {sentence}"


def missing_dependency(package: str, extra: str) -> MissingDependencyError:
    """Build the error for an optional import that failed, naming the extra to install."""
    return MissingDependencyError(
        f"{package} is not installed; install it with: pip install 'toolsearch[{extra}]'"
    )


# How a message names a package of an extra, its distribution (what pip installs), and the oldest release the
# plug-in imports from (None: whichever the extra's main package requires).
Requirement = tuple[str, str, str | None]


def unusable_extra(exc: ImportError, extra: str, packages: Mapping[str, Requirement]) -> MissingDependencyError:
    """The error for a plug-in's failed import. A package that is not installed is said to be missing; one that is
    installed but lacks a name the plug-in imports is named with the release that is installed, what the extra
    needs and the command that upgrades it (`pip install` alone keeps an older release that meets the pin it
    was installed under). `packages` maps the extra's modules (top-level names) to their `Requirement`, its main
    package (the framework) first: a package without a release of its own is asked for as that one's pin brings
    it."""
    import importlib.util  # only on a failed import: the tree stays free of imports
    import sys

    top = (exc.name or next(iter(packages))).partition(".")[0]
    try:
        installed = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):  # a module whose import failed midway, or one blocked in sys.modules
        installed = sys.modules.get(top) is not None
    if not installed:
        return missing_dependency(top, extra)
    label, distribution, minimum = packages.get(top, (top, top, None))
    main, _, main_minimum = next(iter(packages.values()))
    wanted = f"{label} {minimum} or later" if minimum else f"{main} {main_minimum} or later and the {label} it requires"
    return MissingDependencyError(
        f"{label} {_release(top, distribution)} is installed, but toolsearch's `{extra}` extra needs {wanted}; "
        f"upgrade it with: pip install -U 'toolsearch[{extra}]' (the import said: {exc})"
    )


def _release(module: str, distribution: str) -> str:
    """The release of `module` that was imported (its `__version__`), else the installed distribution's."""
    import sys

    version = getattr(sys.modules.get(module), "__version__", None)
    if isinstance(version, str):  # what was imported, whichever other copy an installer recorded
        return version
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version(distribution)
    except PackageNotFoundError:
        return "(release unknown)"
