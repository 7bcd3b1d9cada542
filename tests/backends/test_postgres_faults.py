"""The postgres backend when Postgres fails: down, restarted mid-query, hung, out of connections. Every failure is
a CatalogStoreError naming the store (never its password), never a wrong or partial list, and the same index
works again once Postgres is back."""

from __future__ import annotations

import logging
import threading

import psycopg
import pytest
from pg_server import PASSWORD, PostgresServer, own_pg_server, running_server  # noqa: F401  (own_pg_server: a fixture)

from toolsearch import Tool
from toolsearch._errors import CatalogStoreError
from toolsearch.pg import PostgresIndex

pytestmark = pytest.mark.slow

TOOLS = [
    Tool("weather_get_forecast", "Daily weather forecast for a city.", namespace="weather"),
    Tool("email_send_message", "Send an email message to recipients.", namespace="mail"),
    Tool("currency_convert", "Convert an amount of money from one currency to another.", namespace="finance"),
]


def _open(server: PostgresServer, **options: object) -> PostgresIndex:
    return PostgresIndex.open(server.dsn(), "faults", TOOLS, poll=0.2, timeout=1.0, connect_timeout=1.0,
                              **options)  # type: ignore[arg-type]


def _assert_clear(error: CatalogStoreError, server: PostgresServer) -> None:
    message = str(error)
    assert message.startswith("catalog store postgresql://***@127.0.0.1:") and str(server.port) in message
    assert PASSWORD not in message and "retry" in message


def test_postgres_down_then_back(own_pg_server: PostgresServer, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    caplog.set_level(logging.DEBUG)
    index = _open(own_pg_server)
    try:
        assert index.search("weather in Paris", 1).names == ["weather_get_forecast"]
        own_pg_server.stop()
        with pytest.raises(CatalogStoreError) as caught:
            index.search("weather in Paris", 1)
        _assert_clear(caught.value, own_pg_server)
        own_pg_server.start()
        assert index.search("weather in Paris", 1).names == ["weather_get_forecast"]  # the same index, no rebuild
    finally:
        index.close()
    assert PASSWORD not in caplog.text


def test_postgres_restarted_mid_query(own_pg_server: PostgresServer) -> None:  # noqa: F811
    index = _open(own_pg_server)
    try:
        index.search("warm up", 1)  # the model is loaded: the query below reaches Postgres at once
        own_pg_server.pause()  # the search below is then inside Postgres when the server dies
        outcome: list[object] = []
        thread = threading.Thread(target=lambda: outcome.append(_search_or_error(index)))
        thread.start()
        thread.join(0.5)
        own_pg_server.kill()
        thread.join(30)
        assert len(outcome) == 1 and isinstance(outcome[0], CatalogStoreError), outcome
        _assert_clear(outcome[0], own_pg_server)
        own_pg_server.start()
        assert index.search("send an email", 1).names == ["email_send_message"]
    finally:
        index.close()


def test_the_first_reads_after_a_restart_answer_and_record_no_outage(own_pg_server: PostgresServer) -> None:  # noqa: F811
    # Before: the retry "on a fresh connection" took another connection the restart had killed: the read failed and
    # an outage was recorded (a gateway then refuses requests for 5 s) although Postgres answered again.
    index = PostgresIndex.open(own_pg_server.dsn(), "restart", TOOLS, poll=None, timeout=3.0, connect_timeout=2.0,
                               min_connections=3)
    try:
        assert index.search("weather in Paris", 1).names == ["weather_get_forecast"]
        pool = index._pg.connector.pool
        pool.wait(timeout=30)  # its connections are all idle in the pool: the restart kills every one
        own_pg_server.restart()
        assert index.search("send an email", 1).names == ["email_send_message"]
        assert index.outage() is None
        pool.wait(timeout=30)
        own_pg_server.restart()
        # an upsert's first statement reads the stored embeddings
        index.upsert([Tool("parking_find_spot", "Find a free parking spot for a car.", namespace="travel")])
        assert "parking_find_spot" in index.catalog and index.outage() is None
    finally:
        index.close()


def _search_or_error(index: PostgresIndex) -> object:
    try:
        return index.search("convert dollars to euros", 3).names
    except CatalogStoreError as exc:
        return exc


def test_a_hung_postgres_fails_within_the_timeout(own_pg_server: PostgresServer) -> None:  # noqa: F811
    index = _open(own_pg_server)
    try:
        index.search("warm up", 1)
        own_pg_server.pause()
        try:
            with pytest.raises(CatalogStoreError) as caught:
                index.search("weather in Paris", 1)
            _assert_clear(caught.value, own_pg_server)
        finally:
            own_pg_server.resume()
        assert index.search("weather in Paris", 1).names == ["weather_get_forecast"]
    finally:
        index.close()


def test_out_of_connections() -> None:
    # 3 slots are reserved for superusers by default; with 6 in all, a few clients fill it
    with running_server(max_connections=6) as server:
        _fill_and_open(server)


def _fill_and_open(server: PostgresServer) -> None:
    hogs: list[psycopg.Connection[object]] = []
    try:
        index = _open(server)
        index.close()  # its watcher's connection is freed; its pool keeps one
        index._pg.connector.pool.close()
        while True:
            try:
                hogs.append(psycopg.connect(server.dsn(), connect_timeout=2))
            except psycopg.OperationalError:
                break
        fresh = _open(server)
        pytest.fail(f"opened with every connection taken: {fresh!r}")
    except CatalogStoreError as caught:
        _assert_clear(caught, server)
        assert "connections" in str(caught)
    finally:
        for hog in hogs:
            hog.close()
