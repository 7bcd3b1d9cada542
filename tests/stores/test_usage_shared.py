"""A usage log shared by worker processes: file merges, Redis appends and shared pending searches, checked files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from redis_server import RedisServer

from toolsearch.mcp.usage_feed import GatewayUsage
from toolsearch.stores import usage_store_from_url
from toolsearch.stores.usage_redis import RedisUsageStore
from toolsearch.usage import FileUsageStore, InMemoryUsageStore, UsageError, UsageLog, query_terms

CATALOG = "c" * 64

# One worker: `pairs` searches each followed by a call of what it showed, then a save.
WORKER = textwrap.dedent("""
    import sys
    from toolsearch.mcp.usage_feed import GatewayUsage
    from toolsearch.usage import FileUsageStore
    target, worker, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if target.startswith("redis://"):
        feed = GatewayUsage.from_url(sys.argv[4], target)
    else:
        feed = GatewayUsage(sys.argv[4], store=FileUsageStore(target))
    sys.stdin.readline()  # both workers start together
    for i in range(pairs):
        session = f"{worker}-{i}"
        feed.searched(session, f"worker {worker} request {i}", [f"tool_{worker}_{i}"])
        feed.called(session, f"tool_{worker}_{i}", True)
        feed.save()
""")


def _run_workers(target: str, pairs: int = 12) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, target, w, str(pairs), CATALOG],
                              stdin=subprocess.PIPE, text=True) for w in "ab"]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    assert [p.wait(timeout=120) for p in procs] == [0, 0]


def test_two_processes_saving_one_usage_file_lose_nothing(tmp_path: Path) -> None:
    # Before, each worker saved its whole log: 24 search+call pairs left 7 entries (last writer won).
    path = tmp_path / "idx.usage.json"
    _run_workers(str(path))
    log = FileUsageStore(path).load(CATALOG)
    assert log is not None
    called = sorted(e.called for e in log.entries())
    assert called == sorted(f"tool_{w}_{i}" for w in "ab" for i in range(12))


def test_two_processes_appending_to_redis_lose_nothing(redis_server: RedisServer) -> None:
    _run_workers(redis_server.url)
    log = RedisUsageStore(redis_server.url).load(CATALOG)
    assert log is not None and len(log) == 24
    assert len({e.terms for e in log.entries()}) == 24


SEARCH_ONLY = textwrap.dedent("""
    import sys
    from toolsearch.mcp.usage_feed import GatewayUsage
    feed = GatewayUsage.from_url(sys.argv[2], sys.argv[1])
    feed.searched("session-1", "refund the last invoice", ["billing_refund", "billing_invoice"])
""")
CALL_ONLY = textwrap.dedent("""
    import sys
    from toolsearch.mcp.usage_feed import GatewayUsage
    feed = GatewayUsage.from_url(sys.argv[2], sys.argv[1])
    feed.called("session-1", "billing_refund", True)
    feed.called("session-1", "billing_refund", True)  # once per search and tool
    feed.save()
