"""Writers of one shared catalog in Postgres: they take turns without a false outage, a waiting build or change says
whom it waits for, a change gives up on a holder stopped mid-change (a lock, not an outage), `open` is exact under
another's upsert, a model whose dimension changed under its id rebuilds, a damaged catalog is rebuilt in place (its
readers searching on meanwhile) or removed, a private catalog does not outlive its backend, and a named one is never
dropped by a backend's `close`."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest
from mcp_servers import wait_until
from pg_server import PostgresServer, own_pg_server, pg_server, word_embedder  # noqa: F401  (fixtures)

from toolsearch import Tool, ToolIndex
from toolsearch._errors import CatalogStoreError, IndexNotFoundError
from toolsearch.embeddings import CallableEmbedder
from toolsearch.pg import PostgresIndex
from toolsearch.pg.index import remove_catalog

pytestmark = pytest.mark.slow

TOOLS = [
    Tool("weather_get_forecast", "Daily weather forecast for a city.", namespace="weather"),
    Tool("email_send_message", "Send an email message to recipients.", namespace="mail"),
    Tool("currency_convert", "Convert an amount of money from one currency to another.", namespace="finance"),
]


def _open(dsn: str, name: str, tools: list[Tool] | None = None, *, poll: float | None = None,
          **options: object) -> PostgresIndex:
    return PostgresIndex.open(dsn, name, tools, poll=poll, embedder=options.pop("embedder", word_embedder()),
                              cache=False, **options)  # type: ignore[arg-type]


class _RowLock:
    """Another session holding the catalog's row as a writer's transaction does, until `release`."""

    def __init__(self, dsn: str, name: str, *, application: str = "row lock test") -> None:
        self.conn = psycopg.connect(dsn, application_name=application)
        self.conn.execute("SELECT 1 FROM toolsearch_catalogs WHERE name = %s FOR UPDATE", (name,))
        self.pid = self.conn.info.backend_pid

    def release(self) -> None:
        self.conn.commit()
        self.conn.close()


def test_a_writer_waits_for_another_s_change_and_records_no_outage(
    pg_server: PostgresServer, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    # Before: the second writer failed after `timeout` with "the statement ran past 1 s (statement_timeout):
    # Postgres is slow or busy ... retry once Postgres answers" and recorded an outage (a gateway answers 503).
    caplog.set_level(logging.INFO, logger="toolsearch.pg")
    _open(pg_server.dsn(), "turns", TOOLS).close()
    writer = _open(pg_server.dsn(), "turns", timeout=1.0)
    other = _RowLock(pg_server.dsn(), "turns")  # another writer's long change holds the row
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(
        writer.upsert([Tool("translate_text", "Translate text between languages.")]) or "written"))
    try:
        thread.start()
        assert wait_until(lambda: "waits for its turn" in caplog.text, timeout=20), caplog.text
        assert not done  # still waiting its turn, no error
    finally:
        other.release()
        thread.join(30)
    try:
        assert done == ["written"] and "translate_text" in writer.catalog
        assert writer.outage() is None
    finally:
        writer.close()


def test_a_writer_gives_up_on_a_holder_stopped_mid_change_naming_it(
    pg_server: PostgresServer, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    # Before: the change waited with no bound (a stopped writer's transaction stays open for hours), said once at
    # INFO as "another process is writing a change to it; this change waits for its turn", naming no one.
    caplog.set_level(logging.INFO, logger="toolsearch.pg")
    _open(pg_server.dsn(), "stalled", TOOLS).close()
    writer = _open(pg_server.dsn(), "stalled", timeout=0.3, lock_wait=1.5)
    stopped = _RowLock(pg_server.dsn(), "stalled", application="stopped writer")  # idle in its transaction
    outcome: list[BaseException | str] = []

    def upsert() -> None:
        try:
            writer.upsert([Tool("translate_text", "Translate text between languages.")])
            outcome.append("written")
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=upsert, daemon=True)
    try:
        thread.start()
        thread.join(20)
        assert outcome, "the change still waits for a holder that runs nothing"
    finally:
        stopped.release()
        thread.join(30)
    try:
        error = outcome[0]
        assert isinstance(error, CatalogStoreError) and error.outage is False, error
        said = str(error)
        assert "a lock, not an outage" in said and f"PID {stopped.pid}" in said and "'stopped writer'" in said, said
        assert f"pg_terminate_backend({stopped.pid})" in said and writer.outage() is None
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("waits for its turn" in m and f"PID {stopped.pid}" in m for m in warned), warned
        writer.upsert([Tool("translate_text", "Translate text between languages.")])  # the holder gone, it writes
        assert "translate_text" in writer.catalog
    finally:
        writer.close()


def test_a_writer_waits_on_for_a_holder_that_runs_a_statement(pg_server: PostgresServer) -> None:  # noqa: F811
    # A change of many tools holds the catalog for minutes, running statements all along: it is waited for past
    # lock_wait (only a holder that runs nothing is given up on).
    _open(pg_server.dsn(), "busy", TOOLS).close()
    writer = _open(pg_server.dsn(), "busy", timeout=0.3, lock_wait=1.0)
    busy = _RowLock(pg_server.dsn(), "busy")
    running = threading.Thread(target=lambda: (busy.conn.execute("SELECT pg_sleep(3)"), busy.release()))
    try:
        running.start()
        started = time.monotonic()
        writer.upsert([Tool("translate_text", "Translate text between languages.")])
        assert time.monotonic() - started > 1.0 and "translate_text" in writer.catalog
    finally:
        running.join(30)
        writer.close()


def test_a_lock_held_past_the_timeout_is_no_outage(pg_server: PostgresServer) -> None:  # noqa: F811
    _open(pg_server.dsn(), "held", TOOLS).close()
    other = _RowLock(pg_server.dsn(), "held")
    try:
        with pytest.raises(CatalogStoreError) as caught:
            remove_catalog(pg_server.dsn(), "held", timeout=1.0)
    finally:
        other.release()
    # Before (as a writer's wait was): "Postgres is slow or busy ...; retry once Postgres answers", an outage
    assert "another process held a lock" in str(caught.value) and caught.value.outage is False


def test_a_build_that_waits_for_another_says_which_process_holds_it(
    pg_server: PostgresServer, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    # Before: it waited on the build lock without a word (and without a bound) while the holder's embedding hung.
    caplog.set_level(logging.INFO, logger="toolsearch.pg")
    model = "gated-32"  # embeddings of its own: the holder's new tool is embedded, never found stored
    _open(pg_server.dsn(), "locked", TOOLS[:1], embedder=word_embedder(model_id=model)).close()
    wanted = [TOOLS[0], Tool("locked_report_make", "Make the report only the build-lock test adds.")]
    gate, embedding = threading.Event(), threading.Event()
    holder, held = _build_in_thread(pg_server.dsn(), "locked", wanted, model, gate=gate, entered=embedding)
    try:
        assert embedding.wait(30)  # it holds the build lock while its embedding waits for the gate
        waiter, outcome = _build_in_thread(pg_server.dsn(), "locked", wanted, model, timeout=1.0)
        assert wait_until(lambda: "for another process's build or sync of it to end" in caplog.text, timeout=20)
        said = caplog.text
        assert f"toolsearch build lock ({socket.gethostname()}, pid {os.getpid()})" in said and "PID" in said, said
        assert not outcome  # still waiting, neither built nor failed
    finally:
        gate.set()
        holder.join(30)
    waiter.join(30)
    [built] = held
    assert isinstance(built, PostgresIndex) and built.wrote, built
    built.close()
    [index] = outcome
    assert isinstance(index, PostgresIndex) and sorted(index.catalog.names) == sorted(t.name for t in wanted), index
    assert not index.wrote  # the holder's build was the one
    index.close()


def test_a_host_name_that_is_not_utf8_names_the_build_lock_and_builds(
    pg_server: PostgresServer, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    from toolsearch.pg.index import _advisory_lock

    # Linux lets a host name be any bytes; Python reads a Latin-1 `café-box` with a surrogate escape
    monkeypatch.setattr(socket, "gethostname", lambda: "caf\udce9-box")
    index = _open(pg_server.dsn(), "cafe", TOOLS)  # before: UnicodeEncodeError naming the build lock's connection
    assert index.wrote and sorted(index.catalog.names) == sorted(t.name for t in TOOLS)
    with _advisory_lock(index._pg.connector, "cafe"), psycopg.connect(pg_server.dsn()) as other:
        names = [row[0] for row in other.execute("SELECT application_name FROM pg_stat_activity")]
    assert f"toolsearch build lock (caf\\udce9-box, pid {os.getpid()})" in names, names  # as the local lock signs it
    index.close()
    remove_catalog(pg_server.dsn(), "cafe")


def _build_in_thread(dsn: str, name: str, tools: list[Tool], model: str, *, gate: threading.Event | None = None,
                     entered: threading.Event | None = None, **options: object) -> tuple[
        threading.Thread, list[BaseException | PostgresIndex]]:
    """A build of `name` in a thread of its own; its outcome (the index, or what it raised) lands in the list. With
    `gate`, its embedding sets `entered` and waits for the gate (a holder of the build lock, busy meanwhile)."""
    outcome: list[BaseException | PostgresIndex] = []

    def build() -> None:
        try:
            embedder = word_embedder(model_id=model, gate=gate, entered=entered)
            outcome.append(_open(dsn, name, tools, embedder=embedder, **options))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=build, daemon=True)
    thread.start()
    return thread, outcome


def test_a_busy_builder_is_waited_for_past_lock_wait(pg_server: PostgresServer) -> None:  # noqa: F811
    # Its lock connection runs no statement while it embeds; its beat is what tells the waiter it is alive. Without
    # the beat, a waiter would give up on a build that takes longer than lock_wait (one of many tools on a slow
    # machine), as one given up on a hung builder.
    model = "busy-32"  # embeddings of its own: the holder's new tool is embedded, never found stored
    _open(pg_server.dsn(), "busy-build", TOOLS[:1], embedder=word_embedder(model_id=model)).close()
    _waiter_outlasts_a_busy_build(pg_server.dsn(), pg_server.dsn(), "busy-build", model)


def _waiter_outlasts_a_busy_build(holder_dsn: str, waiter_dsn: str, name: str, model: str) -> None:
    """A build of `name` holds the build lock while its embedding waits on a gate (busy, beating); another, with
    lock_wait 3 s (the shortest taken), waits twice that long without giving up, and builds once the gate opens."""
    wanted = [TOOLS[0], Tool(f"{model.split('-')[0]}_report_make", "Make the report only this test adds.")]
    gate, embedding = threading.Event(), threading.Event()
    holder, held = _build_in_thread(holder_dsn, name, wanted, model, gate=gate, entered=embedding)
    try:
        assert embedding.wait(30)  # it holds the build lock while its embedding waits on the gate
        waiter, outcome = _build_in_thread(waiter_dsn, name, wanted, model, timeout=0.3, lock_wait=3.0)
        waiter.join(6)  # twice lock_wait
        assert not outcome, f"a waiter gave up on a builder that is busy, not hung: {outcome}"
    finally:
        gate.set()
        holder.join(30)
    waiter.join(30)
    [built] = held
    assert isinstance(built, PostgresIndex) and built.wrote, built
    built.close()
    [index] = outcome
    assert isinstance(index, PostgresIndex) and sorted(index.catalog.names) == sorted(t.name for t in wanted)
    index.close()


_STOPPED_BUILDER = """
import sys, threading
sys.path.insert(0, sys.argv[3])
from pg_server import word_embedder
from toolsearch import Tool
from toolsearch.pg import PostgresIndex

