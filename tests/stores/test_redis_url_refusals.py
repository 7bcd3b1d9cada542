"""Store URLs and Redis refusals said as what they are: a URL typed with a slash too many never shows its password,
redis-py's URL parameters are taken (a newer redis-py's too) and a query parameter a Redis client does not take (or
that breaks it) is refused up front saying why or naming the ones it takes, Redis full or a read-only replica is said
as such by every Redis client, the catalog board too (not "check that Redis is running"), a session-store plug-in whose
name has capitals is found, and the advice for two deployments on one Redis is one a gateway can follow."""

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
from toolsearch.stores.redis import RedisSessionStore, url_parameters
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


REFUSED = [
    ("prefix=blue:", "its own database number: redis://host:6379/1"),
    ("timeout=2", "only the session store has (RedisSessionStore takes it)"),  # the session store takes it: below
    ("sokcet_timeout=2", ""),
]


REFUSED_BY = [(query, hint, *client) for query, hint in REFUSED for client in CLIENTS
              if not (query.startswith("timeout=") and client[0] == "session store")]


@pytest.mark.parametrize(("query", "hint", "what", "make", "error"), REFUSED_BY,
                         ids=[f"{case[2]}-{case[0]}" for case in REFUSED_BY])
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


# redis-py's URL parameters that worked with toolsearch's Redis clients before they were checked, and work now
TAKEN = ["protocol=2", "protocol=3", "retry_on_error=TimeoutError", "lib_name=myapp&lib_version=1.0",
         "client_name=gw&health_check_interval=30&socket_keepalive=true", "encoding=utf-8&encoding_errors=strict",
         "retry_on_timeout=true&max_connections=4&socket_read_size=65536", "legacy_responses=false"]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # redis-py deprecates lib_name and lib_version
@pytest.mark.parametrize("query", TAKEN)
def test_redis_py_url_parameters_are_taken_by_every_client(query: str, tmp_path: Path) -> None:
    # Before: "toolsearch's Redis clients take no query parameter 'protocol'" (and 'retry_on_error', 'lib_name', ...)
    server = RedisServer(tmp_path).start()
    try:
        url = f"{server.url}?{query}"
        store = RedisSessionStore(url, prefix="t:")
        store.create(SessionState("user-7", allowed=frozenset(f"tool_{i}" for i in range(100))))
        assert store.update("user-7", lambda state: state).id == "user-7" and store.ids() == ["user-7"]
        usage = RedisUsageStore(url)
        usage.open_log("catalog-1")
        assert usage.catalogs() == ["catalog-1"] and usage.load("catalog-1") is not None
        board = RedisCatalogBoard(url)
        board.publish("hash-1")
        assert board.read() is not None and board.read().catalog_hash == "hash-1"  # type: ignore[union-attr]
    finally:
        server.stop()


@pytest.mark.slow
def test_the_session_store_takes_its_pool_s_timeout_from_the_url(tmp_path: Path) -> None:
    # Before: refused ("no query parameter 'timeout' (a command's timeout is socket_timeout)"), though the session
    # store's blocking pool takes it (how long a caller waits for a free connection)
    server = RedisServer(tmp_path).start()
    try:
        store = RedisSessionStore(f"{server.url}?timeout=2", prefix="t:")
        store.create(SessionState("user-7"))
        assert store.get("user-7") is not None and store._pool.timeout == 2
    finally:
        server.stop()


@pytest.mark.parametrize(("query", "why"), [
    ("decode_responses=false", "read Redis's replies as bytes"),
    ("decode_responses=true", "any value of decode_responses as on (false and 0 too)"),
    ("protocol=4", "protocol is 2 (RESP2) or 3 (RESP3)"),
    ("encoding=latin-1", "as UTF-8"),
])
@pytest.mark.parametrize(("what", "make", "error"), CLIENTS, ids=[c[0] for c in CLIENTS])
def test_a_parameter_that_breaks_the_clients_is_refused_saying_why(
    query: str, why: str, what: str, make: Callable[[str], Any], error: type[Exception]
) -> None:
    # Before the check: the usage store failed on reading a log ("'str' object has no attribute 'decode'"), redis-py
    # said "protocol must be either 2 or 3" at the first command, and a log entry in another script would not encode.
    require_redis()
    with pytest.raises(error) as caught:
        make(f"redis://127.0.0.1:{free_port()}/0?{query}")
    message = str(caught.value)
    assert f"{what} URL" in message and f"query parameter {query.split('=')[0]!r}" in message and why in message


def test_a_url_parameter_redis_py_parses_is_taken_with_no_list_of_ours_to_edit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: the allowed names were a hand copy of redis-py's, and one that a newer redis-py parses was refused
    # ("takes no query parameter 'socket_nodelay'") until someone added it to that copy.
    from redis import connection

    assert set(connection.URL_QUERY_ARGUMENT_PARSERS) <= set(url_parameters("rediss", also=("timeout",)))
    monkeypatch.setitem(connection.URL_QUERY_ARGUMENT_PARSERS, "socket_nodelay", connection.to_bool)
    monkeypatch.setitem(connection.URL_QUERY_ARGUMENT_PARSERS, "ssl_strict_chain", connection.to_bool)
    for scheme in ("redis", "rediss", "unix"):
        taken = url_parameters(scheme)
        assert "socket_nodelay" in taken and ("ssl_strict_chain" in taken) == (scheme == "rediss"), (scheme, taken)
        assert "timeout" not in taken  # the session store's pool's only (it passes it as its own)
    assert "socket_keepalive" not in url_parameters("unix") and "socket_keepalive" in url_parameters("redis")
    RedisUsageStore("redis://127.0.0.1:6379/0?socket_nodelay=true")  # nothing is sent before the first command


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
    # Before, from the board: "session store redis://... failed to record a catalog change: OutOfMemoryError: command
    # not allowed when used memory > 'maxmemory'.", with no word of what to do
    with pytest.raises(SessionStoreError) as caught:
        RedisCatalogBoard(full_redis).publish("hash-1")  # the gateway's catalog epoch, in the session store's Redis
    message = str(caught.value)
    assert "Redis is full" in message and "raise maxmemory" in message and "OutOfMemoryError" in message, message


@pytest.mark.slow
def test_a_read_only_replica_is_said_as_such(tmp_path: Path) -> None:
    server = RedisServer(tmp_path).start()
    try:
        redis.Redis(port=server.port).replicaof("127.0.0.1", free_port())  # a primary that is not there
        with pytest.raises(SessionStoreError) as caught:
            RedisSessionStore(server.url, prefix="t:").create(SessionState("user-7"))
        message = str(caught.value)
        assert "read-only replica" in message and "primary" in message and "check that Redis is running" not in message
        # Before, from the board: "... ReadOnlyError: You can't write against a read only replica.", and no fix
        with pytest.raises(SessionStoreError) as caught:
            RedisCatalogBoard(server.url).publish("hash-1")
        message = str(caught.value)
        assert "read-only replica" in message and "point the URL at the primary" in message, message
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
