"""The searches waiting in Redis for their calls keep only what the log's privacy setting keeps; calls still credit."""

from __future__ import annotations

import json

import pytest
from redis_server import RedisServer

from toolsearch.mcp.usage_feed import GatewayUsage
from toolsearch.stores.usage_redis import RedisUsageStore

CATALOG = "p" * 64
SECRET = "reset password for alice@example.com, card 4111 1111 1111 1111"


def _stored_values(server: RedisServer) -> str:
    """Every key and value the Redis server holds, as one text."""
    client = server.client()
    parts: list[str] = []
    for key in client.scan_iter(match="*"):
        kind = client.type(key).decode()
        parts.append(key.decode())
        if kind == "list":
            parts += [row.decode() for row in client.lrange(key, 0, -1)]
        elif kind == "hash":
            parts += [f"{k.decode()}={v.decode()}" for k, v in client.hgetall(key).items()]
        elif kind == "string":
            parts.append(client.get(key).decode())
    return "\n".join(parts)


@pytest.mark.parametrize("privacy", ["hashed", "tokens"])
def test_a_search_waiting_for_its_call_leaves_no_request_text_in_redis(redis_server: RedisServer, privacy: str) -> None:
    # Before: the shared pending searches held every request's text for an hour, whatever the privacy setting said
    # ("hashed": nothing readable), whether or not a call followed.
    feed = GatewayUsage.from_url(CATALOG, redis_server.url, privacy=privacy)
    feed.searched("sess-1", SECRET, ["auth_reset"])
    held = _stored_values(redis_server)
    assert "usage-pending2:sess-1" in held
    assert "alice@example.com" not in held and "4111 1111" not in held
    if privacy == "hashed":
        assert "password" not in held and "alice" not in held  # no word of it either
    else:
        assert "password" in held  # the words, as the log keeps them; not the text
    feed.enabled = False


@pytest.mark.parametrize("privacy", ["hashed", "tokens", "raw"])
def test_a_call_another_worker_serves_is_still_credited_as_the_log_keeps_it(
    redis_server: RedisServer, privacy: str
) -> None:
    searching = GatewayUsage.from_url(CATALOG, redis_server.url, privacy=privacy)
    calling = GatewayUsage.from_url(CATALOG, redis_server.url, privacy=privacy)  # its own memory: text unknown
    searching.searched("sess-1", SECRET, ["auth_reset", "auth_login"], ranked=["auth_login", "auth_reset"])
    calling.called("sess-1", "auth_reset", True)
    calling.called("sess-1", "auth_reset", True)  # once per search and tool
    calling.save()
    log = RedisUsageStore(redis_server.url).load(CATALOG)
    assert log is not None
    (entry,) = log.entries()
    assert entry.called == "auth_reset" and entry.terms == log.terms(SECRET)
    assert entry.shown == ("auth_login", "auth_reset")  # the backend's order, which the search recorded
    assert entry.query == (SECRET if privacy == "raw" else None)
    assert entry.by == log.voter("sess-1")
    searching.enabled = calling.enabled = False


def test_a_search_pending_from_an_earlier_toolsearch_is_still_credited(redis_server: RedisServer) -> None:
    # what an earlier toolsearch wrote: the text itself (a worker of the old version, during an upgrade)
    feed = GatewayUsage.from_url(CATALOG, redis_server.url)
    row = {"query": "refund the last invoice", "shown": ["billing_refund"], "credited": []}
    redis_server.client().rpush("toolsearch:usage-pending:sess-9", json.dumps(row))
    feed.called("sess-9", "billing_refund", True)
    feed.save()
    log = RedisUsageStore(redis_server.url).load(CATALOG)
    assert log is not None
    (entry,) = log.entries()
    assert entry.terms == log.terms("refund the last invoice") and entry.shown == ("billing_refund",)
    feed.enabled = False


def test_a_search_learning_alone_found_records_an_empty_backend_list(redis_server: RedisServer) -> None:
    # The backend showed nothing (only the usage log found the tool): its list is empty, not the learned one, even
    # after Lua's cjson rewrote the pending row (it writes an empty list as {}).
    searching = GatewayUsage.from_url(CATALOG, redis_server.url)
    calling = GatewayUsage.from_url(CATALOG, redis_server.url)
    searching.searched("sess-2", "weather in lisbon", ["weather_get", "weather_forecast"], ranked=[])
    calling.called("sess-2", "weather_get", True)
    calling.called("sess-2", "weather_forecast", True)
    calling.save()
    log = RedisUsageStore(redis_server.url).load(CATALOG)
    assert log is not None and [(e.called, e.shown) for e in log.entries()] == [
        ("weather_get", ()), ("weather_forecast", ())]
    searching.enabled = calling.enabled = False


# What a worker of the release before PendingSearch ran to credit a call: this script on its key, then the row read
# as that release wrote them, text and all.
EARLIER_CREDIT = """
local items = redis.call('LRANGE', KEYS[1], 0, -1)
for i = #items, 1, -1 do
  local ok, search = pcall(cjson.decode, items[i])
  if ok and type(search) == 'table' then
    local shown = false
    for _, name in ipairs(search['shown']) do if name == ARGV[1] then shown = true end end
    if shown then
      for _, name in ipairs(search['credited']) do if name == ARGV[1] then return false end end
      table.insert(search['credited'], ARGV[1])
      redis.call('LSET', KEYS[1], i - 1, cjson.encode(search))
      return items[i]
    end
  end
end
return false
"""


def _credited_by_an_earlier_worker(server: RedisServer, session: str, tool: str) -> tuple[str, list[str]] | None:
    raw = server.client().register_script(EARLIER_CREDIT)(keys=[f"toolsearch:usage-pending:{session}"], args=[tool])
    if not raw:
        return None
    search = json.loads(raw)
    return str(search["query"]), search["shown"]


def test_workers_of_an_earlier_toolsearch_never_take_a_search_they_cannot_credit(redis_server: RedisServer) -> None:
    # Before: this release's searches went where an earlier release's workers read theirs, without the text they
    # read: in a rolling upgrade on one Redis, such a worker crediting a call raised KeyError 'query' after its
    # script had marked the search credited, and the entry was lost.
    searching = GatewayUsage.from_url(CATALOG, redis_server.url)
    searching.searched("sess-1", SECRET, ["auth_reset"])
    assert _credited_by_an_earlier_worker(redis_server, "sess-1", "auth_reset") is None  # not its search to take
    # an earlier worker's search of the same session: still its own to credit, and this release's too
    row = {"query": "refund the last invoice", "shown": ["billing_refund", "billing_invoice"], "credited": []}
    redis_server.client().rpush("toolsearch:usage-pending:sess-1", json.dumps(row))
    assert _credited_by_an_earlier_worker(redis_server, "sess-1", "billing_refund") == (
        "refund the last invoice", ["billing_refund", "billing_invoice"])
    calling = GatewayUsage.from_url(CATALOG, redis_server.url)
    calling.called("sess-1", "auth_reset", True)
    calling.called("sess-1", "billing_invoice", True)
    calling.called("sess-1", "billing_refund", True)  # credited by the earlier worker already: once per search
    calling.save()
    log = RedisUsageStore(redis_server.url).load(CATALOG)
    assert log is not None
    assert [(e.called, e.terms) for e in log.entries()] == [
        ("auth_reset", log.terms(SECRET)), ("billing_invoice", log.terms("refund the last invoice"))]
    calling.recorder.forget("sess-1")  # both kinds of key go with the session
    assert not redis_server.client().keys("toolsearch:usage-pending*")
    searching.enabled = calling.enabled = False
