"""A throwaway redis-server for the benchmarks that compare session stores (sessions, gateway)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

__all__ = ["local_redis", "redis_version"]


@contextlib.contextmanager
def local_redis() -> Iterator[str | None]:
    """A throwaway redis-server on a free loopback port (None when the binary is not installed)."""
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="toolsearch-redis-") as folder:
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", folder, "--save", "", "--appendonly", "no"]
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"redis://127.0.0.1:{port}/0"
            _wait_for_redis(url, process)
            yield url
        finally:
            process.terminate()
            process.wait(10)


def _wait_for_redis(url: str, process: subprocess.Popen[bytes]) -> None:
    from toolsearch.stores import RedisSessionStore

    store = RedisSessionStore(url, timeout=0.5)
    deadline = time.monotonic() + 20
    while True:
        try:
            store.ping()
            store.close()
            return
        except Exception:
            if process.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def redis_version(url: str) -> str:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=2)
    try:
        return str(client.info("server").get("redis_version", "?"))
    finally:
        client.close()
