"""A real redis-server for tests: started on a free port in a temp folder, stopped, killed, paused, restarted."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

BINARY = shutil.which("redis-server") or ("/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None)


def require_redis() -> str:
    """The redis-server binary, or a skip that says how to get it (CI installs it: .ci/setup.d)."""
    if BINARY is None:
        pytest.skip("redis-server not found: install Debian's redis-server package (.ci/setup.d/redis-server.sh)")
    import redis  # noqa: F401  (a required test dependency: the `redis` extra; fail loudly when it is missing)

    return BINARY


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server process; `persistent` turns on the append-only file, synced on every write."""

    def __init__(self, folder: Path, *, persistent: bool = False, password: str | None = None) -> None:
        self.binary = require_redis()
        self.folder = folder
        self.port = free_port()
        self.persistent = persistent
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder)]
        args += ["--save", "", "--daemonize", "no", "--logfile", str(self.folder / "redis.log")]
        args += ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1)
        deadline = time.monotonic() + 20
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                log = (self.folder / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited with {self.process.returncode}:\n{log}")
            try:
                client.ping()
                client.close()
                return
            except redis.exceptions.BusyLoadingError:
                pass
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.02)

    def client(self):  # type: ignore[no-untyped-def]
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=5)

    def kill(self) -> None:
        """SIGKILL: the server dies at once (an append-only file keeps what was written)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def pause(self) -> None:
        """SIGSTOP: connections stay open but nothing answers (a slow or hung Redis)."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.resume()
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
