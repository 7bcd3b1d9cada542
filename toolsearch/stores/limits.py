"""Per-caller counts beside the sessions: request-rate token buckets and caps on the sessions a caller holds open.

Both live where the sessions live, so every worker sharing a store shares them. In memory they are
this process's; in Redis each is one server-side script (atomic, on Redis's clock):

- a token bucket per key, `{prefix}rate:{key}`, a hash of (tokens, time) that expires once it
  would be full again;
- the sessions an owner holds, `{prefix}owner:{kind}:{owner}`, a sorted set of session ids scored
  by when each was claimed. The count is never trusted on its own: a claim first drops every member
  whose session key no longer exists (it expired, was closed, or its worker died before creating
  it), so the count cannot drift from the sessions that really exist. A member younger than
  `CLAIM_GRACE_MS` is kept even without its key: it was claimed a moment ago and its session is
  being created. The set lives twice the sessions' TTL from its owner's last claim or `touch` (a
  use of one of its sessions, which also renews that session and counts it again), so while the
  owner is active the set outlives every session it counts, and it goes once the owner is gone.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .memory import InMemorySessionStore
    from .redis import RedisSessionStore

__all__ = ["CLAIM_GRACE_MS", "CallerLimits", "Claim", "MemoryLimits", "RedisLimits", "TokenBuckets", "limits_for"]

CLAIM_GRACE_MS = 10_000  # a claim counts this long before its session key must exist


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to a claim: granted or not, how many the owner holds, and when one may end.

    `retry_after`: seconds until the soonest of the owner's sessions ends if left idle (None when
    they never expire, or when it is not known).
    """

    granted: bool
    open: int
    retry_after: float | None = None


@runtime_checkable
class CallerLimits(Protocol):
    """Rates and caps per caller. Failures of a shared store raise SessionStoreError (never a silent pass)."""

    def take(self, key: str, per_minute: float, burst: int, cost: int = 1) -> float:
        """Spend `cost` (1, or 0 to only look) of `key`'s bucket: 0 when there was a token, else the
        seconds until there is one (nothing spent)."""
        ...

    def claim(self, kind: str, owner: str, session_id: str, limit: int) -> Claim:
        """Count `session_id` as one of `owner`'s open `kind` sessions, unless it already holds `limit`."""
        ...

    def release(self, kind: str, owner: str, session_id: str) -> None:
        """Stop counting a session (it was closed, or never created)."""
        ...

    def touch(self, kind: str, owner: str, session_id: str) -> bool:
        """The session is in use: True when it exists (its idle expiry renewed, and it is counted again)."""
        ...


class TokenBuckets:
    """Token buckets in this process, at most `max_keys` of them (the least recently seen go first)."""

    def __init__(self, max_keys: int = 10_000) -> None:
        self.max_keys = max_keys
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, key: str, per_minute: float, burst: int, now: float | None = None, cost: int = 1) -> float:
        rate = per_minute / 60.0
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, last = self._buckets.pop(key, (float(burst), now))
            tokens = min(float(burst), tokens + max(0.0, now - last) * rate)
            if tokens >= 1.0:
                tokens, wait = tokens - cost, 0.0
            else:
                wait = (1.0 - tokens) / rate
            self._buckets[key] = (tokens, now)
            while len(self._buckets) > self.max_keys:  # forgetting a caller can only favour it
                self._buckets.popitem(last=False)
        return wait

    def __len__(self) -> int:
        return len(self._buckets)


class MemoryLimits:
    """Rates and caps in this process; a claim's sessions are checked against `store` (its idle expiry included).

    Without a store, counted sessions live until released.
    """

    def __init__(
        self, store: InMemorySessionStore | None = None, *, max_keys: int = 10_000, grace_ms: int = CLAIM_GRACE_MS
    ) -> None:
        self.store = store
        self.grace = grace_ms / 1000
        self.max_keys = max_keys
        self._clock = store._clock if store is not None else time.monotonic  # the store's clock ages its sessions
        self.buckets = TokenBuckets(max_keys)
        self._lock = threading.Lock()
        self._owners: dict[tuple[str, str], dict[str, float]] = {}  # (kind, owner) -> session id -> claimed at

    def take(self, key: str, per_minute: float, burst: int, cost: int = 1) -> float:
        return self.buckets.take(key, per_minute, burst, cost=cost)

    def _remaining(self, session_id: str, claimed: float, now: float) -> float | None:
        """Seconds the session still lives if idle (inf: no expiry); None when it is gone."""
        if self.store is None:
            return math.inf
        left = self.store.expires_in(session_id)
        if left is None and now - claimed < self.grace:
            return math.inf  # claimed a moment ago: being created
        return left

    def _sweep(self, now: float) -> None:
        """Forget owners none of whose sessions live (called with the lock held, when there are many)."""
        for owner_key, held in list(self._owners.items()):
            if all(self._remaining(sid, at, now) is None for sid, at in held.items()):
                del self._owners[owner_key]

    def claim(self, kind: str, owner: str, session_id: str, limit: int) -> Claim:
        now = self._clock()
        with self._lock:
            if len(self._owners) > self.max_keys:
                self._sweep(now)
            held = self._owners.setdefault((kind, owner), {})
            alive = {sid: self._remaining(sid, at, now) for sid, at in held.items()}
            for sid, left in alive.items():
                if left is None:
                    del held[sid]
            if session_id in held or len(held) < limit:
                held.setdefault(session_id, now)
                return Claim(True, len(held))
            soonest = min((left for left in alive.values() if left is not None), default=math.inf)
            return Claim(False, len(held), None if math.isinf(soonest) else soonest)

    def release(self, kind: str, owner: str, session_id: str) -> None:
        with self._lock:
            held = self._owners.get((kind, owner))
            if held is not None:
                held.pop(session_id, None)
                if not held:
                    del self._owners[(kind, owner)]

    def touch(self, kind: str, owner: str, session_id: str) -> bool:
        alive = self.store is None or self.store.get(session_id) is not None  # a read renews its idle expiry
        if alive:
            with self._lock:
                self._owners.setdefault((kind, owner), {}).setdefault(session_id, self._clock())
        return alive


