"""What writers that take turns on a lock share, on a local file (store) or in Postgres (pg): the host name a holder
signs the lock with, and the pace of its beat and of a waiter's word."""

from __future__ import annotations

import socket

__all__ = ["BEAT_EVERY", "SILENCE_AT_LEAST", "WORD_EVERY", "host_name"]

# A holder beats while it holds the lock (a touch of its lock file, a statement on its lock connection), from a thread
# of its own, so that a waiter tells a busy holder (a build of many tools holds it for minutes) from a stopped one
# (Ctrl-Z, SIGSTOP, a paused VM), whose beat stops with it. Fixed, not taken from the holder's own lock_wait, as each
# waiter judges silence by its own; short, so that a lock_wait of a few seconds still tells.
BEAT_EVERY = 0.5
SILENCE_AT_LEAST = 6 * BEAT_EVERY  # the shortest silence a waiter takes for a stop, whatever its lock_wait
WORD_EVERY = 60.0  # seconds between the log lines of a process that waits for a lock another holds


def host_name() -> str:
    """This machine's name as text a lock file, a message and a Postgres connection's name can hold: Linux lets it be
    any bytes, and a name that is not UTF-8 (Latin-1 `café-box`) is written with backslash escapes, not refused (it
    failed every local write, and every Postgres build before it connected)."""
    return socket.gethostname().encode("utf-8", "backslashreplace").decode("utf-8")
