"""`--store` on the commands around a catalog in Postgres: a damaged catalog is rebuilt with `build --rebuild`, removed
with `rm --store`, a catalog name `mcp serve --catalog` takes is taken by build, query and rm, `--backend` is refused
beside `--store`, and a command that takes no `--store` refuses it without showing the DSN's password (a URL's, or a
keyword DSN's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from pg_server import PASSWORD, PostgresServer, pg_server  # noqa: F401  (a fixture)

from toolsearch import Tool

TOOLS = [
    Tool("weather_get_forecast", "Daily weather forecast for a city.", namespace="weather"),
    Tool("email_send_message", "Send an email message to recipients.", namespace="mail"),
]


def _cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolsearch", *args], cwd=folder, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_build_rebuild_writes_a_catalog_anew_and_rm_removes_it(pg_server: PostgresServer, tmp_path: Path) -> None:  # noqa: F811
    # Before: `build --rebuild` answered "reused index" (exit 0), so a catalog whose tables were damaged stayed
    # broken (PostgresIndex.open(..., rebuild=True), which it runs now, mends one: test_postgres_writers.py);
    # `--backend bm25` was ignored; `rm` took no --store.
    (tmp_path / "tools.json").write_text(json.dumps([t.to_dict() for t in TOOLS]))
    dsn = pg_server.dsn()
    built = _cli(tmp_path, "build", "tools.json", "--store", dsn, "--name", "mended", "--json")
    assert built.returncode == 0, built.stderr
    rebuilt = _cli(tmp_path, "build", "tools.json", "--store", dsn, "--name", "mended", "--rebuild", "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    again = json.loads(rebuilt.stdout)
    assert again["reused"] is False and again["version"] == json.loads(built.stdout)["version"] + 1
    other = _cli(tmp_path, "build", "tools.json", "--store", dsn, "--name", "mended", "--backend", "bm25")
    assert other.returncode == 2 and "--backend bm25 does not apply with --store" in other.stderr
    removed = _cli(tmp_path, "rm", "mended", "--store", dsn)
    assert removed.returncode == 0 and "removed catalog 'mended'" in removed.stdout, removed.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM toolsearch_catalogs WHERE name = 'mended'").fetchone()[0] == 0
    gone = _cli(tmp_path, "rm", "mended", "--store", dsn)
    assert gone.returncode == 1 and "no catalog 'mended'" in gone.stderr
    for done in (built, rebuilt, other, removed, gone):
        assert PASSWORD not in done.stdout + done.stderr


@pytest.mark.parametrize("command", [["info", "prod"], ["list"], ["eval", "prod", "--queries", "q.jsonl"]])
def test_a_command_without_store_refuses_it_without_the_password(command: list[str], tmp_path: Path) -> None:
    # Before: "toolsearch: error: unrecognized arguments: --store postgresql://alice:s3cretPW42@db.internal:5432/tools"
    secret = "s3cretPW42"
    run = _cli(tmp_path, *command, "--store", f"postgresql://alice:{secret}@db.internal:5432/tools")
    assert run.returncode == 2 and secret not in run.stderr, run.stderr
    assert "--store postgresql://***@db.internal:5432/tools" in run.stderr
    assert f"`toolsearch {command[0]}` reads no catalog in Postgres: --store goes with build, query, rm" in run.stderr


@pytest.mark.slow
def test_a_catalog_named_as_the_gateway_names_it_is_built_queried_and_removed(
    pg_server: PostgresServer, tmp_path: Path  # noqa: F811
) -> None:
    # Before: "invalid index name 'fleet:blue': use 1 to 128 letters, digits, '.', '_' and '-' ..." (exit 2) from
    # build, query and rm, though `mcp serve --catalog fleet:blue` makes that catalog
    (tmp_path / "tools.json").write_text(json.dumps([t.to_dict() for t in TOOLS]))
    dsn = pg_server.dsn()
    built = _cli(tmp_path, "build", "tools.json", "--store", dsn, "--name", "fleet:blue")
    assert built.returncode == 0, built.stderr
    found = _cli(tmp_path, "query", "fleet:blue", "weather in Paris", "--store", dsn, "--json")
    assert found.returncode == 0 and "weather_get_forecast" in found.stdout, found.stderr
    removed = _cli(tmp_path, "rm", "fleet:blue", "--store", dsn)
    assert removed.returncode == 0 and "removed catalog 'fleet:blue'" in removed.stdout, removed.stderr
    empty = _cli(tmp_path, "rm", " ", "--store", dsn)
    assert empty.returncode == 2 and "invalid catalog name ' ' (NAME): give a name that is not empty" in empty.stderr
    local = _cli(tmp_path, "rm", "fleet:blue")  # a local index's name is a folder's: the folder rule holds there
    assert local.returncode == 2 and "invalid index name 'fleet:blue'" in local.stderr


def test_a_keyword_dsn_given_to_a_command_without_store_is_refused_without_its_password(tmp_path: Path) -> None:
    # Before: "unrecognized arguments: --store host=db.internal user=alice password=s3cretPW42 dbname=tools; ..."
    run = _cli(tmp_path, "info", "prod", "--store", "host=db.internal user=alice password=s3cretPW42 dbname=tools")
    assert run.returncode == 2 and "s3cretPW42" not in run.stderr, run.stderr
    assert "--store host=db.internal user=alice password=*** dbname=tools" in run.stderr
    joined = _cli(tmp_path, "info", "prod", "--store=postgresql://alice:s3cretPW42@db.internal/tools")
    assert joined.returncode == 2 and "s3cretPW42" not in joined.stderr  # and it says where --store goes:
    assert "`toolsearch info` reads no catalog in Postgres: --store goes with build, query, rm" in joined.stderr


@pytest.mark.slow
def test_lock_wait_bounds_build_and_rm_behind_a_silent_holder(pg_server: PostgresServer, tmp_path: Path) -> None:  # noqa: F811
    # Before: neither command took --lock-wait, so from a shell the wait behind a stopped builder was the default
    # (ten times the timeout, at least a minute) whatever the operator wanted.
    from toolsearch.pg.index import _LOCK_SPACE, _advisory_lock

    (tmp_path / "tools.json").write_text(json.dumps([t.to_dict() for t in TOOLS]))
    dsn = pg_server.dsn()
    assert _cli(tmp_path, "build", "tools.json", "--store", dsn, "--name", "held").returncode == 0
    with psycopg.connect(dsn, application_name="silent holder of the test", autocommit=True) as holder:
        # a holder that never beats: a builder stopped mid-build (SIGSTOP) looks so to a waiter
        holder.execute("SELECT pg_advisory_lock(%s, %s)", (_LOCK_SPACE, _advisory_lock(None, "held").key))  # type: ignore[arg-type]
        for command in (["build", "tools.json", "--store", dsn, "--name", "held"], ["rm", "held", "--store", dsn]):
            run = _cli(tmp_path, *command, "--lock-wait", "3")
            said = run.stderr
            assert run.returncode == 1 and "no sign of life on it for 3 s (lock_wait" in said, (command, said)
            assert "silent holder of the test" in said and "--lock-wait SECONDS" in said and PASSWORD not in said
    assert _cli(tmp_path, "rm", "held", "--store", dsn, "--lock-wait", "30").returncode == 0  # the lock went with it
    for wrong, why in ((["--store", dsn, "--lock-wait", "0"], _library_says(0.0)),
                       (["--store", dsn, "--lock-wait", "nan"], _library_says(float("nan"))),
                       (["--store", dsn, "--lock-wait", "inf"], _library_says(float("inf")))):
        # (--lock-wait without --store bounds the local writer lock: tests/test_index_store_lock.py)
        refused = _cli(tmp_path, "build", "tools.json", "--name", "held", *wrong)
        assert refused.returncode == 2 and why in refused.stderr, (why, refused.stderr)


def _library_says(lock_wait: float) -> str:
    """What StoreSettings says of `lock_wait`, as the CLI must say it of --lock-wait (one check, not two that drift:
    before, the CLI's own said "got 0" where the library said "got 0.0")."""
    from toolsearch._errors import BackendError
    from toolsearch.pg._connect import StoreSettings

    with pytest.raises(BackendError) as refused:
        StoreSettings(lock_wait=lock_wait)
    said = str(refused.value)
    assert said.startswith("lock_wait must be a positive number of seconds"), said
    return "--" + said.replace("_", "-", 1)
