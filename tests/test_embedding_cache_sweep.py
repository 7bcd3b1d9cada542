"""Temporary shard files that a process killed while writing them left in the embedding cache are swept once old."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

from toolsearch.embeddings import EmbeddingCache

# A put killed (SIGKILL: no handler runs) at the first fsync of its shard's matrix file, as a kill -9, the OOM killer
# or a power loss in that moment would leave it.
_PUT_KILLED_WHILE_WRITING = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    from toolsearch.embeddings import EmbeddingCache

    real_fsync = os.fsync
    def fsync(fd):
        real_fsync(fd)
        os.kill(os.getpid(), signal.SIGKILL)
    os.fsync = fsync
    EmbeddingCache(sys.argv[1]).put("m", [bytes(32)], np.ones((1, 8), np.float32))
    """
)


def _killed_put(root: Path) -> Path:
    folder = EmbeddingCache(root).folder("m")
    before = set(folder.glob("*")) if folder.exists() else set()
    done = subprocess.run([sys.executable, "-c", _PUT_KILLED_WHILE_WRITING, str(root)], capture_output=True,
                          timeout=120)
    assert done.returncode == -9, done.stderr[-2000:]
    (left,) = set(folder.glob("*")) - before
    return left


def test_a_shard_file_a_killed_writer_left_is_removed_by_a_later_write_once_it_is_old(tmp_path: Path) -> None:
    # Before: it stayed for good (up to ~6 MB each: a shard holds up to 4,096 vectors); no write, merge or read
    # removed it, where the query graphs' were swept after an hour.
    abandoned = _killed_put(tmp_path)
    assert abandoned.name.startswith(".") and ".vectors2." in abandoned.name and abandoned.name.endswith(".tmp")
    two_hours_ago = time.time() - 2 * 3600
    os.utime(abandoned, (two_hours_ago, two_hours_ago))
    recent = _killed_put(tmp_path)  # as another process's write in progress would look
    foreign = abandoned.with_name(".my-notes.tmp")  # not a file toolsearch writes: never touched
    foreign.write_text("mine")
    os.utime(foreign, (two_hours_ago, two_hours_ago))

    cache = EmbeddingCache(tmp_path)
    cache.put("m", [bytes([1]) * 32], np.full((1, 8), 2.0, np.float32))
    assert not abandoned.exists()
    assert recent.exists() and foreign.exists()
    assert cache.get("m", [bytes([1]) * 32])[0] is not None  # the write itself went ahead