gate, entered = threading.Event(), threading.Event()
tools = [Tool("stopped_report_make", "Make the report only the stopped-builder test adds.")]
threading.Thread(target=lambda: PostgresIndex.open(sys.argv[1], sys.argv[2], tools, poll=None, cache=False,
    embedder=word_embedder(model_id="stopped-32", gate=gate, entered=entered)), daemon=True).start()
entered.wait(60)
print("embedding", flush=True)  # it holds the build lock now
gate.wait(600)
"""


def test_a_build_gives_up_on_a_stopped_builder_after_lock_wait_naming_it(
    pg_server: PostgresServer, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    # Before: a second build waited on the build lock forever behind a builder stopped mid-build (SIGSTOP, a paused
    # VM), logging a warning every minute and never failing.
    caplog.set_level(logging.INFO, logger="toolsearch.pg")
    tests_dir = str(Path(__file__).resolve().parents[1])
    builder = subprocess.Popen([sys.executable, "-c", _STOPPED_BUILDER, pg_server.dsn(), "stopped", tests_dir],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert builder.stdout is not None and builder.stdout.readline().strip() == "embedding"
        os.kill(builder.pid, signal.SIGSTOP)  # its beat stops with it; its connection, and the lock, stay
        waiter, outcome = _build_in_thread(pg_server.dsn(), "stopped", TOOLS[:1], "stopped-32", timeout=0.3,
                                           lock_wait=3.0)  # the shortest silence taken for a stop: six beats
        waiter.join(30)
        assert outcome, "the build still waits for the build lock of a builder that is stopped"
    finally:
        builder.kill()  # a stopped process is killed all the same
        builder.wait(30)
    error = outcome[0]
    assert isinstance(error, CatalogStoreError) and error.outage is False, error
    said = str(error)
    assert f"toolsearch build lock ({socket.gethostname()}, pid {builder.pid})" in said, said
    assert "no sign of life" in said and "lock_wait" in said and "3 s" in said and "pg_terminate_backend(" in said
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("for another process's build or sync of it to end" in m for m in warned), warned  # the word stays
    assert wait_until(lambda: _try_open(pg_server.dsn(), "stopped") is not None, timeout=30)  # the lock went with it


def _try_open(dsn: str, name: str) -> PostgresIndex | None:
    try:
        index = _open(dsn, name, TOOLS[:1], embedder=word_embedder(model_id="stopped-32"), lock_wait=1.5)
    except CatalogStoreError:
        return None
    index.close()
    return index


def test_open_is_exact_when_another_writer_upserts_while_it_embeds(pg_server: PostgresServer) -> None:  # noqa: F811
    # Before: the upsert that landed while `open` embedded its new tool survived it.
    model = "race-32"  # embeddings of its own: the new tool is embedded, never found stored
    _open(pg_server.dsn(), "open-race", TOOLS[:2], embedder=word_embedder(model_id=model)).close()
    other = _open(pg_server.dsn(), "open-race", embedder=word_embedder(model_id=model))
    plain = word_embedder(model_id=model)
    interfered: list[bool] = []

    def embed(texts: list[str]) -> np.ndarray:
        if not interfered:
            interfered.append(True)
            other.upsert([Tool("crypto_get_price", "Latest price of a cryptocurrency.")])
        return np.asarray(plain.embed(texts))

    try:
        opened = _open(pg_server.dsn(), "open-race", TOOLS,
                       embedder=CallableEmbedder(embed, model_id=model, dimension=32))
        opened.close()
        assert interfered
        fresh = _open(pg_server.dsn(), "open-race", embedder=word_embedder(model_id=model))
        try:
            assert sorted(fresh.catalog.names) == sorted(t.name for t in TOOLS)
        finally:
            fresh.close()
    finally:
        other.close()


def test_a_model_whose_dimension_changed_under_its_id_builds_under_another_name(
    pg_server: PostgresServer  # noqa: F811
) -> None:
    # Before: the build failed ("Postgres refused the statement (DataException) (expected 64 dimensions, not 32)"),
    # since the stored embeddings of the old model were taken for the new one's, and left an empty catalog behind.
    _open(pg_server.dsn(), "dims-32", TOOLS, embedder=word_embedder(32, "dims-model")).close()
    wider = _open(pg_server.dsn(), "dims-64", TOOLS, embedder=word_embedder(64, "dims-model"))
    try:
        assert wider.search("weather forecast for Paris", 1).names == ["weather_get_forecast"]
    finally:
        wider.close()
    narrow = _open(pg_server.dsn(), "dims-32", embedder=word_embedder(32, "dims-model"))  # the old one still serves
    try:
        assert narrow.search("send an email", 1).names == ["email_send_message"]
    finally:
        narrow.close()


def test_a_damaged_catalog_is_rebuilt_in_place_and_can_be_removed(pg_server: PostgresServer) -> None:  # noqa: F811
    # Before: nothing could follow the advice "build the catalog again": an open with the same tools wrote nothing,
    # and no call removed a catalog.
    dsn = pg_server.dsn()
    _open(dsn, "damaged", TOOLS).close()
    follower = _open(dsn, "damaged", poll=0.2)
    try:
        catalog_id = follower._pg.row.id  # type: ignore[union-attr]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE toolsearch_postings_{catalog_id}")
        with pytest.raises(CatalogStoreError, match=r"UndefinedTable.*--rebuild"):
            follower.search("send an email", 1)
        before = follower.version
        rebuilt = _open(dsn, "damaged", TOOLS, rebuild=True)
        try:
            assert rebuilt.wrote and rebuilt.version == before + 1
            assert rebuilt.search("send an email", 1).names == ["email_send_message"]
        finally:
            rebuilt.close()
        assert wait_until(lambda: follower.version == before + 1, timeout=20)  # it follows the rebuild
        assert follower.search("convert dollars to euros", 1).names == ["currency_convert"]
    finally:
        follower.close()
    remove_catalog(dsn, "damaged")
    with pytest.raises(IndexNotFoundError, match="no catalog 'damaged'"):
        _open(dsn, "damaged")
    with pytest.raises(IndexNotFoundError, match="no catalog 'damaged'"):
        remove_catalog(dsn, "damaged")


def test_a_rebuild_leaves_readers_searching_until_its_swap(pg_server: PostgresServer) -> None:  # noqa: F811
    # Before: the rebuild dropped the catalog's tables first, so every search of a worker following it waited for the
    # whole rebuild and failed past `timeout` as an outage ("the statement ran past 0.5 s (statement_timeout):
    # Postgres is slow or busy").
    dsn = pg_server.dsn()
    _open(dsn, "swapped", TOOLS).close()
    reader = _open(dsn, "swapped", poll=0.2, timeout=0.5)
    before = reader.version
    blocker = psycopg.connect(dsn)  # holds the rebuild just before it records its change: its tables are written
    blocker.execute("LOCK TABLE toolsearch_changes IN SHARE MODE")
    rebuilding = threading.Thread(target=lambda: _open(dsn, "swapped", TOOLS, rebuild=True).close())

    def rebuild_waits() -> bool:
        with psycopg.connect(dsn) as conn:
            return bool(conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                     "AND query LIKE 'INSERT INTO toolsearch_changes%'").fetchone()[0])

    try:
        rebuilding.start()
        assert wait_until(rebuild_waits, timeout=30)
        for _ in range(3):
            assert reader.search("send an email", 1).names == ["email_send_message"]
            time.sleep(0.3)
        assert reader.outage() is None and reader.version == before
    finally:
        blocker.commit()
        blocker.close()
        rebuilding.join(30)
    try:
        assert wait_until(lambda: reader.version == before + 1, timeout=20)  # it reads the rebuilt catalog
        assert reader.search("convert dollars to euros", 1).names == ["currency_convert"]
    finally:
        reader.close()


def test_close_never_drops_a_named_catalog_removed_and_built_again(pg_server: PostgresServer) -> None:  # noqa: F811
    # Before: the follower's upsert went into the catalog built again under the name (another id), which made the
    # backend take it for a copy of its own, and `close()` dropped it for every worker; its searches failed with
    # "Postgres refused the statement (UndefinedTable) ... build it again (--rebuild)".
    dsn = pg_server.dsn()
    _open(dsn, "refound", TOOLS).close()
    follower = _open(dsn, "refound")
    remove_catalog(dsn, "refound")
    _open(dsn, "refound", TOOLS).close()
    with pytest.raises(IndexNotFoundError, match=r"was removed from .*open it again"):
        follower.search("send an email", 1)
    with pytest.raises(IndexNotFoundError, match="removed and built again since this process opened it"):
        follower.upsert([Tool("translate_text", "Translate text between languages.")])
    follower.close()
    follower._pg.close()
    fresh = _open(dsn, "refound")
    try:
        assert sorted(fresh.catalog.names) == sorted(t.name for t in TOOLS)
    finally:
        fresh.close()


def test_a_copy_of_a_frozen_catalog_goes_with_its_backend(pg_server: PostgresServer, tmp_path: Path) -> None:  # noqa: F811
    dsn = pg_server.dsn()
    saved = ToolIndex.build(TOOLS, "postgres", dsn=dsn, embedder=word_embedder(), cache=False)
    saved.save(tmp_path / "frozen")
    saved.backend.close()  # type: ignore[attr-defined]
    before = _private_catalogs(dsn)
    loaded = ToolIndex.load(tmp_path / "frozen", dsn=dsn, embedder=word_embedder(), cache=False)
    loaded.upsert([Tool("translate_text", "Translate text between languages.")])  # copies the frozen catalog
    assert len(_private_catalogs(dsn)) == len(before) + 1
    loaded.backend.close()  # type: ignore[attr-defined]
    assert _private_catalogs(dsn) == before  # the copy goes, the frozen one stays for the saved index


def _private_catalogs(dsn: str) -> list[tuple[str, bool]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT name, frozen FROM toolsearch_catalogs WHERE name LIKE 'private-%' "
                            "ORDER BY name").fetchall()


def test_a_private_catalog_goes_with_its_backend_unless_saved(pg_server: PostgresServer, tmp_path: Path) -> None:  # noqa: F811
    # Before: every ToolIndex.build(..., "postgres") left a catalog and three tables behind for good.
    dsn = pg_server.dsn()
    before = _private_catalogs(dsn)
    index = ToolIndex.build(TOOLS, "postgres", dsn=dsn, embedder=word_embedder(), cache=False)
    assert index.search("weather in Paris", 1).names == ["weather_get_forecast"]
    assert len(_private_catalogs(dsn)) == len(before) + 1
    index.backend.close()  # type: ignore[attr-defined]
    assert _private_catalogs(dsn) == before
    saved = ToolIndex.build(TOOLS, "postgres", dsn=dsn, embedder=word_embedder(), cache=False)
    saved.save(tmp_path / "saved")
    saved.backend.close()  # type: ignore[attr-defined]
    kept = [row for row in _private_catalogs(dsn) if row not in before]
    assert len(kept) == 1 and kept[0][1] is True  # the saved one stays, frozen, for the index that names it


def test_a_busy_builder_another_role_cannot_see_is_waited_for(own_pg_server: PostgresServer,  # noqa: F811
                                                              caplog: pytest.LogCaptureFixture) -> None:
    # Before: a waiter whose role may not see the holder's session state (no pg_read_all_stats: a CI role and a
    # gateway role) took the unseen beat for silence and gave up on a busy build after lock_wait, telling the
    # operator to stop it.
    caplog.set_level(logging.INFO, logger="toolsearch.pg")
    superuser = own_pg_server.dsn()
    model = "unseen-32"
    with psycopg.connect(superuser, autocommit=True) as conn:
        for role in ("builder", "waiter"):
            conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw' IN ROLE pg_read_all_data, pg_write_all_data")
        conn.execute("GRANT ALL ON SCHEMA public TO builder, waiter")
    _open(superuser, "unseen", TOOLS[:1], embedder=word_embedder(model_id=model)).close()  # its tables, made once
    with psycopg.connect(superuser, autocommit=True) as conn:
        conn.execute("GRANT ALL ON ALL TABLES IN SCHEMA public TO builder, waiter; "
                     "GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO builder, waiter")

    def as_role(role: str) -> str:
        return f"postgresql://{role}:pw@127.0.0.1:{own_pg_server.port}/postgres"

    _waiter_outlasts_a_busy_build(as_role("builder"), as_role("waiter"), "unseen", model)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "this role cannot see whether that session is alive" in said and "pg_read_all_stats" in said, said