""")


def test_a_call_is_credited_to_a_search_another_worker_served(redis_server: RedisServer) -> None:
    # Before, the pending search lived in one worker's memory: a call served elsewhere taught nothing.
    for script in (SEARCH_ONLY, CALL_ONLY):
        subprocess.run([sys.executable, "-c", script, redis_server.url, CATALOG], check=True, timeout=120)
    log = RedisUsageStore(redis_server.url).load(CATALOG)
    assert log is not None
    (entry,) = log.entries()
    assert entry.called == "billing_refund" and entry.shown == ("billing_refund", "billing_invoice")
    assert entry.terms == log.terms("refund the last invoice")


def test_entries_a_failed_append_could_not_save_are_saved_by_the_next(redis_server: RedisServer) -> None:
    # Before: the entries were taken out before the append, and a Redis blip lost them for good.
    store = RedisUsageStore(redis_server.url, prefix="blip:", timeout=0.3)
    feed = GatewayUsage(CATALOG, store=store, privacy="raw")
    feed.searched("s1", "weather in paris", ["weather_current"])
    feed.called("s1", "weather_current", True)
    redis_server.pause()
    try:
        feed.save()  # logged, not raised: the gateway goes on serving
    finally:
        redis_server.resume()
    feed.searched("s1", "send an email", ["send_email"])
    feed.called("s1", "send_email", True)
    feed.save()
    log = RedisUsageStore(redis_server.url, prefix="blip:").load(CATALOG)
    assert log is not None and [e.called for e in log.entries()] == ["weather_current", "send_email"]
    feed.enabled = False


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [("max_entries", "0", "max_entries must be a positive integer, got 0"),
     ("privacy", "secret", "privacy must be one of hashed, tokens, raw, got 'secret'")],
)
def test_a_stored_log_with_bad_settings_names_itself(
    redis_server: RedisServer, field: str, value: str, said: str
) -> None:
    # Before: the bare setting's error, naming neither the log nor what to do
    store = RedisUsageStore(redis_server.url, prefix="bad:")
    store.open_log(CATALOG)
    redis_server.client().hset(f"bad:usage:{CATALOG}:meta", field, value)
    with pytest.raises(UsageError, match=rf"usage log {CATALOG[:12]} in redis://.*is unreadable \({said}\); clear it"):
        store.load(CATALOG)


@pytest.mark.parametrize("privacy", ["hashed", "tokens", "raw"])
def test_the_redis_log_is_bounded_and_keeps_its_privacy_setting(redis_server: RedisServer, privacy: str) -> None:
    store = RedisUsageStore(redis_server.url, prefix=f"t-{privacy}:")
    log = store.open_log(CATALOG, privacy=privacy)  # type: ignore[arg-type]
    log.max_entries = 5
    entries = [e for i in range(8) if (e := log.add(f"send email number {i}", "send_email", ["send_email"]))]
    store.append(log, entries)
    stored = store.load(CATALOG)
    assert stored is not None and stored.privacy == privacy and stored.salt == log.salt
    raw = redis_server.client().lrange(f"t-{privacy}:usage:{CATALOG}:entries", 0, -1)
    texts = [json.loads(r) for r in raw]
    assert len(texts) == 5  # the newest five
    assert ("send email number 7" in json.dumps(texts)) is (privacy == "raw")
    assert ("number" in json.dumps(texts)) is (privacy != "hashed")
    # a second worker opening the log takes the first one's salt
    assert RedisUsageStore(redis_server.url, prefix=f"t-{privacy}:").open_log(CATALOG).salt == log.salt


def test_the_factory_picks_the_store_by_url(tmp_path: Path, redis_server: RedisServer) -> None:
    assert isinstance(usage_store_from_url(redis_server.url), RedisUsageStore)
    assert isinstance(usage_store_from_url("memory://"), InMemoryUsageStore)
    assert isinstance(usage_store_from_url("memory://", path=str(tmp_path / "u.json")), FileUsageStore)
    with pytest.raises(Exception, match="unknown usage store URL"):
        usage_store_from_url("postgres://user:secret@db/x")


def test_a_tampered_usage_file_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "idx.usage.json"
    store = FileUsageStore(path)
    log = UsageLog(CATALOG, privacy="tokens")
    log.add("refund an invoice", "billing_refund", ["billing_refund"])
    store.save(log)
    text = path.read_text()
    path.write_text(text.replace('"billing_refund"', '"billing_delete"'))
    with pytest.raises(UsageError, match=r"does not match its checksum.*toolsearch usage clear"):
        store.load(CATALOG)
    with pytest.raises(UsageError, match="checksum"):
        store.save(log)  # never overwritten
    # a file written before the digest (no version, no digest) still reads
    data = json.loads(text)
    del data["version"], data["digest"]
    path.write_text(json.dumps(data))
    loaded = store.load(CATALOG)
    assert loaded is not None and [e.called for e in loaded.entries()] == ["billing_refund"]


def test_a_long_request_keeps_its_words() -> None:
    # Before, the alphabetically first 32 words were kept: "zoom", "weekly" and "meeting" were dropped.
    request = ("please help me " + " ".join(f"alpha{i}" for i in range(40))
               + " then schedule a weekly zoom meeting with the team")
    terms = query_terms(request)
    assert {"zoom", "weekly", "meeting", "schedule", "alpha39"} <= set(terms)
    assert list(terms) == sorted(terms)
    huge = " ".join(f"word{i}" for i in range(5000))  # a pasted document stays bounded, first words kept
    kept = query_terms(huge)
    assert len(kept) == 256 and "word0" in kept and "word4999" not in kept


def test_the_gateway_feed_keeps_its_api_with_a_file(tmp_path: Path) -> None:
    feed = GatewayUsage.from_file(CATALOG, tmp_path / "u.json")
    feed.searched("s", "weather in paris", ["get_weather"])
    feed.called("s", "get_weather", True)
    feed.save()
    stored = FileUsageStore(tmp_path / "u.json").load(CATALOG)
    assert stored is not None and [e.called for e in stored.entries()] == ["get_weather"]


# --- a fleet through Redis outages, restarts and catalog changes ----------------------------------------


def _pair(feed: GatewayUsage, session: str, query: str, tool: str) -> None:
    feed.searched(session, query, [tool])
    feed.called(session, tool, True)


def test_a_feed_started_while_redis_is_down_saves_once_it_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: the feed raised `failed to list the usage logs: ConnectionError` and the gateway worker exited.
    server = RedisServer(tmp_path)  # its port is free: nothing answers yet
    try:
        feed = GatewayUsage.from_url(CATALOG, server.url)
        assert "cannot be reached" in caplog.text and "recording in memory" in caplog.text
        server.start()
        _pair(feed, "s1", "weather in paris", "weather_get")
        feed.save()  # the stored log is opened now, and what was recorded saved into it
        log = RedisUsageStore(server.url).load(CATALOG)
        assert log is not None and [e.called for e in log.entries()] == ["weather_get"]
        assert log.entries()[0].terms == log.terms("weather in paris")  # hashed with the stored log's salt
        _pair(feed, "s2", "send an email", "email_send")
        feed.save()
        log = RedisUsageStore(server.url).load(CATALOG)
        assert log is not None and [e.called for e in log.entries()] == ["weather_get", "email_send"]
        feed.enabled = False
    finally:
        server.stop()


def test_a_feed_started_while_redis_is_down_keeps_out_of_a_log_with_another_privacy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = RedisServer(tmp_path)
    try:
        feed = GatewayUsage.from_url(CATALOG, server.url)  # asks for "hashed"
        server.start()
        RedisUsageStore(server.url).open_log("other-catalog", privacy="raw")  # what the operator kept before
        _pair(feed, "s1", "weather in paris", "weather_get")
        feed.save()
        assert "privacy 'raw', not 'hashed'" in caplog.text and "1 entry recorded" in caplog.text
        assert RedisUsageStore(server.url).catalogs() == ["other-catalog"]  # nothing of this feed was written
        _pair(feed, "s2", "send an email", "email_send")  # and nothing more is recorded
        feed.save()
        assert RedisUsageStore(server.url).catalogs() == ["other-catalog"]
    finally:
        server.stop()
    # a store that answers at start with another setting still refuses the start, as before
    with RedisServerRunning(tmp_path / "again") as url:
        RedisUsageStore(url).open_log("other-catalog", privacy="raw")
        with pytest.raises(UsageError, match="privacy 'raw', not 'hashed'"):
            GatewayUsage.from_url(CATALOG, url)


class RedisServerRunning:
    """A redis-server of its own for a `with` block; its URL."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.server = RedisServer(folder)

    def __enter__(self) -> str:
        return self.server.start().url

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


