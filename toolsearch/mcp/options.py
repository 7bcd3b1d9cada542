"""The options of `toolsearch mcp serve`: its flags, their checked types, and the guard settings they make."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from .._errors import ArgumentTypeError, InvalidArgumentError
from ..executor import DEFAULT_MAX_RESULT_BYTES
from ..model_option import add_model_option
from ..usage import PRIVACY_SETTINGS, Privacy
from .config import ChangedTools
from .metatools import CALL_TOOL

__all__ = [
    "GatewayOptions",
    "add_mcp_arguments",
    "add_option_arguments",
    "fraction",
    "positive_int",
    "port_number",
    "url_path",
]

# A hit below a quarter of the best one's score is a weak match (one shared common word), not a candidate: on the
# shared BFCL and Seal-Tools sets no relevant tool of a search's top five scored that low, with bm25 or hybrid.
DEFAULT_MIN_RELATIVE_SCORE = 0.25


@dataclass(frozen=True, slots=True)
class GatewayOptions:
    """How the gateway guards its clients from upstream servers, and what it records.

    - `max_result_bytes`: the largest call result passed on, for servers whose config does not set
      `maxResultBytes`; a larger one becomes an error saying so.
    - `changed_tools`: "keep" (a session keeps a changed tool's definition it saw until it
      searches again) or "block" (calls to it are refused until then), for servers whose config
      does not set `changedTools`.
    - `usage_log`: record (query, tools shown, tools then called successfully) per catalog.
    - `usage_file`: keep that log in this JSON file (one log per catalog); None keeps it in memory.
    - `usage_privacy`: what the log keeps of a request (toolsearch.usage): "hashed" words (the default),
      "tokens", or the "raw" text, which `toolsearch tune` needs.
    """

    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    changed_tools: ChangedTools = "keep"
    usage_log: bool = True
    usage_file: Path | None = None
    usage_privacy: Privacy = "hashed"

    def __post_init__(self) -> None:
        if isinstance(self.max_result_bytes, bool) or not isinstance(self.max_result_bytes, int):
            raise ArgumentTypeError(f"max_result_bytes must be a positive integer, got {self.max_result_bytes!r}")
        if self.max_result_bytes < 1:
            raise InvalidArgumentError(f"max_result_bytes must be a positive integer, got {self.max_result_bytes!r}")
        if self.changed_tools not in ("keep", "block"):
            raise InvalidArgumentError(f"changed_tools must be 'keep' or 'block', got {self.changed_tools!r}")
        if self.usage_privacy not in PRIVACY_SETTINGS:
            raise InvalidArgumentError(
                f"usage_privacy must be one of {', '.join(PRIVACY_SETTINGS)}, got {self.usage_privacy!r}"
            )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> GatewayOptions:
        return cls(
            max_result_bytes=args.max_result_bytes,
            changed_tools=args.changed_tools,
            usage_log=not args.no_usage_log,
            usage_file=args.usage_log,
            usage_privacy=args.usage_privacy,
        )


def positive_int(text: str, unit: str = "") -> int:
    """An argparse type: a whole number of at least 1 (`unit` names what it counts in the error)."""
    try:
        value = int(text)
    except ValueError:
        what = f"a whole number of {unit}" if unit else "a whole number"
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def fraction(text: str) -> float:
    """An argparse type: a number from 0 up to but not including 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.25, got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be from 0 up to but not including 1, got {text}")
    return value


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 (pick a free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535 (0 picks a free port), got {value}")
    return value


def url_path(text: str) -> str:
    """An argparse type: an HTTP endpoint path, starting with '/'."""
    if not text.startswith("/"):
        raise argparse.ArgumentTypeError(f"must start with '/', e.g. /{text}, got {text!r}")
    return text


def add_mcp_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `toolsearch mcp serve` (besides the workers' ones, see toolsearch.mcp.workers)."""
    parser.add_argument(
        "--config",
        "-c",
        required=True,
        type=Path,
        metavar="FILE",
        help='servers config in the {"mcpServers": {...}} format',
    )
    parser.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (default; for clients that launch the gateway) or streamable HTTP",
    )
    parser.add_argument("--host", default="127.0.0.1", help="HTTP: interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=port_number, default=8000, help="HTTP: port (default 8000; 0 picks a free one)")
    parser.add_argument("--path", type=url_path, default="/mcp", help="HTTP: endpoint path (default /mcp)")
    parser.add_argument(
        "--backend",
        default="auto",
        help="search backend: auto (default: hybrid when the vector extra and its model are installed, "
        "else bm25), bm25, regex, vector or hybrid",
    )
    add_model_option(parser)
    parser.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="TOOL",
        help="always show this tool: a name (time__get_current_time), a server name, or a glob; repeatable",
    )
    parser.add_argument(
        "--max-discovered",
        type=lambda text: positive_int(text, "tools"),
        default=None,
        metavar="N",
        help="at most N found tools per handshake-era client; the least recently used are unloaded",
    )
    parser.add_argument(
        "--min-relative-score",
        type=fraction,
        default=DEFAULT_MIN_RELATIVE_SCORE,
        metavar="FRACTION",
        help=f"a search exposes no hit scoring below this fraction of its best hit's score (default "
        f"{DEFAULT_MIN_RELATIVE_SCORE:g}; 0 exposes every hit); the result says how many were left out",
    )
    parser.add_argument(
        "--no-call-tool",
        action="store_true",
        help=f"do not offer the {CALL_TOOL} passthrough to handshake-era clients (for clients that follow "
        "list changes; 2026-07-28 clients always have it)",
    )
    parser.add_argument(
        "--require-discovery",
        action="store_true",
        help=f"refuse {CALL_TOOL} for tools the caller's session or context never found with tool_search",
    )
    parser.add_argument(
        "--augment",
        type=Path,
        default=None,
        metavar="FILE",
        help="a JSON schema object whose properties are added to every upstream tool's input schema (e.g. a "
        "required 'reason'); each call's values are logged and taken out before the upstream is called",
    )
    parser.add_argument(
        "--no-context",
        action="store_true",
        help="2026-07-28 clients: tool_search mints no context handles (every search and call is stateless)",
    )
    add_option_arguments(parser)


def add_option_arguments(parser: argparse.ArgumentParser) -> None:
    """The `mcp serve` flags of GatewayOptions."""
    parser.add_argument(
        "--max-result-bytes",
        type=lambda text: positive_int(text, "bytes"),
        default=DEFAULT_MAX_RESULT_BYTES,
        metavar="N",
        help=f"largest tool result passed on, in bytes (default {DEFAULT_MAX_RESULT_BYTES:,}); "
        "a larger one is an error; a server's 'maxResultBytes' overrides it",
    )
    parser.add_argument(
        "--changed-tools",
        choices=("keep", "block"),
        default="keep",
        help="when an upstream changes a tool a client has loaded: keep showing that client the definition "
        "it saw until it searches again (default), or block calls to it until then; "
        "a server's 'changedTools' overrides it",
    )
    parser.add_argument(
        "--usage-log",
        type=Path,
        default=None,
        metavar="FILE",
        help="keep the usage log (searches and the tools then called) in this JSON file; default: in memory",
    )
    parser.add_argument(
        "--no-usage-log",
        action="store_true",
        help="record no usage log (no queries are kept anywhere)",
    )
    parser.add_argument(
        "--usage-privacy",
        choices=PRIVACY_SETTINGS,
        default="hashed",
        help="what the usage log keeps of a request: its words hashed (default), its words, or the raw text, "
        "which `toolsearch tune` learns from (docs/learning.md)",
    )
