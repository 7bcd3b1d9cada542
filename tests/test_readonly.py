"""Indexes on a real read-only mount open and answer for every backend (as indexes ship in images)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from toolsearch import IndexStore, Tool

BACKENDS = ["bm25", "regex", "vector", "hybrid"]
TOOLS = [Tool("send_email", "Send an email message to a recipient."), Tool("get_weather", "Weather for a city.")]

OPEN_ALL = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from toolsearch import IndexStore, ToolSearchError
    root = Path(sys.argv[1])
    try:
        (root / "probe").write_text("x")
        writable = True
    except OSError:
        writable = False
    out = {"writable": writable}
    for name in sys.argv[2:]:
        try:
            out[name] = IndexStore(root).open(name).search("send an email", 1).names
        except ToolSearchError as exc:
            out[name] = str(exc)
    print(json.dumps(out))
""")


def _unshare() -> list[str] | None:
    """The command prefix that runs a shell in a private mount namespace, when this machine allows it."""
    tool = shutil.which("unshare")
    if tool is None or os.geteuid() != 0:
        return None
    probe = subprocess.run([tool, "-m", "true"], capture_output=True)
    return [tool, "-m", "sh", "-c"] if probe.returncode == 0 else None


def test_every_backend_opens_from_a_read_only_mount(tmp_path: Path) -> None:
    # Before: bm25 and hybrid failed with "Failed to acquire Lockfile ... Read-only file system;
    # rebuild the index" (tantivy's reader takes .tantivy-meta.lock with a write open).
    prefix = _unshare()
    if prefix is None:
        pytest.skip("read-only mount: needs root and unshare -m (a bind mount remounted read-only)")
    source, mount = tmp_path / "src", tmp_path / "ro"
    mount.mkdir()
    for backend in BACKENDS:
        IndexStore(source).build(TOOLS, backend, backend)
    script = tmp_path / "open_all.py"
    script.write_text(OPEN_ALL)
    shell = (f"mount --bind {source} {mount} && mount -o remount,bind,ro {mount} && "
             f"exec {sys.executable} {script} {mount} {' '.join(BACKENDS)}")
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    run = subprocess.run([*prefix, shell], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert result.pop("writable") is False  # the mount is really read-only, even for root
    assert result == {backend: ["send_email"] for backend in BACKENDS}
    # the private copies (in the process's toolsearch-* folder) went with the process
    assert not [p for p in (tmp_path / "tmp").iterdir() if p.name.startswith("toolsearch-")]
