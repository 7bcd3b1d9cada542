"""The gateway's guard settings: result size cap, changed-tool policy, usage log; from `mcp serve` flags."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from .config import DEFAULT_MAX_RESULT_BYTES, ChangedTools

__all__ = ["GatewayOptions", "add_option_arguments", "positive_int"]


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
    """

    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    changed_tools: ChangedTools = "keep"
    usage_log: bool = True
    usage_file: Path | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_result_bytes, bool) or not isinstance(self.max_result_bytes, int):
            raise ValueError(f"max_result_bytes must be a positive integer, got {self.max_result_bytes!r}")
        if self.max_result_bytes < 1:
            raise ValueError(f"max_result_bytes must be a positive integer, got {self.max_result_bytes!r}")
        if self.changed_tools not in ("keep", "block"):
            raise ValueError(f"changed_tools must be 'keep' or 'block', got {self.changed_tools!r}")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> GatewayOptions:
        return cls(
            max_result_bytes=args.max_result_bytes,
            changed_tools=args.changed_tools,
            usage_log=not args.no_usage_log,
            usage_file=args.usage_log,
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
