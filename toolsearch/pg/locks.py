"""Who holds a catalog's locks, as pg_locks and pg_stat_activity tell: the catalog row its writers take turns on, and
the build lock (an advisory lock) its builds and syncs take turns on; and the one wait for either, which logs whom it
waits for."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .._turns import WORD_EVERY

__all__ = ["Holder", "row_lock_holder", "advisory_lock_holder", "held_by", "wait_turn"]

# a session in pg_stat_activity: what a role may see of another's (a role without pg_read_all_stats sees the pid only)
_SESSION = ("a.application_name, host(a.client_addr), a.backend_start, a.xact_start, a.state, a.wait_event, "
            "extract(epoch FROM clock_timestamp() - a.state_change)::float8")


@dataclass(frozen=True, slots=True)
class Holder:
    """A Postgres session that holds a lock, with what is visible of it."""

    pid: int
    application: str | None = None
    client: str | None = None
    connected: datetime | None = None
    transaction: datetime | None = None  # when its transaction began
    state: str | None = None  # 'active', 'idle in transaction', ...; None when this role may not see it
    wait_event: str | None = None
    for_seconds: float | None = None  # how long it has been in `state`

    def running(self) -> bool:
        """Whether it runs a statement now (not one stalled reading from its client, a COPY whose client stopped)."""
        return self.state == "active" and self.wait_event != "ClientRead"

    def idle_for(self) -> float | None:
        """Seconds it has sat in its transaction without running a statement; None when that is not visible."""
        return self._silent_for("idle in transaction")

    def quiet_for(self) -> float | None:
        """Seconds since it last ran a statement, in a transaction or out of one: what tells a build lock's holder,
        whose lock connection beats while it works (`_advisory_lock`), from a stopped one; None when not visible."""
        return self._silent_for("idle")

    def _silent_for(self, states: str) -> float | None:
        """0 while it runs a statement; the seconds it has been in a state starting `states`; else None."""
        if self.running():
            return 0.0
        if self.state is not None and self.state.startswith(states):
            return self.for_seconds
        return None

    def describe(self) -> str:
        if self.connected is None:
            return f"Postgres session PID {self.pid}"
        text = (f"Postgres session PID {self.pid}, application {self.application or 'unnamed'!r}, client "
                f"{self.client or 'local socket'}, connected since {self.connected:%Y-%m-%d %H:%M:%S %Z}")
        if self.transaction is not None:
            text += f", in its transaction since {self.transaction:%H:%M:%S %Z}"
        idle = self.idle_for()
        if self.running():
            text += ", running a statement"
        elif idle is not None:
            text += f", idle in it for {idle:.0f} s"
        return text


def _holder(found: Any) -> Holder | None:
    return None if found is None else Holder(*found)


def row_lock_holder(conn: Any, name: str) -> Holder | None:
    """The session whose transaction holds the row of the catalog `name` (`SELECT ... FOR UPDATE`, or a change of it);
    None when none is found. Read from the row's xmax (the holder's transaction id) and checked against the sessions
    holding a row lock on the catalogs table; when the xmax names none (several lockers share it), the one session
    that holds such a lock, if only one does."""
    found = conn.execute(
        f"SELECT l.pid, {_SESSION} FROM toolsearch_catalogs AS c "
        "JOIN pg_locks AS l ON l.locktype = 'transactionid' AND l.transactionid = c.xmax AND l.mode = 'ExclusiveLock' "
        "AND l.granted JOIN pg_locks AS r ON r.pid = l.pid AND r.locktype = 'relation' AND r.granted "
        "AND r.relation = 'toolsearch_catalogs'::regclass AND r.mode IN ('RowShareLock', 'RowExclusiveLock') "
        "LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid WHERE c.name = %s AND l.pid <> pg_backend_pid() LIMIT 1",
        (name,),
    ).fetchone()
    if found is not None:
        return _holder(found)
    lockers = conn.execute(
        f"SELECT r.pid, {_SESSION} FROM pg_locks AS r LEFT JOIN pg_stat_activity AS a ON a.pid = r.pid "
        "WHERE r.locktype = 'relation' AND r.granted AND r.relation = 'toolsearch_catalogs'::regclass "
        "AND r.mode = 'RowShareLock' AND r.pid <> pg_backend_pid() LIMIT 2"
    ).fetchall()
    return _holder(lockers[0]) if len(lockers) == 1 else None


def advisory_lock_holder(conn: Any, space: int, key: int) -> Holder | None:
    """The session that holds the session-level advisory lock (`space`, `key`); None when none does."""
    return _holder(conn.execute(
        f"SELECT l.pid, {_SESSION} FROM pg_locks AS l LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = %s AND l.objid::bigint = %s "
        "AND l.objsubid = 2",
        (space, key & 0xFFFFFFFF),
    ).fetchone())


def held_by(holder: Holder | None) -> str:
    """The holder of a lock as a message names it, also when it was not found."""
    if holder is None:
        return "a session this role may not see (pg_read_all_stats shows it), or one that just ended"
    return holder.describe()


def wait_turn(
    take: Callable[[], bool],
    find_holder: Callable[[], Holder | None],
    say: Callable[[float, Holder | None], None],
    *,
    patience: float,
    bound: float,
    stalled: Callable[[Holder | None, float], BaseException],
    quiet: Callable[[Holder], float | None] = Holder.idle_for,
    unseen_counts: bool = True,
) -> None:
    """Call `take` until it says the wait is over (True), pausing 0.05 s and then twice as long each time, up to 0.5 s.

    Another's lock is held for as long as its work takes (minutes, for a build of many tools): that is its turn, not
    a failure. After `patience` seconds `say(waited, holder)` logs whom this one waits for, and again every minute,
    so that a stuck holder is found. A holder `quiet` for `bound` seconds (by default
    idle in its transaction: running no statement) is given up on: `stalled(holder, waited)` is raised. One whose
    state is not visible (a session this role may not see, or none found) counts as quiet for as long as this one has
    waited, unless `unseen_counts` is False: then only a holder seen to be quiet is given up on, and one not found
    (it may have just let go) is tried again."""
    started = time.monotonic()
    word_at, pause = started + patience, 0.05
    while not take():
        now = time.monotonic()
        waited = now - started
        past_bound = waited >= bound
        if now >= word_at or past_bound:
            holder = find_holder()
            if past_bound:
                idle = None if holder is None else quiet(holder)
                if idle is None and not unseen_counts:
                    idle = 0.0  # cannot tell: wait on, as for a busy holder
                if (waited if idle is None else idle) >= bound:
                    raise stalled(holder, waited)
            if now >= word_at:
                say(waited, holder)
                word_at = now + WORD_EVERY
        time.sleep(pause)
        pause = min(2 * pause, 0.5)
