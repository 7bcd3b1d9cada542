"""`mcp serve --workers N`: N gateway processes on one port (SO_REUSEPORT), started and kept running."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._errors import InvalidArgumentError, SessionStoreError, ToolSearchError, check_seconds
from ..pg._connect import STORE_ENV, default_dsn, display_dsn, is_postgres_url
from ..stores import SessionStoreSpec, store_spec, url_scheme
from .gateway import reuse_port_socket
from .settings import WorkerSettings, check_header_name
from .startup import configure_logging

__all__ = ["add_worker_arguments", "worker_settings", "check_worker_arguments", "run_workers", "child_argv"]

logger = logging.getLogger("toolsearch.mcp")

STORE_VARIABLE = "TOOLSEARCH_SESSION_STORE"
_READY_TIMEOUT = 120.0  # a worker builds or loads the index before it listens
_RESTART_PAUSE = 1.0  # between restarts of a worker that keeps dying


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `mcp serve` that share state between gateway processes."""
    parser.add_argument(
        "--session-store",
        default=os.environ.get(STORE_VARIABLE) or "memory",
        metavar="URL",
        help="where sessions live: memory (default; this process, one session per connection), "
        "redis://host:port/db (shared by every worker: any worker answers any request), or a scheme a "
        "plug-in declares (docs/plugins.md); a URL with a "
        f"password is better given in ${STORE_VARIABLE}, which is read when this option is absent",
    )
    parser.add_argument(
        "--session-header",
        default=None,
        metavar="NAME",
        help="HTTP: the request header naming a handshake-era session (default with a shared store: "
        "mcp-session-id, issued by the gateway); another header (e.g. a user id set by an authenticating "
        "proxy) needs --trust-proxy-header",
    )
    parser.add_argument(
        "--trust-proxy-header",
        action="store_true",
        help="honour --session-header: only behind a proxy that strips that header from client requests and "
        "sets it itself (otherwise any client could name any session)",
    )
    parser.add_argument(
        "--session-ttl",
        type=float,
        default=None,
        metavar="SECONDS",
        help="end sessions idle this long (default 3600 when sessions outlive connections)",
    )
    parser.add_argument(
        "--index-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="a folder shared by the workers: the first builds the index of the catalog there, the others load it",
    )
    parser.add_argument(
        "--store",
        default=default_dsn(),
        metavar="URL",
        help="a Postgres with pgvector that holds the catalog, its embeddings and index for every worker on every "
        "host: postgresql://user@host:5432/db (default: $TOOLSEARCH_STORE when it names one; the password is better "
        "in $PGPASSWORD). The first worker indexes the upstream servers' tools there, the others read them, and a "
        "change any worker sees reaches all of them",
    )
    parser.add_argument("--catalog", default=None, metavar="NAME",
                        help="with --store: the catalog's name there (default 'default')")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="HTTP: run N gateway processes on one port (needs a shared --session-store)",
    )
    parser.add_argument(
        "--catalog-poll",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="with a shared store: how often a worker checks whether another saw the tool catalog change",
    )
    parser.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # set in worker processes


def check_worker_arguments(args: argparse.Namespace) -> None:
    """Refuse values and combinations that cannot work, saying what to use instead (InvalidArgumentError: a
    usage error, exit code 2 from `toolsearch mcp serve`)."""
    if args.workers < 1:
        raise InvalidArgumentError(f"--workers must be at least 1, got {args.workers}")
    if args.workers > 1 and args.transport != "http":
        raise InvalidArgumentError("--workers N serves HTTP: add --transport http")
    spec = _store_spec(args.session_store)
    if args.workers > 1 and not spec.shared:
        scheme = url_scheme(args.session_store)
        why = (
            "with the memory store each worker would keep its own sessions"
            if scheme == "memory"
            else f"the {scheme}:// store does not declare itself shared between processes (a plug-in says so "
            "with toolsearch.stores.SessionStoreSpec(open, shared=True)), so each worker may keep its own sessions"
        )
        raise InvalidArgumentError(
            f"--workers N needs a shared --session-store (redis://host:port/db): {why}, and a client's next "
            "request could land on a worker that never saw it"
        )
    if args.session_header is not None and args.transport != "http":
        raise InvalidArgumentError("--session-header names an HTTP header: use it with --transport http")
    if args.session_header is not None:
        check_header_name(args.session_header, "--session-header")  # before the forgery check, which assumes one
    custom = args.session_header is not None and args.session_header.lower() != "mcp-session-id"
    if custom and not args.trust_proxy_header:
        raise InvalidArgumentError(
            f"--session-header {args.session_header} trusts a header any client can send: add "
            "--trust-proxy-header, and have the proxy in front strip that header from client requests"
        )
    if args.session_ttl is not None:
        check_seconds("--session-ttl", args.session_ttl, InvalidArgumentError)
    if args.store is not None and not is_postgres_url(args.store):
        raise InvalidArgumentError(f"--store {display_dsn(args.store)!r} is not a Postgres URL; use "
                              "postgresql://user@host:5432/db")
    if args.catalog is not None and args.store is None:
        raise InvalidArgumentError(
            f"--catalog {args.catalog!r} names a catalog in a Postgres store, and no store is given: add --store "
            "postgresql://user@host:5432/db (or set $TOOLSEARCH_STORE), or drop --catalog"
        )
    if args.store is not None and args.index_dir is not None:
        raise InvalidArgumentError("--store and --index-dir both say where the index lives: give one of them")
    if args.catalog_poll <= 0:
        raise InvalidArgumentError(f"--catalog-poll must be a positive number of seconds, got {args.catalog_poll}")


