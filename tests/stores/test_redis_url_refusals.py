"""Store URLs and Redis refusals said as what they are: a URL typed with a slash too many never shows its password,
a query parameter the Redis clients do not all take is refused up front naming the ones they take, Redis full or a
read-only replica is said as such (not "check that Redis is running"), a session-store plug-in whose name has
capitals is found, and the advice for two deployments on one Redis is one a gateway can follow."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from plugin_site import write_distribution
from redis_server import RedisServer, free_port, require_redis

from toolsearch._errors import CatalogStoreError, SessionStoreError, UsageError
from toolsearch.mcp.shared import RedisCatalogBoard
from toolsearch.pg import PostgresIndex
from toolsearch.plugins import rescan
from toolsearch.stores import SessionState, store_from_url, usage_store_from_url
from toolsearch.stores._state import decode_state
from toolsearch.stores.redis import RedisSessionStore
from toolsearch.stores.usage_redis import RedisUsageStore

SECRET = "s3cretPW42"

CLIENTS: list[tuple[str, Callable[[str], Any], type[Exception]]] = [
    ("session store", lambda url: store_from_url(url, ttl_seconds=60, timeout=0.3), SessionStoreError),
    ("usage store", lambda url: RedisUsageStore(url, timeout=0.3), UsageError),
    ("catalog board", lambda url: RedisCatalogBoard(url, timeout=0.3), SessionStoreError),
]


@pytest.mark.parametrize(("what", "make", "error"), CLIENTS, ids=[c[0] for c in CLIENTS])
def test_a_url_with_a_slash_too_many_never_shows_its_password(
    what: str, make: Callable[[str], Any], error: type[Exception]
) -> None:
    # Before: "session store URL 'redis:///alice:s3cretPW42@cache.internal:6379/0' cannot be read ..."
    require_redis()
    with pytest.raises(error) as caught:
        make(f"redis:///alice:{SECRET}@cache.internal:6379/0")
    assert SECRET not in str(caught.value) and "redis://***@cache.internal:6379/0" in str(caught.value)


def test_a_postgres_url_with_a_slash_too_many_never_shows_its_password() -> None:
    with pytest.raises(CatalogStoreError) as caught:
        PostgresIndex.open(f"postgresql:///alice:{SECRET}@db.internal:5432/tools", "prod")
    assert SECRET not in str(caught.value) and "postgresql://***@db.internal:5432/tools" in str(caught.value)


@pytest.mark.parametrize(("query", "hint"), [
    ("prefix=blue:", "its own database number: redis://host:6379/1"),
    ("timeout=2", "socket_timeout"),
    ("sokcet_timeout=2", ""),
])
@pytest.mark.parametrize(("what", "make", "error"), CLIENTS, ids=[c[0] for c in CLIENTS])
def test_a_query_parameter_the_clients_do_not_take_is_refused_naming_the_ones_they_do(
    query: str, hint: str, what: str, make: Callable[[str], Any], error: type[Exception]
) -> None:
    # Before: a bare TypeError at the first command ("AbstractConnection.__init__() got an unexpected keyword
    # argument 'prefix'"), or a store that works beside a usage store that does not (`?timeout=`).
    require_redis()
    name = query.split("=", 1)[0]
    with pytest.raises(error) as caught:
        make(f"redis://127.0.0.1:{free_port()}/0?{query}")
    message = str(caught.value)
    assert f"{what} URL" in message and f"no query parameter {name!r}" in message and hint in message, message
    assert "socket_timeout, socket_connect_timeout" in message


@pytest.mark.slow
def test_the_query_parameters_the_clients_take_are_taken(tmp_path: Path) -> None:
    server = RedisServer(tmp_path).start()
    try:
        url = f"{server.url}?socket_timeout=2&socket_connect_timeout=2&health_check_interval=30&client_name=gw"
        store = store_from_url(url)
        assert store.get("nobody") is None
        assert usage_store_from_url(url).catalogs() == []  # type: ignore[attr-defined]
        assert RedisCatalogBoard(url).read() is None
    finally:
        server.stop()


@pytest.mark.slow
def test_a_gateway_refuses_such_a_url_at_start_with_its_own_error(tmp_path: Path) -> None:
    # Before: "toolsearch: error: unexpected ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)
    # (rerun with --debug for the traceback, and please report it)"
    config = tmp_path / "servers.json"
    time_server = {"command": sys.executable, "args": ["-m", "mcp_server_time"]}
    config.write_text(json.dumps({"mcpServers": {"time": time_server}}))
    run = subprocess.run(
        [sys.executable, "-m", "toolsearch", "mcp", "serve", "--config", str(config), "--transport", "http",
         "--port", "0", "--backend", "bm25", "--session-store", f"redis://127.0.0.1:{free_port()}/0?timeout=2"],
        capture_output=True, text=True, timeout=120,
    )
    last = run.stderr.strip().splitlines()[-1]
    assert run.returncode == 1 and "no query parameter 'timeout'" in last and "please report" not in last, last


@pytest.fixture()
def full_redis(tmp_path: Path) -> Iterator[str]:
    """A Redis under maxmemory with nothing it may evict, filled up."""
    server = RedisServer(tmp_path).start()
    client = redis.Redis(port=server.port)
    client.config_set("maxmemory", "1mb")
    client.config_set("maxmemory-policy", "noeviction")
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for i in range(10_000):
            client.set(f"filler:{i}", "x" * 10_000)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.mark.slow
def test_a_full_redis_is_said_as_full(full_redis: str) -> None:
    # Before: "... OutOfMemoryError: Command # 1 (SET t:session:user-7 {"schema":1,...) of pipeline caused error:
    # command not allowed when used memory > 'maxmemory'. (timeout 1 s); check that Redis is running and reachable"
    with pytest.raises(SessionStoreError) as caught:
        RedisSessionStore(full_redis, prefix="t:").create(SessionState("user-7"))
    message = str(caught.value)
    assert "Redis is full" in message and "maxmemory" in message and "check that Redis is running" not in message
    assert "user-7" not in message and "schema" not in message  # the pipeline's command (a session) is not quoted
    with pytest.raises(UsageError, match="Redis is full"):
        usage = RedisUsageStore(full_redis)
        usage.save(usage.open_log("catalog-1"))


@pytest.mark.slow
def test_a_read_only_replica_is_said_as_such(tmp_path: Path) -> None:
    server = RedisServer(tmp_path).start()
    try:
        redis.Redis(port=server.port).replicaof("127.0.0.1", free_port())  # a primary that is not there
        with pytest.raises(SessionStoreError) as caught:
            RedisSessionStore(server.url, prefix="t:").create(SessionState("user-7"))
        message = str(caught.value)
        assert "read-only replica" in message and "primary" in message and "check that Redis is running" not in message
    finally:
        server.stop()


def test_the_advice_for_two_deployments_on_one_redis_is_one_a_gateway_can_follow() -> None:
    # Before: "... or point this deployment at its own key prefix", which `mcp serve` has no option for
    later = json.dumps({"schema": 99, "id": "h-new"})
    with pytest.raises(SessionStoreError) as caught:
        decode_state(later, "key 'toolsearch:session:h-new' in redis://127.0.0.1:6379/0")
    assert "another database number in its URL (redis://host:6379/1" in str(caught.value)


def test_a_session_store_plugin_whose_name_has_capitals_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: "unknown session store URL 'AcmeDB://host/0' ... (the known schemes: memory, redis, rediss, unix, AcmeDB)"
    entry_points = {"toolsearch.session_stores": {"AcmeDB": "acme_store:open_store"}}
    site = write_distribution(tmp_path, "acme-store", entry_points,
                              acme_store="from toolsearch.stores import InMemorySessionStore\n"
                                         "def open_store(url, *, ttl_seconds=None, **options):\n"
                                         "    return InMemorySessionStore(ttl_seconds=ttl_seconds)\n")
    monkeypatch.syspath_prepend(str(site))
    rescan()
    try:
        for url in ("AcmeDB://host/0", "acmedb://host/0"):
            assert type(store_from_url(url)).__name__ == "InMemorySessionStore"
        assert type(usage_store_from_url("AcmeDB://host/0")).__name__ == "InMemoryUsageStore"  # kept as memory's
    finally:
        sys.modules.pop("acme_store", None)
        monkeypatch.undo()
        rescan()