# A token bucket on Redis's clock, so every worker refills it alike. Returns the wait as a string
# (a Lua number would be truncated to an integer on the way out).
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(bucket[1]) or burst
local at = tonumber(bucket[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - tonumber(ARGV[3]) else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000) + 1000)
return tostring(wait)
"""

# KEYS[1] the owner's set; ARGV: session key prefix, the session id, the limit, grace ms, session TTL ms ('' none).
# Members whose session key is gone (and that are past the grace) are dropped before counting.
_CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local grace = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local soonest = -1
local members = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #members, 2 do
  local member = members[i]
  local left = redis.call('PTTL', ARGV[1] .. member)
  if left == -2 and now - tonumber(members[i + 1]) > grace then
    redis.call('ZREM', KEYS[1], member)
  else
    if left == -2 then left = ttl or -1 end
    if left >= 0 and (soonest < 0 or left < soonest) then soonest = left end
  end
end
local count = redis.call('ZCARD', KEYS[1])
local granted = 0
if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  granted = 1
elseif count < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now, ARGV[2])
  count = count + 1
  granted = 1
end
if ttl then
  -- twice the sessions' TTL, never shortened: the set outlives every session it counts while its owner is active
  if redis.call('PTTL', KEYS[1]) < 2 * ttl + grace then redis.call('PEXPIRE', KEYS[1], 2 * ttl + grace) end
elseif count > 0 then
  redis.call('PERSIST', KEYS[1])
end
if count == 0 then redis.call('DEL', KEYS[1]) end
return {granted, count, soonest}
"""

# KEYS[1] the session, KEYS[2] the owner's set; ARGV: the session id, session TTL ms ('' none), grace ms.
_TOUCH = """
local alive
if ARGV[2] == '' then
  alive = redis.call('EXISTS', KEYS[1])
else
  alive = redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if alive == 1 then
  if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
    local t = redis.call('TIME')
    redis.call('ZADD', KEYS[2], tonumber(t[1]) * 1000, ARGV[1])
  end
  if ARGV[2] ~= '' then
    local keep = 2 * tonumber(ARGV[2]) + tonumber(ARGV[3])
    if redis.call('PTTL', KEYS[2]) < keep then redis.call('PEXPIRE', KEYS[2], keep) end
  end
end
return alive
"""


class RedisLimits:
    """Rates and caps in the Redis of a RedisSessionStore (its connections, key prefix and timeout).

    Every call is one script; a Redis that does not answer raises SessionStoreError naming the URL.
    """

    def __init__(self, store: RedisSessionStore, *, grace_ms: int = CLAIM_GRACE_MS) -> None:
        self.store = store
        self.grace_ms = grace_ms
        client = store._client
        self._take = client.register_script(_TAKE)
        self._claim = client.register_script(_CLAIM)
        self._touch = client.register_script(_TOUCH)

    def _owner_key(self, kind: str, owner: str) -> str:
        return f"{self.store.prefix}owner:{kind}:{owner}"

    def _ttl(self) -> str:
        return "" if self.store._ttl_ms is None else str(self.store._ttl_ms)

    def take(self, key: str, per_minute: float, burst: int, cost: int = 1) -> float:
        raw = self.store._call(
            "count a request",
            self._take,
            keys=[f"{self.store.prefix}rate:{key}"],
            args=[per_minute / 60.0, burst, cost],
        )
        return float(raw.decode() if isinstance(raw, bytes) else raw)

    def claim(self, kind: str, owner: str, session_id: str, limit: int) -> Claim:
        args = [self.store.key(""), session_id, limit, self.grace_ms, self._ttl()]
        granted, count, soonest = self.store._call(
            "count a caller's sessions", self._claim, keys=[self._owner_key(kind, owner)], args=args
        )
        return Claim(bool(granted), int(count), None if int(soonest) < 0 else int(soonest) / 1000)

    def release(self, kind: str, owner: str, session_id: str) -> None:
        self.store._call("forget a caller's session", self.store._client.zrem, self._owner_key(kind, owner), session_id)

    def touch(self, kind: str, owner: str, session_id: str) -> bool:
        keys = [self.store.key(session_id), self._owner_key(kind, owner)]
        args = [session_id, self._ttl(), self.grace_ms]
        alive = self.store._call("check a session", self._touch, keys=keys, args=args)
        return bool(alive)


def limits_for(store: object) -> CallerLimits:
    """The limits kept beside `store`: in its Redis for a RedisSessionStore, else in this process."""
    from .memory import InMemorySessionStore
    from .redis import RedisSessionStore  # redis-py itself loads only when such a store is made

    if isinstance(store, InMemorySessionStore):
        return MemoryLimits(store)
    if isinstance(store, RedisSessionStore):
        return RedisLimits(store)
    return MemoryLimits()