def _store_spec(url: str) -> SessionStoreSpec:
    """The spec of the store `--session-store` names: a built-in or a plug-in of the session store registry."""
    try:
        return store_spec(url)
    except SessionStoreError as exc:
        raise InvalidArgumentError(f"--session-store is not a store this gateway knows: {exc}") from None


def worker_settings(args: argparse.Namespace) -> WorkerSettings:
    return WorkerSettings(
        session_store=args.session_store,
        session_header=args.session_header,
        session_ttl=args.session_ttl,
        index_dir=args.index_dir,
        store=args.store,
        catalog=args.catalog or "default",
        catalog_poll=args.catalog_poll,
        reuse_port=bool(args.reuse_port),
        trust_proxy_header=bool(args.trust_proxy_header),
    )


def child_argv(parser: argparse.ArgumentParser, args: argparse.Namespace, port: int) -> list[str]:
    """The command line of one worker: the parent's options (all of them, whoever added them), one worker."""
    argv = [sys.executable, "-m", "toolsearch.mcp"]
    for action in parser._actions:  # every option, so a flag added later is passed on without a change here
        # The store URL goes by environment (see run_workers): a password on a command line is visible to `ps`.
        if not action.option_strings or action.dest in (
            "help", "workers", "port", "reuse_port", "session_store", "store"
        ):
            continue
        value = getattr(args, action.dest, None)
        flag = action.option_strings[-1] if action.option_strings[-1].startswith("--") else action.option_strings[0]
        if isinstance(action, argparse._StoreTrueAction):
            argv += [flag] if value else []
        elif isinstance(action, argparse._StoreFalseAction):
            argv += [flag] if not value else []
        elif isinstance(action, argparse._AppendAction):
            for item in value or []:
                argv += [flag, str(item)]
        elif value is not None and value != action.default:
            argv += [flag, str(value)]
    if getattr(args, "quiet", False):
        argv.append("--quiet")
    return [*argv, "--port", str(port), "--reuse-port"]


class _Worker:
    def __init__(self, argv: Sequence[str], number: int, env: dict[str, str]) -> None:
        self.argv = list(argv)
        self.env = env
        self.number = number
        self.proc: subprocess.Popen[str] | None = None
        self.url: str | None = None
        self.ready = threading.Event()

    def start(self) -> None:
        self.ready.clear()
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=self.env
        )
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("ready "):
                self.url = line.split(" ", 1)[1].strip()
                self.ready.set()
        self.ready.set()  # exited: the waiter looks at the return code

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)


def _reserve_port(host: str, port: int) -> socket.socket:
    """Bind (without listening) so the port is ours for the workers' lifetime, and learn it when 0."""
    sock: socket.socket = reuse_port_socket(host, port)
    return sock


def run_workers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Start `args.workers` gateway processes on one port, restart any that dies, stop them all on a signal.

    A non-listening socket bound with SO_REUSEPORT holds the port; each worker binds its own
    listening socket to it and the kernel spreads connections between them.
    """
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ToolSearchError("--workers needs SO_REUSEPORT (Linux, BSD, macOS); run one gateway per port instead")
    configure_logging(bool(getattr(args, "quiet", False)))
    reserved = _reserve_port(args.host, args.port)
    port = int(reserved.getsockname()[1])
    argv = child_argv(parser, args, port)
    env = {**os.environ, STORE_VARIABLE: args.session_store}
    if args.store:  # by environment too, for the same reason
        env[STORE_ENV] = args.store
    workers = [_Worker(argv, i, env) for i in range(args.workers)]
    stopping = threading.Event()
    interrupted: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        interrupted.append(signum)
        stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + _READY_TIMEOUT
        for worker in workers:
            worker.ready.wait(max(0.0, deadline - time.monotonic()))
            if worker.url is None:
                code = None
                if worker.proc is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):  # alive but silent past the deadline
                        code = worker.proc.wait(5)
                raise ToolSearchError(
                    f"gateway worker {worker.number} did not start (exit code {code}); see its messages above"
                )
        url = workers[0].url
        print(f"toolsearch gateway listening on {url} ({len(workers)} workers)", file=sys.stderr, flush=True)
        while not stopping.wait(0.2):
            for worker in workers:
                if not worker.alive() and not stopping.is_set():
                    code = worker.proc.returncode if worker.proc is not None else None
                    logger.warning("gateway worker %d exited (code %s); restarting it", worker.number, code)
                    time.sleep(_RESTART_PAUSE)
                    worker.start()
    finally:
        for worker in workers:
            worker.stop()
        for worker in workers:
            if worker.proc is not None:
                try:
                    worker.proc.wait(15)
                except subprocess.TimeoutExpired:
                    worker.proc.kill()
                    worker.proc.wait(5)
        reserved.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if signal.SIGINT in interrupted:
        raise KeyboardInterrupt
    return 0
