"""What a usage log refuses or bounds when it reads one: entry times, store versions, giant entries, huge bounds, and
the advice a faulty export gets."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from redis_server import RedisServer

from toolsearch import Tool, ToolIndex
from toolsearch.cli import main as cli_main
from toolsearch.stores.usage_redis import RedisUsageStore
from toolsearch.usage import (
    MAX_ENTRIES_LIMIT,
    MAX_QUERY_TEXT,
    MAX_TERMS,
    FileUsageStore,
    UsageError,
    UsageLog,
    _store_digest,
    usage_path,
)
from toolsearch.usage_cli import read_export

TOOLS = [Tool("weather_get", "Get the weather for a city"), Tool("email_send", "Send an email")]


def _export(path: Path, rows: list[dict[str, Any]], **fields: Any) -> Path:
    data = {"format": "toolsearch-usage", "version": 1, "catalog": "x", "privacy": "tokens", "salt": "00",
            "max_entries": 100, "entries": rows, **fields}
    path.write_text(json.dumps(data))
    return path


def _index_with_a_log(tmp_path: Path) -> tuple[Path, FileUsageStore, str]:
    """An index saved in tmp_path/idx with a log of two entries beside it."""
    folder = tmp_path / "idx"
    index = ToolIndex.build(TOOLS, backend="bm25")
    index.save(folder)
    store = FileUsageStore(usage_path(folder))
    log = UsageLog(index.catalog.hash, privacy="tokens")
    log.add("weather in lisbon", "weather_get", ["weather_get"], at=1.0)
    log.add("mail bob", "email_send", ["email_send"], at=2.0)
    store.save(log)
    return folder, store, index.catalog.hash


# --- entry times ---------------------------------------------------------------------------------


@pytest.mark.parametrize("at", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_an_entry_time_that_is_not_finite_is_refused_naming_the_entry(tmp_path: Path, at: str) -> None:
    # Before: accepted. NaN never equals itself, so every import and every save added the entry again (and the
    # file and `usage show --json` then held NaN, which is not JSON).
    path = tmp_path / "export.json"
    path.write_text('{"format": "toolsearch-usage", "version": 1, "catalog": "x", "privacy": "tokens", "salt": "00", '
                    '"max_entries": 100, "entries": [{"terms": ["weather"], "called": "weather_get", '
                    '"shown": ["weather_get"], "at": 1.0}, '
                    f'{{"terms": ["mail"], "called": "email_send", "at": {at}}}]}}')
    with pytest.raises(UsageError, match=r"export\.json, entry 1: its time \(at\) must be a finite number"):
        read_export(str(path))


@pytest.mark.parametrize("at", [math.nan, math.inf, -math.inf, 10**400], ids=["nan", "inf", "-inf", "10**400"])
def test_add_refuses_a_time_that_is_not_finite(at: float) -> None:
    log = UsageLog(privacy="tokens")
    with pytest.raises(UsageError, match=r"the entry for 'weather_get': its time \(at\) must be a finite number"):
        log.add("weather in lisbon", "weather_get", ["weather_get"], at=at)
    assert not len(log)


def test_a_stored_log_with_a_nan_time_is_refused_naming_its_entry(tmp_path: Path) -> None:
    path = tmp_path / "u.usage.json"
    log = UsageLog("cat", privacy="tokens")
    log.add("weather in lisbon", "weather_get", ["weather_get"], at=5.0)
    logs = {"cat": log.to_dict()}
    logs["cat"]["entries"][0]["at"] = math.nan
    path.write_text(json.dumps({"format": "toolsearch-usage-store", "version": 2, "logs": logs,
                                "digest": _store_digest(logs)}))
    with pytest.raises(UsageError, match=r"catalog cat\), entry 0: its time \(at\) must be a finite number"):
        FileUsageStore(path).load("cat")


# --- the store format version --------------------------------------------------------------------


def test_a_usage_file_of_a_newer_store_version_is_refused_and_never_rewritten(tmp_path: Path) -> None:
    # Before: read as if it were this version, then rewritten as version 2 at the next save, dropping what the
    # newer toolsearch had kept in it.
    path = tmp_path / "tools.usage.json"
    log = UsageLog("cat1", privacy="raw")
    log.add("weather in lisbon", "weather_get", ["weather_get"])
    logs = {"cat1": log.to_dict()}
    logs["cat1"]["future_field"] = "kept by v3"
    path.write_text(json.dumps({"format": "toolsearch-usage-store", "version": 3, "logs": logs,
                                "digest": _store_digest(logs), "extra_v3": {"something": 1}}))
    before = path.read_bytes()
    store = FileUsageStore(path)
    said = r"store format 3; this toolsearch reads 2\. Upgrade toolsearch to use it"
    with pytest.raises(UsageError, match=said):
        store.load("cat1")
    other = UsageLog("cat1", privacy="raw")
    other.add("mail bob", "email_send", ["email_send"])
    with pytest.raises(UsageError, match=said):
        store.save(other)
    assert path.read_bytes() == before


def test_a_usage_file_without_a_version_is_read_as_before(tmp_path: Path) -> None:
    path = tmp_path / "old.usage.json"  # files from before the digest carry neither field
    log = UsageLog("cat1", privacy="tokens")
    log.add("weather in lisbon", "weather_get", ["weather_get"])
    path.write_text(json.dumps({"format": "toolsearch-usage-store", "logs": {"cat1": log.to_dict()}}))
    loaded = FileUsageStore(path).load("cat1")
    assert loaded is not None and [e.called for e in loaded] == ["weather_get"]


# --- bounds ------------------------------------------------------------------------------------


def test_an_imported_entry_keeps_the_bound_a_recorded_one_keeps(tmp_path: Path) -> None:
    # Before: an imported entry kept all of its 50,000 terms and its 340,000 characters of text.
    words = [f"w{i}" for i in range(50_000)]
    path = _export(tmp_path / "export.json", [{"terms": words, "called": "weather_get", "shown": ["weather_get"],
                                               "query": " ".join(words), "at": 1.0}], privacy="raw")
    (entry,) = read_export(str(path)).entries()
    assert len(entry.terms) == MAX_TERMS and entry.terms == tuple(words[:MAX_TERMS])
    assert entry.query is not None and len(entry.query) == MAX_QUERY_TEXT
    recorded = UsageLog("x", privacy="raw").add(" ".join(words), "weather_get", ["weather_get"])
    assert recorded is not None and len(recorded.terms) == MAX_TERMS and recorded.query == entry.query


def test_a_bounded_entry_saved_again_is_still_one_entry(tmp_path: Path) -> None:
    log = UsageLog("cat", privacy="raw")
    log.add(" ".join(f"w{i}" for i in range(5_000)), "weather_get", ["weather_get"], at=1.0)
    store = FileUsageStore(tmp_path / "u.usage.json")
    for _ in range(3):
        store.save(log)
    stored = store.load("cat")
    assert stored is not None and len(stored) == 1


@pytest.mark.parametrize("max_entries", [MAX_ENTRIES_LIMIT + 1, 2**63, 10**30])
def test_a_huge_max_entries_is_refused_as_zero_is(max_entries: int) -> None:
    # Before: "unexpected OverflowError: Python int too large to convert to C ssize_t ... please report it"
    with pytest.raises(UsageError, match=f"max_entries must be at most {MAX_ENTRIES_LIMIT:,}, got a larger number"):
        UsageLog(max_entries=max_entries)
    assert UsageLog(max_entries=MAX_ENTRIES_LIMIT).max_entries == MAX_ENTRIES_LIMIT


def _saved_by_an_earlier_release(path: Path, max_entries: int) -> None:
    """A usage file as a release that took any max_entries saved one (it wrote this store version, too)."""
    log = UsageLog("cat", privacy="tokens")
    log.add("weather in lisbon", "weather_get", ["weather_get"], at=5.0)
    logs = {"cat": {**log.to_dict(), "max_entries": max_entries}}
    path.write_text(json.dumps({"format": "toolsearch-usage-store", "version": 2, "logs": logs,
                                "digest": _store_digest(logs)}))


def test_a_stored_log_with_a_bound_over_the_limit_is_read_with_the_limit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: "UsageError ... max_entries must be at most 1,000,000,000, got a larger number; clear it with
    # `toolsearch usage clear`": the log was unreadable, and the advice was to delete it.
    path = tmp_path / "u.usage.json"
    _saved_by_an_earlier_release(path, 10**10)
    store = FileUsageStore(path)
    with caplog.at_level("WARNING", logger="toolsearch.usage"):
        log = store.load("cat")
    assert log is not None and log.max_entries == MAX_ENTRIES_LIMIT and [e.called for e in log] == ["weather_get"]
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "toolsearch.usage"]
    assert f"{path} (catalog cat): max_entries is over 1,000,000,000" in warning and "read as 1,000,000,000" in warning
    log.add("mail bob", "email_send", ["email_send"], at=6.0)
    store.save(log)  # saved with the limit: read without a word from now on
    caplog.clear()
    assert json.loads(path.read_text())["logs"]["cat"]["max_entries"] == MAX_ENTRIES_LIMIT
    assert len(store.load("cat") or ()) == 2 and not caplog.records
    # an export of such a bound is still refused (test_a_faulty_export_is_blamed...), as is UsageLog(max_entries=...)


def test_a_redis_log_with_a_bound_over_the_limit_is_read_with_the_limit(redis_server: RedisServer) -> None:
    store = RedisUsageStore(redis_server.url)
    log = UsageLog("cat", privacy="tokens")
    log.add("weather in lisbon", "weather_get", ["weather_get"], at=5.0)
    store.save(log)
    redis_server.client().hset("toolsearch:usage:cat:meta", "max_entries", str(10**10))  # as an earlier one saved it
    loaded = store.load("cat")  # before: UsageError "max_entries must be at most 1,000,000,000"
    assert loaded is not None and loaded.max_entries == MAX_ENTRIES_LIMIT and len(loaded) == 1


# --- importing a faulty export -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"version": 2}, " has usage-log format 2; this toolsearch reads 1. Upgrade toolsearch, or fix"),
        ({"max_entries": 0}, ": max_entries must be a positive integer, got 0; fix"),
        ({"max_entries": 10**30}, ": max_entries must be at most 1,000,000,000, got a larger number; fix"),
        ({"entries": [{"terms": "weather"}]}, ", entry 0: not a usage entry (needs terms, called, shown); fix"),
        ({"entries": [{"terms": ["weather"], "called": "weather_get", "at": float("nan")}]},
         ", entry 0: its time (at) must be a finite number of seconds since the epoch, got nan; fix"),
    ],
)
def test_a_faulty_export_is_blamed_and_the_indexs_own_log_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fields: dict[str, Any], said: str
) -> None:
    # Before: "... clear the log with `toolsearch usage clear`", which deletes the index's intact log (every
    # catalog's) and leaves the faulty export as it was.
    folder, store, catalog = _index_with_a_log(tmp_path)
    bad = _export(tmp_path / "bad.json", [{"terms": ["forecast"], "called": "weather_get", "at": 3.0}], **fields)
    assert cli_main(["usage", "import", str(folder), str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}{said} {bad} or export it again with `toolsearch usage export`" in err, err
    assert "the index's own usage log is not at fault and was left as it is" in err and "usage clear" not in err
    stored = store.load(catalog)
    assert stored is not None and [e.called for e in stored] == ["weather_get", "email_send"]


def test_a_stored_log_still_advises_clearing_it(tmp_path: Path) -> None:
    path = tmp_path / "u.usage.json"
    data = UsageLog("cat", privacy="tokens").to_dict()
    data["max_entries"] = 0
    logs = {"cat": data}
    path.write_text(json.dumps({"format": "toolsearch-usage-store", "version": 2, "logs": logs,
                                "digest": _store_digest(logs)}))
    with pytest.raises(UsageError, match=r"max_entries must be a positive integer, got 0; clear it with `toolsearch"):
        FileUsageStore(path).load("cat")


def test_an_export_never_replaces_a_file_without_force_nor_the_indexs_own_usage_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _, _ = _index_with_a_log(tmp_path)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not a usage export\n")
    assert cli_main(["usage", "export", str(folder), str(notes)]) == 1
    assert "exists; refusing to overwrite it" in capsys.readouterr().err
    assert notes.read_text() == "my notes, not a usage export\n"
    assert cli_main(["usage", "export", str(folder), str(notes), "--force"]) == 0
    assert len(read_export(str(notes))) == 2

    own = usage_path(folder)
    before = own.read_bytes()
    assert cli_main(["usage", "export", str(folder), str(own), "--force"]) == 1
    assert "is the index's own usage file" in capsys.readouterr().err
    assert own.read_bytes() == before

    capsys.readouterr()
    assert cli_main(["usage", "export", str(folder), "-"]) == 0  # '-' is standard output, as import reads stdin
    assert json.loads(capsys.readouterr().out)["format"] == "toolsearch-usage"
    assert not (Path.cwd() / "-").exists()
    assert cli_main(["usage", "show", str(folder), "--force"]) == 2  # --force goes with export only
    assert "--force goes with" in capsys.readouterr().err


def _export_cli(folder: Path, file: str, *more: str, **run: Any) -> subprocess.CompletedProcess[str]:
    """`toolsearch usage export INDEX FILE` in a process of its own (its standard output is what the test gives)."""
    argv = [sys.executable, "-m", "toolsearch", "usage", "export", str(folder), file, *more]
    return subprocess.run(argv, text=True, timeout=120, **{"capture_output": True, **run})


def test_an_export_writes_to_a_stream_in_place(tmp_path: Path) -> None:
    # Before: `usage export INDEX /dev/stdout` (and `>(cmd)`, a fifo) said "exists; refusing to overwrite it", and
    # --force, as the message advised, replaced a fifo with a regular file its reader never saw.
    folder, _, _ = _index_with_a_log(tmp_path)
    done = _export_cli(folder, "/dev/stdout")  # standard output a pipe
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["entries"]) == 2

    out = tmp_path / "out.json"  # `... /dev/stdout > out.json`: the shell opened the file, not ours to refuse
    with out.open("w") as fh:
        done = _export_cli(folder, "/dev/stdout", capture_output=False, stdout=fh, stderr=subprocess.PIPE)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(out.read_text())["entries"]) == 2

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_text()))
    reader.start()
    done = _export_cli(folder, str(fifo))
    reader.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(read[0])["entries"]) == 2
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the fifo


def test_an_export_to_a_link_replaces_its_target_and_keeps_the_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: --force replaced the link itself with a regular file of mode 0600.
    folder, _, _ = _index_with_a_log(tmp_path)
    (tmp_path / "backups").mkdir()
    real = tmp_path / "backups" / "usage.json"
    real.write_text("{}")
    real.chmod(0o640)
    link = tmp_path / "latest.json"
    link.symlink_to(real)
    assert cli_main(["usage", "export", str(folder), str(link)]) == 1  # an existing file: refused without --force
    assert "exists; refusing to overwrite it" in capsys.readouterr().err
    assert real.read_text() == "{}"
    assert cli_main(["usage", "export", str(folder), str(link), "--force"]) == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert len(read_export(str(real))) == 2 and stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(os.listdir(real.parent)) == ["usage.json"]  # written beside it, moved into place


def test_an_export_into_a_missing_folder_names_that_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, _, _ = _index_with_a_log(tmp_path)
    file = tmp_path / "nodir" / "x.json"
    assert cli_main(["usage", "export", str(folder), str(file)]) == 1
    err = capsys.readouterr().err
    # Before: "…/nodir/.x.json.7t0wixfr.tmp: No such file or directory", a file the user never named.
    assert f"cannot write {file}: its folder {file.parent} does not exist; create it or give another file" in err, err
    assert ".tmp" not in err
