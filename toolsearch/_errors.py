"""The one exception hierarchy every public call raises from."""

from __future__ import annotations


class ToolSearchError(Exception):
    """Root of every error toolsearch raises; the message says what to do."""


class InvalidToolError(ToolSearchError, ValueError):
    """A tool definition is malformed (missing name, non-string field, bad schema)."""


class DuplicateToolError(ToolSearchError, ValueError):
    """Two or more definitions share one name."""

    def __init__(self, message: str, names: list[str]) -> None:
        super().__init__(message)
        self.names = names


class InvalidQueryError(ToolSearchError, ValueError):
    """A search request is unusable: empty or over-long query, bad k, unknown namespace."""


class AugmentationError(ToolSearchError, ValueError):
    """An `augment=` schema is unusable, or one of its fields collides with a tool's own parameter."""


class QueryTimeoutError(InvalidQueryError):
    """A pattern took longer than its time budget (for example a catastrophic regex)."""


class BackendError(ToolSearchError):
    """A backend is unknown or failed in a way the caller cannot fix by changing the query."""


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


class ToolNotAllowedError(SessionError, PermissionError):
    """A session tried to see or call a tool outside its allowed subset."""


def missing_dependency(package: str, extra: str) -> MissingDependencyError:
    """Build the error for an optional import that failed, naming the extra to install."""
    return MissingDependencyError(
        f"{package} is not installed; install it with: pip install 'toolsearch[{extra}]'"
    )


class AuthConfigError(ToolSearchError, ValueError):
    """The HTTP gateway's authentication settings are unusable or unsafe (the message says which flag)."""


class PolicyError(ToolSearchError, ValueError):
    """A tool policy file is unreadable or invalid (the message names the file and the rule)."""
