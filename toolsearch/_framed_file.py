"""The checked files toolsearch keeps in its cache folder: a magic line, a BLAKE2b checksum, the body; written whole.

Two kinds use it: the embedding cache's shard keys (`embeddings`: the checksum also covers the shard's matrix file)
and the kept onnxruntime query graphs (`_bert_onnx`). Each reader says in its own words what is wrong with a file
that fails (another kind of file, a checksum that does not match) and decides what follows (a shard dropped, a graph
built again).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CHECKSUM_BYTES", "Framing", "checksum", "write_whole"]

CHECKSUM_BYTES = 32


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