def test_a_running_feed_rehashes_its_entries_when_redis_restarts_empty_under_another_salt(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: once another worker had opened the log again (a new salt), every append of the running worker
    # failed ("hashed with another salt"), and its unsaved entries piled up for ever.
    running = GatewayUsage.from_url(CATALOG, redis_server.url)
    _pair(running, "a0", "weather in paris", "weather_get")
    running.save()
    redis_server.kill()
    redis_server.start()  # no persistence: it comes back empty
    started = GatewayUsage.from_url(CATALOG, redis_server.url)  # a worker (re)started now: a new salt wins
    _pair(started, "c0", "send an email", "email_send")
    started.save()
    for i in range(3):
        _pair(running, f"a{i + 1}", f"weather in rome {i}", "weather_get")
        running.save()
    log = RedisUsageStore(redis_server.url).load(CATALOG)
    assert log is not None and [e.called for e in log.entries()] == ["email_send"] + ["weather_get"] * 3
    assert log.salt == started.log.salt == running.log.salt
    assert [e.terms for e in log.entries()][1:] == [log.terms(f"weather in rome {i}") for i in range(3)]
    assert all(e.by is not None for e in log.entries())  # re-hashed entries keep their voter
    assert "could not save" not in caplog.text
    running.enabled = started.enabled = False


def test_entries_waiting_for_a_store_that_refuses_them_are_bounded(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: every entry an append could not save was kept for the next save, without a bound.
    store = RedisUsageStore(redis_server.url, prefix="cap:")
    store.save(UsageLog(CATALOG, max_entries=3, privacy="tokens"))
    feed = GatewayUsage(CATALOG, store=store, privacy="tokens")
    meta = f"cap:usage:{CATALOG}:meta"
    redis_server.client().delete(meta)
    redis_server.client().set(meta, "not a hash")  # every append now fails (WRONGTYPE); crediting still works
    for i in range(5):
        _pair(feed, f"s{i}", f"request number {i}", f"tool_{i}")
        feed.save()
    assert "could not save the usage log" in caplog.text
    dropped = [re.search(r"(\d+) older unsaved entr(?:y was|ies were) dropped", r.getMessage()) for r in caplog.records]
    assert sum(int(found.group(1)) for found in dropped if found) == 2  # over the log's own bound of 3, said
    redis_server.client().delete(meta)  # the store takes writes again
    feed.save()
    log = store.load(CATALOG)
    assert log is not None and [e.called for e in log.entries()] == ["tool_2", "tool_3", "tool_4"]
    feed.enabled = False


def _two_feeds(kind: str, tmp_path: Path, url: str, catalog: str) -> tuple[GatewayUsage, GatewayUsage]:
    if kind == "redis":
        return GatewayUsage.from_url(catalog, url), GatewayUsage.from_url(catalog, url)
    return (GatewayUsage(catalog, store=FileUsageStore(tmp_path / "u.json")),
            GatewayUsage(catalog, store=FileUsageStore(tmp_path / "u.json")))


def _stored(kind: str, tmp_path: Path, url: str, catalog: str) -> list[str]:
    store = RedisUsageStore(url) if kind == "redis" else FileUsageStore(tmp_path / "u.json")
    log = store.load(catalog)
    return sorted(e.called for e in log.entries()) if log is not None else []


@pytest.mark.parametrize("kind", ["redis", "file"])
def test_a_catalog_change_on_every_worker_carries_every_workers_entries(
    kind: str, tmp_path: Path, redis_server: RedisServer
) -> None:
    # Before: the first worker to switch carried only its own entries, and the others carried none (theirs were
    # older than the new log's newest); with Redis the switch then replaced the shared log whole.
    a, b = _two_feeds(kind, tmp_path, redis_server.url, "cat-old")
    for i in range(3):  # b's calls first, then a's
        _pair(b, f"b{i}", f"send mail {i}", "mail_send")
    for i in range(3):
        _pair(a, f"a{i}", f"weather {i}", "weather_get")
    a.save()
    b.save()
    a.catalog_changed("cat-new")
    _pair(a, "a9", "book a flight", "flight_book")  # a serves on the new catalog before b hears of it
    a.save()
    b.catalog_changed("cat-new")
    expected = ["flight_book"] + ["mail_send"] * 3 + ["weather_get"] * 3
    assert _stored(kind, tmp_path, redis_server.url, "cat-new") == expected
    assert sorted(e.called for e in b.log.entries()) == expected  # b ranks with every worker's entries
    # each keeps its voter (one vote per conversation), carried over as recorded
    assert all(e.by is not None for e in b.log.entries()) and len({e.by for e in b.log.entries()}) == 7
    a.catalog_changed("cat-old")  # back: only what the old log lacks, each entry once
    assert _stored(kind, tmp_path, redis_server.url, "cat-old") == expected
    a.enabled = b.enabled = False
