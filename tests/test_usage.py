"""The usage log: terms and privacy, the size cap, joining calls to searches, stores and the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from toolsearch import Tool, ToolIndex, ToolSearchError
from toolsearch.cli import main as cli_main
from toolsearch.usage import (
    FileUsageStore,
    InMemoryUsageStore,
    UsageEntry,
    UsageError,
    UsageLog,
    UsageRecorder,
    UsageStore,
    query_terms,
    stored_logs,
    usage_path,
)


def test_query_terms_split_identifiers_and_drop_repeats() -> None:
    assert query_terms("Send an e-mail: sendEmail send_email!") == (
        "an", "e", "email", "mail", "send", "sendemail",
    )
    assert query_terms("  ...  ") == ()


@pytest.mark.parametrize("privacy", ["hashed", "tokens", "raw"])
def test_privacy_settings_keep_only_what_they_promise(privacy: str) -> None:
    log = UsageLog("cat", privacy=privacy)  # type: ignore[arg-type]
    log.add("Refund the Contoso invoice", "billing_refund", ["billing_refund", "send_email"])
    text = json.dumps(log.to_dict())
    assert ("Refund the Contoso invoice" in text) is (privacy == "raw")
    assert ("contoso" in text) is (privacy != "hashed")
    # Every setting can match a later query with the same words.
    assert log.terms("contoso REFUND invoice the") == log.entries()[0].terms


def test_hashed_terms_depend_on_the_salt() -> None:
    a, b = UsageLog(salt="one"), UsageLog(salt="two")
    assert a.terms("refund") != b.terms("refund")
    assert UsageLog(salt="one").terms("refund") == a.terms("refund")


def test_the_log_keeps_only_the_newest_entries() -> None:
    log = UsageLog(max_entries=3)
    for i in range(5):
        log.add(f"query number {i}", f"tool_{i}")
    assert [e.called for e in log] == ["tool_2", "tool_3", "tool_4"]
    before = log.version
    log.clear()
    assert len(log) == 0 and log.version > before


def test_bad_settings_are_refused_with_the_allowed_values() -> None:
    with pytest.raises(UsageError, match="max_entries must be a positive integer"):
        UsageLog(max_entries=0)
    with pytest.raises(UsageError, match="privacy must be one of hashed, tokens, raw"):
        UsageLog(privacy="plain")  # type: ignore[arg-type]
    assert issubclass(UsageError, ToolSearchError)


def test_a_query_without_words_is_not_recorded() -> None:
    log = UsageLog()
    assert log.add("?!", "tool") is None
    assert len(log) == 0


def test_the_recorder_credits_a_successful_call_to_the_search_that_showed_it() -> None:
    log = UsageLog(privacy="raw")
    rec = UsageRecorder(log)
    rec.record_search("s1", "weather in paris", ["weather_now", "weather_forecast"])
    rec.record_search("s1", "email bob", ["send_email"])
    assert rec.record_call("s1", "weather_forecast", ok=False) is None  # a failure teaches nothing
    entry = rec.record_call("s1", "weather_forecast", ok=True)
    assert entry is not None and entry.query == "weather in paris"
    assert entry.shown == ("weather_now", "weather_forecast")
    assert rec.record_call("s1", "weather_forecast", ok=True) is None  # once per search and tool
    assert rec.record_call("s1", "create_issue", ok=True) is None  # no search showed it
    assert rec.record_call("s2", "send_email", ok=True) is None  # another session's search
    assert rec.record_call("s1", "send_email", ok=True) is not None
    assert [(e.query, e.called) for e in log] == [("weather in paris", "weather_forecast"), ("email bob", "send_email")]


def test_a_disabled_recorder_records_nothing() -> None:
    log = UsageLog()
    rec = UsageRecorder(log, enabled=False)
    rec.record_search("s", "weather", ["weather_now"])
    assert rec.record_call("s", "weather_now", ok=True) is None
    assert len(log) == 0


def test_pending_searches_are_bounded_per_session_and_in_sessions() -> None:
    log = UsageLog()
    rec = UsageRecorder(log, max_sessions=2, max_searches=2)
    rec.record_search("a", "first search", ["tool_a"])
    rec.record_search("a", "second search", ["tool_b"])
    rec.record_search("a", "third search", ["tool_c"])
    assert rec.record_call("a", "tool_a", ok=True) is None  # pushed out by newer searches
    rec.record_search("b", "weather", ["weather_now"])
    rec.record_search("c", "email", ["send_email"])
    assert rec.record_call("a", "tool_b", ok=True) is None  # session a was the least recent
    assert rec.record_call("c", "send_email", ok=True) is not None


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_stores_round_trip_one_log_per_catalog(kind: str, tmp_path: Path) -> None:
    store: UsageStore = InMemoryUsageStore() if kind == "memory" else FileUsageStore(tmp_path / "x.usage.json")
    assert isinstance(store, UsageStore)
    assert store.load("cat-1") is None
    log = UsageLog("cat-1", privacy="tokens", max_entries=10)
    log.add("refund an invoice", "billing_refund", ["billing_refund"], at=1.5)
    store.save(log)
    store.save(UsageLog("cat-2"))
    loaded = store.load("cat-1")
    assert loaded is not None
    assert loaded.entries() == log.entries()
    assert (loaded.privacy, loaded.salt, loaded.max_entries) == ("tokens", log.salt, 10)
    store.delete("cat-1")
    assert store.load("cat-1") is None and store.load("cat-2") is not None


def test_the_file_store_writes_atomically_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    path = tmp_path / "idx.usage.json"
    store = FileUsageStore(path)
    log = UsageLog("cat")
    for i in range(3):
        log.add(f"query {i}", "tool")
        store.save(log)
    assert sorted(os.listdir(tmp_path)) == ["idx.usage.json"]
    assert store.catalogs() == ["cat"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not a readable usage log"),
        ('{"format": "something-else"}', "is not a toolsearch usage file"),
        ('{"format": "toolsearch-usage-store", "logs": {"cat": {"format": "toolsearch-usage", "version": 99}}}',
         "format 99"),
        ('{"format": "toolsearch-usage-store", "logs": {"cat": {"format": "toolsearch-usage", "version": 1, '
         '"salt": "s", "entries": [{"terms": "oops"}]}}}', "entry 0: not a usage entry"),
        # Before: a bare RecursionError, and errors that named neither the file nor what to do
        ("[" * 100_000 + "]" * 100_000, "is not a readable usage log .*maximum recursion depth"),
        ('{"format": "toolsearch-usage-store", "logs": {"cat": {"format": "toolsearch-usage", "version": 1, '
         '"salt": "s", "max_entries": 0, "entries": []}}}', r"max_entries must be a positive integer, got 0; clear"),
        ('{"format": "toolsearch-usage-store", "logs": {"cat": {"format": "toolsearch-usage", "version": 1, '
         '"salt": "s", "privacy": "secret", "entries": []}}}', r"privacy must be one of .*got 'secret'; clear"),
    ],
)
def test_a_corrupt_file_is_a_clear_error_and_is_not_overwritten(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "idx.usage.json"
    path.write_text(content)
    store = FileUsageStore(path)
    with pytest.raises(UsageError, match=message) as info:
        store.load("cat")
    assert str(path) in str(info.value)
    if "clear" not in message and "entry 0" not in message and "format 99" not in message:  # never overwritten
        with pytest.raises(UsageError, match=message):
            store.save(UsageLog("cat"))
    assert path.read_text() == content


def test_merging_hashed_logs_needs_the_same_salt() -> None:
    a, b = UsageLog(salt="one"), UsageLog(salt="two")
    b.add("refund", "billing_refund")
    with pytest.raises(UsageError, match="different salts"):
        a.merge(b)
    c = UsageLog(salt="two")
    assert c.merge(b) == 1 and c.entries() == b.entries()


def test_merging_into_a_less_revealing_log_drops_the_query_text() -> None:
    raw, tokens = UsageLog(privacy="raw"), UsageLog(privacy="tokens")
    raw.add("Refund Contoso", "billing_refund")
    tokens.merge(raw)
    assert tokens.entries()[0].query is None


def test_entries_round_trip_through_dicts() -> None:
    entry = UsageEntry(("a", "b"), "tool", ("tool", "other"), "a b", 3.0)
    assert UsageEntry.from_dict(entry.to_dict(), "here") == entry


def test_usage_path_is_beside_the_index_folder() -> None:
    assert usage_path("indexes/tools") == Path("indexes/tools.usage.json")


REFUND_AND_EMAIL = [Tool("billing_refund", "Refund an invoice"), Tool("send_email", "Send an email")]


def _saved_bm25(tmp_path: Path, tools: list[Tool]) -> tuple[Path, ToolIndex, FileUsageStore]:
    """A bm25 index of `tools` saved in tmp_path/idx, and the store of the usage log beside it."""
    folder = tmp_path / "idx"
    index = ToolIndex.build(tools, backend="bm25")
    index.save(folder)
    return folder, index, FileUsageStore(usage_path(folder))


def test_the_cli_shows_exports_imports_and_clears_a_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, index, store = _saved_bm25(tmp_path, REFUND_AND_EMAIL)
    log = UsageLog(index.catalog.hash, privacy="raw")
    log.add("give the customer their money back", "billing_refund", ["billing_refund"])
    store.save(log)

    assert cli_main(["usage", "show", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "1 usage entries" in out and "give the customer their money back" in out and "billing_refund" in out

    export = tmp_path / "export.json"
    assert cli_main(["usage", "export", str(folder), str(export)]) == 0
    assert cli_main(["usage", "clear", str(folder)]) == 0
    capsys.readouterr()
    assert cli_main(["usage", "show", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 0

    assert cli_main(["usage", "import", str(folder), str(export)]) == 0
    # a second import of the same export adds nothing: the file store keeps each entry once (saves merge)
    assert cli_main(["usage", "import", str(folder), str(export)]) == 0
    capsys.readouterr()
    assert cli_main(["usage", "show", str(folder), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["entries"] == 1 and shown["top_tools"] == [{"name": "billing_refund", "calls": 1}]

    (tmp_path / "bad.json").write_text("[]")
    assert cli_main(["usage", "import", str(folder), str(tmp_path / "bad.json")]) == 1
    assert "is not a toolsearch usage export; export one with `toolsearch usage export`" in capsys.readouterr().err
    # Before: a usage file (what a gateway writes) was "not a toolsearch usage log; clear it with `usage clear`",
    # which would have cleared the index's own log and fixed nothing
    gateway_file = tmp_path / "gateway.usage.json"
    FileUsageStore(gateway_file).save(log)
    assert cli_main(["usage", "import", str(folder), str(gateway_file)]) == 1
    said = capsys.readouterr().err
    assert f"{gateway_file} is a usage file" in said and f"--usage {gateway_file}" in said and "clear" not in said


def test_a_query_with_a_lone_surrogate_is_kept_repaired_and_the_log_saves(tmp_path: Path) -> None:
    # Before: the entry made every later save of the file fail (UnicodeEncodeError), losing what came after it;
    # under privacy "hashed" the add itself raised it.
    broken = json.loads('"weather in \\ud800 paris"')  # what JSON gives for a client's escaped lone surrogate
    store = FileUsageStore(tmp_path / "idx.usage.json")
    for privacy in ("raw", "hashed"):
        log = UsageLog(f"cat-{privacy}", privacy=privacy)  # type: ignore[arg-type]
        entry = log.add(broken, "get_weather", ["get_weather"])
        assert entry is not None and (entry.query == "weather in \ufffd paris") is (privacy == "raw")
        store.save(log)
        log.add("send an email", "send_email", ["send_email"])
        store.save(log)
        assert len(store.load(f"cat-{privacy}") or []) == 2
    exported = UsageLog("cat", privacy="raw").to_dict()
    exported["entries"] = [{"terms": ["weather"], "called": "get_weather", "shown": [], "query": broken, "at": 1.0}]
    (entry,) = UsageLog.from_dict(exported, "export.json").entries()
    assert entry.query == "weather in \ufffd paris"


def test_a_long_query_keeps_its_first_words_in_order_up_to_the_limit() -> None:
    from itertools import product

    from toolsearch.usage import MAX_TERMS

    words = ["".join(letters) for letters in product("bcdfghjk", repeat=3)][:400]  # distinct, none split further
    kept = query_terms(" ".join(reversed(words)))  # said last-to-first: the latest-numbered come first
    assert len(kept) == MAX_TERMS == 256
    assert set(kept) == set(words[-MAX_TERMS:])  # the first 256 the query says, not the alphabetically first


def test_refresh_re_ranks_the_logged_requests_with_the_index_as_it_is_now(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolsearch.index import MAX_QUERY_CHARS

    folder, index, store = _saved_bm25(tmp_path, [*REFUND_AND_EMAIL, Tool("email_stats", "Statistics of sent email")])
    log = UsageLog(index.catalog.hash, privacy="raw")
    # What an older ranking showed: learning would calibrate its trust against a backend that is gone.
    log.add("refund the invoice", "billing_refund", ["send_email", "billing_refund"], at=1.0)
    log.add("send an email", "send_email", ["billing_refund", "email_stats", "send_email"], at=2.0)
    log.add("send an email", "send_email", [], at=3.0)  # recorded no list: it has none to replace
    too_long = "refund " * MAX_QUERY_CHARS
    log.add(too_long, "billing_refund", ["send_email"], at=4.0)  # no search takes it: it keeps its list
    store.save(log)

    assert cli_main(["usage", "refresh", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "re-ranked the 2 logged requests" in out and "1 entries keep the lists they recorded" in out
    stored = store.load(index.catalog.hash)
    assert stored is not None
    shown = {(e.query, e.at): e.shown for e in stored.entries()}
    assert shown[("refund the invoice", 1.0)] == ("billing_refund",)  # cut to the length it recorded
    assert shown[("send an email", 2.0)] == tuple(index.search("send an email", 3).names)
    assert shown[("send an email", 2.0)][0] == "send_email"
    assert shown[("send an email", 3.0)] == ()
    assert shown[(too_long, 4.0)] == ("send_email",)
    assert len(stored) == 4  # replaced, not merged in beside the old versions
    assert cli_main(["usage", "refresh", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["usage_refreshed"] == {"requests_reranked": 2, "entries_kept": 1}


def test_refresh_keeps_what_it_cannot_re_rank_and_what_others_save_meanwhile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolsearch.learning import LearnedRanker, LearningIndex, shown_now

    folder, index, store = _saved_bm25(tmp_path, REFUND_AND_EMAIL)
    assert store.update(index.catalog.hash, lambda log: log) is None and not store.path.exists()
    assert cli_main(["usage", "refresh", str(folder)]) == 0
    assert "no usage log to refresh" in capsys.readouterr().out
    assert cli_main(["usage", "refresh", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["usage_refreshed"] is None

    hashed = UsageLog(index.catalog.hash)  # no request text: nothing to search again
    hashed.add("refund the invoice", "billing_refund", ["send_email", "billing_refund"], at=1.0)
    store.save(hashed)
    assert cli_main(["usage", "refresh", str(folder)]) == 0
    assert "re-ranked the 0 logged requests" in capsys.readouterr().out
    assert [e.shown for e in store.load(index.catalog.hash).entries()] == [("send_email", "billing_refund")]  # type: ignore[union-attr]

    store.delete(index.catalog.hash)
    raw = UsageLog(index.catalog.hash, privacy="raw")
    raw.add("refund the invoice", "billing_refund", ["send_email", "billing_refund"], at=1.0)
    store.save(raw)
    lists = shown_now(index, raw)
    votes = UsageLog(index.catalog.hash, privacy="raw")
    for _ in range(3):
        votes.add("refund the invoice", "send_email", ["billing_refund"])
    learning = LearningIndex(index, LearnedRanker(votes, refresh_seconds=0))
    assert learning.search("refund the invoice", 2).names[0] == "send_email"
    assert shown_now(learning, raw) == lists  # the backend's lists, never learning's
    later = UsageLog(index.catalog.hash, privacy="raw", salt=raw.salt)
    later.add("email the customer", "send_email", ["send_email"], at=2.0)
    store.save(later)  # another process saves while the lists are made
    updated = store.update(index.catalog.hash, lambda log: log.reshown(lists))
    assert updated is not None
    assert [(e.query, e.shown) for e in updated.entries()] == [
        ("refund the invoice", ("billing_refund",)), ("email the customer", ("send_email",)),
    ]


def test_every_stored_log_is_read_as_each_one_alone_reads(tmp_path: Path) -> None:
    store = FileUsageStore(tmp_path / "usage.json")
    for catalog, privacy in [("catalog-b", "raw"), ("catalog-a", "hashed")]:
        log = UsageLog(catalog, privacy=privacy)  # type: ignore[arg-type]
        log.add("mail the team", "send_email", ["send_email"], at=1.0)
        store.save(log)
    every = stored_logs(store)
    assert every is not None
    alone = [store.load(c) for c in store.catalogs()]
    assert [log.to_dict() for log in every] == [log.to_dict() for log in alone if log is not None]
    assert [log.catalog for log in every] == ["catalog-a", "catalog-b"]
    assert stored_logs(InMemoryUsageStore()) is None  # a store that cannot list its logs says so
    store.path.write_text(store.path.read_text().replace("mail the team", "mail the boss"))
    with pytest.raises(UsageError, match="does not match its checksum"):
        stored_logs(store)


def _log_of(catalog: str, query: str, called: str, *, at: float = 1.0) -> UsageLog:
    log = UsageLog(catalog, privacy="raw")
    log.add(query, called, [called], at=at)
    return log


def test_usage_sees_and_clears_the_logs_of_an_earlier_catalog_of_the_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A tool changed and the index was rebuilt: the log recorded before is kept under the old catalog's hash.
    folder, _, store = _saved_bm25(tmp_path, REFUND_AND_EMAIL)
    store.save(_log_of("an-earlier-catalog", "give the customer their money back", "billing_refund"))
    store.save(_log_of("another-earlier-one", "mail the team", "send_email"))

    assert cli_main(["usage", "show", str(folder)]) == 0
    out = capsys.readouterr().out
    # Before: "no usage recorded for this index", with two logs of raw request text in the file.
    assert "2 entries in 2 logs of earlier catalogs" in out and "usage clear" in out
    assert cli_main(["usage", "show", str(folder), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["entries"] == 0 and shown["earlier_catalogs"] == {"logs": 2, "entries": 2}

    assert cli_main(["usage", "clear", str(folder)]) == 0
    assert "cleared 2 usage entries (2 logs)" in capsys.readouterr().out
    # Before: "cleared", and the file still held both logs, request text and all.
    assert not store.path.exists()
    assert cli_main(["usage", "show", str(folder)]) == 0
    assert "no usage recorded for this index" in capsys.readouterr().out


def test_a_corrupt_usage_file_is_moved_aside_by_clear_and_import_restores_into_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, index, store = _saved_bm25(tmp_path, REFUND_AND_EMAIL)
    store.save(_log_of(index.catalog.hash, "give the customer their money back", "billing_refund"))
    export = tmp_path / "export.json"
    assert cli_main(["usage", "export", str(folder), str(export)]) == 0
    store.path.write_text("{not json")
    capsys.readouterr()

    assert cli_main(["usage", "show", str(folder)]) == 1
    assert "usage clear" in capsys.readouterr().err
    # Before: clear failed with the same error that told the user to run it.
    assert cli_main(["usage", "clear", str(folder)]) == 0
    out = capsys.readouterr().out
    backups = list(tmp_path.glob("idx.usage.json.unreadable-*"))
    assert len(backups) == 1 and backups[0].read_text() == "{not json"
    assert f"moved it to {backups[0]}" in out and not store.path.exists()

    assert cli_main(["usage", "import", str(folder), str(export)]) == 0
    assert "imported 1 new usage entries" in capsys.readouterr().out
    restored = store.load(index.catalog.hash)
    assert restored is not None and [e.query for e in restored] == ["give the customer their money back"]


def test_import_reports_what_the_stored_log_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, index, store = _saved_bm25(tmp_path, REFUND_AND_EMAIL)
    log = _log_of(index.catalog.hash, "give the customer their money back", "billing_refund")
    store.save(log)
    export = tmp_path / "export.json"
    assert cli_main(["usage", "export", str(folder), str(export)]) == 0
    capsys.readouterr()
    # The same entries again: the store keeps each once. Before: "imported 1 ... (2 in total)" with 1 stored.
    assert cli_main(["usage", "import", str(folder), str(export)]) == 0
    out = capsys.readouterr().out
    assert "imported 0 new usage entries" in out and "(1 in total)" in out, out
    stored = store.load(index.catalog.hash)
    assert stored is not None and len(stored) == 1


@pytest.mark.parametrize(("argv", "needle"), [
    (["import", "IDX"], "usage import needs the FILE"),  # before: exit 1
    (["show", "IDX", "extra.json"], "usage show takes no FILE"),  # before: the extra word was ignored
    (["clear", "IDX", "extra.json"], "usage clear takes no FILE"),
    (["refresh", "IDX", "extra.json"], "usage refresh takes no FILE"),
])
def test_usage_arguments_are_checked_before_anything_is_read(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _, _ = _saved_bm25(tmp_path, REFUND_AND_EMAIL)
    code = cli_main(["usage", *[str(folder) if a == "IDX" else a for a in argv]])
    err = capsys.readouterr().err
    assert code == 2, err
    assert needle in err and "toolsearch usage --help" in err


# --- who voted: a salted digest of the session ---------------------------------------------------


def test_the_recorder_marks_each_entry_with_a_salted_digest_of_its_session_never_the_id() -> None:
    import hashlib

    log = UsageLog(salt="0f" * 16)
    rec = UsageRecorder(log)
    for session in ("mcp-session-secret-1", "mcp-session-secret-1", "mcp-session-secret-2"):
        rec.record_search(session, "weather in paris", ["weather_now"])
        assert rec.record_call(session, "weather_now", ok=True) is not None
    one, again, two = (e.by for e in log)
    assert one == again != two and one is not None and two is not None
    assert one == hashlib.blake2b(b"mcp-session-secret-1", key=log.salt.encode(), digest_size=8).hexdigest()
    assert "secret" not in json.dumps(log.to_dict())
    # keyed by the log's salt: the same session cannot be linked across logs
    assert UsageLog(salt="another").voter("mcp-session-secret-1") != one
    # `add` without `by` records no voter, as before
    assert log.add("weather in paris", "weather_now").by is None  # type: ignore[union-attr]


@pytest.mark.parametrize("salt", ["x" * 200, "caf\u00e9", "\ud800"])
def test_any_stored_salt_gives_a_voter_key(salt: str) -> None:
    log = UsageLog(privacy="tokens", salt=salt)  # tokens and raw logs never used their salt before
    assert log.voter("s") == UsageLog(privacy="tokens", salt=salt).voter("s") != log.voter("t")


def test_by_round_trips_and_is_written_only_when_set() -> None:
    entry = UsageEntry(("a",), "tool", ("tool",), None, 3.0, "0123456789abcdef")
    assert entry.to_dict()["by"] == "0123456789abcdef"
    assert UsageEntry.from_dict(entry.to_dict(), "here") == entry
    assert "by" not in UsageEntry(("a",), "tool").to_dict()


def test_an_entry_written_before_by_still_loads_without_a_voter() -> None:
    old = {"terms": ["a", "b"], "called": "tool", "shown": ["tool"], "at": 2.0}
    assert UsageEntry.from_dict(old, "here") == UsageEntry(("a", "b"), "tool", ("tool",), None, 2.0)
    assert UsageEntry.from_dict(old, "here").by is None


@pytest.mark.parametrize("by", [7, ["x"], "x" * 65])
def test_a_bad_voter_is_a_clear_error_naming_the_entry(by: object) -> None:
    data = {"format": "toolsearch-usage", "version": 1, "salt": "s",
            "entries": [{"terms": ["a"], "called": "tool", "by": by}]}
    with pytest.raises(UsageError, match="usage log, entry 0: not a usage entry"):
        UsageLog.from_dict(data)
    if isinstance(by, str):  # and `add` refuses what a load would
        with pytest.raises(UsageError, match="by must be a string of at most 64 characters"):
            UsageLog().add("refund", "tool", by=by)


def _voted_log(catalog: str) -> UsageLog:
    log = UsageLog(catalog, privacy="tokens")
    rec = UsageRecorder(log)
    for i, session in enumerate(["a", "a", "b"]):
        rec.record_search(session, f"refund invoice {i}", ["billing_refund"])
        rec.record_call(session, "billing_refund", ok=True)
    log.add("send an email", "send_email", ["send_email"])  # no voter; the newest (saves order entries by time)
    return log


def test_by_round_trips_through_the_file_store_and_its_merging_saves(tmp_path: Path) -> None:
    store = FileUsageStore(tmp_path / "x.usage.json")
    log = _voted_log("cat")
    store.save(log)
    store.save(log)  # merged with itself: each entry once, its voter kept
    loaded = store.load("cat")
    assert loaded is not None
    assert [(e.called, e.by) for e in loaded] == [(e.called, e.by) for e in log]
    assert [e.by is None for e in loaded] == [False, False, False, True]
    store.append(loaded, [e for e in log.entries()[:1]])  # already there: still once
    assert len(store.load("cat") or ()) == 4
    # merge (an import into a non-empty log) and reshown keep the voter too
    joined = UsageLog("cat", privacy="tokens", salt=log.salt)
    joined.merge(log)
    assert [e.by for e in joined] == [e.by for e in log]
    assert [e.by for e in joined.reshown({})] == [e.by for e in log]
    raw = UsageLog("cat", privacy="raw")
    raw.add("refund please", "billing_refund", ["billing_refund", "send_email"], by="v1")
    assert raw.reshown({"refund please": ["send_email", "billing_refund"]}).entries()[0].by == "v1"


def test_by_round_trips_through_a_cli_export_and_import(tmp_path: Path) -> None:
    folder, index, store = _saved_bm25(tmp_path, REFUND_AND_EMAIL)
    log = _voted_log(index.catalog.hash)
    store.save(log)
    export = tmp_path / "export.json"
    assert cli_main(["usage", "export", str(folder), str(export)]) == 0
    assert [row.get("by") for row in json.loads(export.read_text())["entries"]] == [e.by for e in log]
    assert cli_main(["usage", "clear", str(folder)]) == 0
    assert cli_main(["usage", "import", str(folder), str(export)]) == 0
    assert cli_main(["usage", "import", str(folder), str(export)]) == 0  # into a non-empty log: merged, once each
    loaded = store.load(index.catalog.hash)
    assert loaded is not None and [e.by for e in loaded] == [e.by for e in log]


def test_a_copy_of_an_entry_that_lost_its_voter_is_the_same_entry_when_saves_merge(tmp_path: Path) -> None:
    # Before: an entry rewritten without `by` (an older toolsearch sharing the file, a store that rebuilds
    # entries) compared unequal to itself and was kept twice
    store = FileUsageStore(tmp_path / "x.usage.json")
    log = _voted_log("cat")
    store.save(log)
    stripped = UsageLog("cat", privacy="tokens", salt=log.salt,
                        entries=[UsageEntry(e.terms, e.called, e.shown, e.query, e.at) for e in log])
    store.save(stripped)
    loaded = store.load("cat")
    assert loaded is not None and [e.by for e in loaded] == [e.by for e in log]
    # saved the other way round, the copy that names its voter wins too
    other = FileUsageStore(tmp_path / "y.usage.json")
    other.save(stripped)
    other.save(log)
    assert [e.by for e in other.load("cat") or ()] == [e.by for e in log]


def test_usage_export_import_and_clear_answer_json_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, index, store = _saved_bm25(tmp_path, REFUND_AND_EMAIL)
    store.save(_log_of(index.catalog.hash, "give the customer their money back", "billing_refund"))
    export = tmp_path / "export.json"
    capsys.readouterr()
    # Before: --json was accepted and ignored, and each printed a sentence.
    assert cli_main(["usage", "export", str(folder), str(export), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"path": str(store.path), "exported_to": str(export), "entries": 1}
    assert cli_main(["usage", "import", str(folder), str(export), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"path": str(store.path), "imported": 0, "entries": 1}
    assert cli_main(["usage", "clear", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "path": str(store.path), "logs": 1, "entries": 1, "moved_to": None, "problem": None,
    }
    assert not store.path.exists()
