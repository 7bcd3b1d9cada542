"""The checked files toolsearch keeps in its cache folder: a magic line, a BLAKE2b checksum, the body; written whole.

Two kinds use it: the embedding cache's shard keys (`embeddings`: the checksum also covers the shard's matrix file)
and the kept onnxruntime query graphs (`_bert_onnx`). Each reader says in its own words what is wrong with a file
that fails (another kind of file, a checksum that does not match) and decides what follows (a shard dropped, a graph
built again).
A temporary file that a writer killed midway left is removed by a later writer of the folder (`sweep_abandoned`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Framing", "checksum", "sweep_abandoned", "write_whole"]

CHECKSUM_BYTES = 32
# A temporary file older than this (seconds) was left by a writer that was killed: a write takes well under one.
ABANDONED_AFTER = 3600.0


def checksum(*parts: bytes) -> bytes:
    """BLAKE2b (32 bytes) of the parts one after another, without joining them (a shard's matrix can be large)."""
    digest = hashlib.blake2b(digest_size=CHECKSUM_BYTES)
    for part in parts:
        digest.update(part)
    return digest.digest()


@dataclass(frozen=True)
class Framing:
    """One kind of file: `magic` (its layout and version), the checksum of the body, the body.

    `covering`: bytes kept in another file (a shard's matrix) that the checksum vouches for too, after the body.
    """

    magic: bytes

    def frame(self, body: bytes, *, covering: bytes = b"") -> bytes:
        return self.magic + checksum(body, covering) + body

    def unframe(self, raw: bytes, *, covering: bytes = b"") -> tuple[bytes | None, bool]:
        """(the body, whether the checksum matches it); (None, False) for a file that does not start with `magic`."""
        if not raw.startswith(self.magic):
            return None, False
        head = len(self.magic) + CHECKSUM_BYTES
        body = raw[head:]
        return body, raw[len(self.magic) : head] == checksum(body, covering)


def write_whole(files: Mapping[Path, bytes]) -> None:
    """Write each file under a temporary name beside it, synced to disk, then rename them over their paths in the
    order given: a reader sees each whole, old or new, and a later one only once the earlier ones are in place;
    concurrent writers each rename a whole file of their own. A failure (a full disk, Ctrl-C) leaves no temporary
    file behind and propagates; the folder must exist."""
    # `.NAME.PID-UUID.tmp`: the form `sweep_abandoned` finds a killed writer's by
    temporary = {path: path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex}.tmp") for path in files}
    try:
        for path, data in files.items():
            with temporary[path].open("wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        for path, tmp in temporary.items():
            os.replace(tmp, path)
    except BaseException:
        for tmp in temporary.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise


def sweep_abandoned(folder: Path, *names: str) -> None:
    """Remove the temporary files `write_whole` left in `folder` for files named like one of `names` (glob patterns)
    when its process was killed while writing (SIGKILL, the OOM killer, a power loss: no cleanup ran), once they are
    older than ABANDONED_AFTER; a younger one may be another process's write in progress. Each writer of a folder
    calls it after its own writes, so none stays for good. What cannot be removed stays, unsaid: it costs space only.
    """
    now = time.time()
    for name in names:
        for tmp in folder.glob(f".{name}.*-*.tmp"):
            with contextlib.suppress(OSError):
                if now - tmp.stat().st_mtime > ABANDONED_AFTER:
                    tmp.unlink()
