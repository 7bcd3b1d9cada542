"""Stored indexes as generations behind one pointer: readers during rebuilds, open indexes beside writers, rival
builders, killed builds, modes."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from toolsearch import IndexFormatError, IndexStore, Tool, ToolIndex
from toolsearch.store import MADE_MARK, MANIFEST, read_manifest

PYTHON = sys.executable


def _catalog(flavour: str) -> list[Tool]:
    """Equal names and count; the descriptions decide which tool a query finds."""
    words = {"a": ("invoice", "weather"), "b": ("weather", "invoice")}[flavour]
    return [
        Tool("tool_one", f"Create a customer {words[0]} quickly."),
        Tool("tool_two", f"Look up the {words[1]} report for a city."),
        *(Tool(f"filler_{i}", f"Unrelated helper number {i} for files.") for i in range(8)),
    ]


# The reader: open the named index again and again, and check that what it found is what the
# catalog it loaded says (a mixed index ranks by one build's files and describes by another's).
READER = textwrap.dedent("""
    import json, sys
    from toolsearch import IndexStore, ToolSearchError
    from pathlib import Path
    store, name, stop = IndexStore(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    opens = wrong = errors = 0
    seen = set()
    while not stop.exists():  # until the builder has finished its rounds
        opens += 1
        try:
            index = store.open(name)
        except ToolSearchError as exc:
            errors += 1
            print("error:", exc, file=sys.stderr)
            continue
        expected = "tool_one" if "invoice" in index.catalog["tool_one"].description else "tool_two"
        if not seen:
            print("reading", flush=True)
        seen.add(expected)
        hits = index.search("invoice", 1).names
        wrong += hits != [expected]
    print(json.dumps({"opens": opens, "wrong": wrong, "errors": errors, "seen": sorted(seen)}))
""")

BUILDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from toolsearch import IndexStore, Tool
    sys.path.insert(0, sys.argv[4])
    from test_store_generations import _catalog
    store, name, stop, rounds = IndexStore(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), int(sys.argv[5])
    for turn in range(rounds):
        store.build(_catalog("ab"[turn % 2]), "bm25", name, rebuild=True)
    stop.touch()
""")


def test_readers_during_rebuilds_never_see_a_mix(tmp_path: Path) -> None:
    # Before generations, 301 of 1,790 such opens ranked the wrong tool first, silently.
    root, stop = tmp_path / "root", tmp_path / "stop"
    IndexStore(root).build(_catalog("a"), "bm25", "shared")
    here = str(Path(__file__).parent)
    reader = subprocess.Popen([PYTHON, "-c", READER, str(root), "shared", str(stop)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "reading\n"
        subprocess.run([PYTHON, "-c", BUILDER, str(root), "shared", str(stop), here, "16"], timeout=300, check=True)
    finally:
        stop.touch()
        out, err = reader.communicate(timeout=120)
    result = json.loads(out)
    assert result["opens"] >= 50 and result["seen"] == ["tool_one", "tool_two"], result
    assert result["wrong"] == 0 and result["errors"] == 0, (result, err[-2000:])
    IndexStore(root).build(_catalog("a"), "bm25", "shared", rebuild=True)  # no reader now: old builds all go
    generations = [n for n in os.listdir(root) if n.startswith(".shared.gen-")]
    assert generations == [(root / "shared").resolve().name]


def _waiters(lock: Path) -> int:
    """How many processes are blocked on a flock of `lock` (Linux: `->` lines of /proc/locks)."""
    inode = os.stat(lock).st_ino
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for line in lines if "->" in line and line.split()[-3].endswith(f":{inode}"))


RIVAL = textwrap.dedent("""
    import sys
    from toolsearch import IndexStore, StoredIndexError
    sys.path.insert(0, sys.argv[3])
    from test_store_generations import _catalog
    try:
        IndexStore(sys.argv[1]).build(_catalog(sys.argv[2]), "bm25", "rival")
    except StoredIndexError as exc:
        print(exc)
        sys.exit(3)
""")


def test_concurrent_builders_of_one_name_never_win_silently(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    lock = root / ".rival.lock"
    here = str(Path(__file__).parent)
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # both builders queue behind this
        rivals = [subprocess.Popen([PYTHON, "-c", RIVAL, str(root), flavour, here], stdout=subprocess.PIPE, text=True)
                  for flavour in "ab"]
        deadline = time.monotonic() + 120
        while _waiters(lock) < 2:
            assert time.monotonic() < deadline and all(r.poll() is None for r in rivals)
            time.sleep(0.05)
        fcntl.flock(held, fcntl.LOCK_UN)
    outcomes = [(r.wait(timeout=120), r.communicate()[0]) for r in rivals]
    codes = sorted(code for code, _ in outcomes)
    assert codes == [0, 3], outcomes
    loser = next(out for code, out in outcomes if code == 3)
    assert "another build saved the index 'rival'" in loser and "nothing was replaced" in loser
    winner = "ab"[[code for code, _ in outcomes].index(0)]
    stored = IndexStore(root).open("rival")
    assert stored.catalog.hash == ToolIndex.build(_catalog(winner), "regex").catalog.hash


STALLED = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from toolsearch import IndexStore, Tool
    from toolsearch.backends import BackendSpec, get_backend_spec, register_backend
    bm25 = get_backend_spec("bm25")

    class Stalls:
        name = "stalls"
        def __init__(self): self.inner = bm25.create()
        def add(self, tools): self.inner.add(tools)
        def remove(self, names): self.inner.remove(names)
        def search(self, query, k, allowed=None): return self.inner.search(query, k, allowed)
        def describe(self): return {}
        def save(self, folder):
            self.inner.save(folder)
            print("saving", flush=True)
            time.sleep(600)  # killed here, half-way through writing the index

    register_backend(BackendSpec("stalls", lambda **o: Stalls(), bm25.load))
    IndexStore(sys.argv[1]).build([Tool("a"), Tool("b")], "stalls", sys.argv[2], rebuild=True)
""")


def _kill_mid_save(root: Path, name: str) -> None:
    """Start a build of `name` and kill it (-9) while it writes its backend files."""
    build = subprocess.Popen([PYTHON, "-c", STALLED, str(root), name], stdout=subprocess.PIPE, text=True)
    assert build.stdout is not None and build.stdout.readline() == "saving\n"
    build.send_signal(signal.SIGKILL)
    build.wait(timeout=60)


def _left(root: Path, name: str) -> list[str]:
    """What writers of `name` left beside its generations: scratch, trash, the lock file."""
    return sorted(n for n in os.listdir(root) if n.startswith(f".{name}.") and not n.startswith(f".{name}.gen-"))


def test_a_killed_build_leaves_nothing_the_next_build_keeps(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _kill_mid_save(root, "killed")
    scratch = [n for n in os.listdir(root) if n.startswith(".killed.tmp-")]
    assert scratch and not (root / "killed").exists()  # what the killed build left
    IndexStore(root).build([Tool("a")], "regex", "killed")
    assert not [n for n in os.listdir(root) if n.startswith(".killed.tmp-")]
    assert IndexStore(root).open("killed").catalog.names == ["a"]


def test_a_build_that_reuses_its_index_still_clears_what_a_killed_rebuild_left(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store = IndexStore(root)
    store.build([Tool("a")], "regex", "kept")
    _kill_mid_save(root, "kept")
    left = _left(root, "kept")
    assert ".kept.lock" in left and any(n.startswith(".kept.tmp-") for n in left)  # what the killed rebuild left
    _, index, reused = store.build([Tool("a")], "regex", "kept")
    assert reused and index.catalog.names == ["a"]
    assert _left(root, "kept") == []  # before: they stayed until a build of this name wrote a new generation
    assert len([n for n in os.listdir(root) if n.startswith(".kept.gen-")]) == 1


def test_any_build_in_the_folder_clears_what_killed_builds_of_other_names_left(tmp_path: Path) -> None:
    # A default name changes with the catalog (bm25-<key>), so the next build rarely has the killed one's name.
    root = tmp_path / "root"
    _kill_mid_save(root, "first")
    assert _left(root, "first")
    store = IndexStore(root)
    store.build([Tool("b")], "regex", "second")
    assert not [n for n in os.listdir(root) if n.startswith(".first.")]
    assert store.names() == ["second"] and _left(root, "second") == []


def test_a_live_writers_scratch_and_lock_are_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    lock, scratch = root / ".busy.lock", root / ".busy.tmp-18ee68dcdb35d7b6-3e0d596c"
    scratch.mkdir()
    (scratch / MADE_MARK).touch()  # what every folder toolsearch makes holds
    store = IndexStore(root)
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a build of "busy" in another process, writing its scratch
        store.build([Tool("c")], "regex", "other")
        assert scratch.is_dir() and lock.exists()
    store.build([Tool("d")], "regex", "other")  # that writer is gone: what it left goes now
    assert not scratch.exists() and not lock.exists()


def test_a_lock_file_of_no_index_is_left_alone(tmp_path: Path) -> None:
    # e.g. the gateway workers' .build.lock in --index-dir: removing a lock file another program flocks would let
    # two of its processes hold "the lock" at once (one on the removed file, one on a new one)
    root = tmp_path / "root"
    root.mkdir()
    (root / ".build.lock").touch()
    IndexStore(root).build([Tool("a")], "regex", "other")
    assert (root / ".build.lock").exists()


FULL_DISK = textwrap.dedent("""
    import resource, signal, sys
    from toolsearch import IndexStore, Tool, ToolSearchError
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    try:
        IndexStore(sys.argv[1]).build([Tool(f"tool_{i}", "words " * 50) for i in range(100)], "regex", "full")
    except ToolSearchError as exc:
        print(type(exc).__name__, exc)
""")


def test_a_build_stopped_by_a_full_disk_leaves_nothing_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / "root"
    done = subprocess.run([PYTHON, "-c", FULL_DISK, str(root)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    assert said.startswith("StoredIndexError cannot write the index 'full'"), said
    assert "File too large" in said and "nothing was replaced" in said and "Free space there" in said
    assert os.listdir(root) == []  # no scratch, no lock
    IndexStore(root).build([Tool("a")], "regex", "full")
    assert IndexStore(root).names() == ["full"] and _left(root, "full") == []


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_folder_modes_follow_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        IndexStore(tmp_path).build([Tool("a")], "bm25", "modes")
    finally:
        os.umask(old)
    generation = (tmp_path / "modes").resolve()
    for folder in (generation, generation / "backend"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~umask, folder


def test_an_old_layout_folder_says_rebuild_and_the_next_build_replaces_it(tmp_path: Path) -> None:
    store = IndexStore(tmp_path)
    store.build([Tool("a")], "regex", "old")
    legacy = tmp_path / "legacy-copy"
    os.rename((tmp_path / "old").resolve(), legacy)
    (tmp_path / "old").unlink()
    os.rename(legacy, tmp_path / "old")  # a plain folder at the name, as format 2 wrote it
    data = json.loads((tmp_path / "old" / MANIFEST).read_text())
    data["version"] = 2
    (tmp_path / "old" / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(IndexFormatError, match=r"old index format 2.*rebuild"):
        store.open("old")
    _, _, reused = store.build([Tool("a")], "regex", "old")
    assert not reused and (tmp_path / "old").is_symlink()
    assert store.open("old").catalog.names == ["a"] and store.names() == ["old"]
    assert len([n for n in os.listdir(tmp_path) if n.startswith(".old.gen-")]) == 1


def test_a_generation_a_reader_holds_outlives_rebuilds_until_released(tmp_path: Path) -> None:
    store = IndexStore(tmp_path)
    store.build([Tool("a")], "regex", "held")
    first = (tmp_path / "held").resolve()
    with (first / MANIFEST).open("rb") as reading:
        fcntl.flock(reading, fcntl.LOCK_SH)  # what a reader holds while it loads
        store.build([Tool("b")], "regex", "held")
        assert first.is_dir() and store.open("held").catalog.names == ["b"]
    store.build([Tool("c")], "regex", "held")
    assert not first.exists()
    assert [n for n in os.listdir(tmp_path) if n.startswith(".held.gen-")] == [(tmp_path / "held").resolve().name]


def test_a_tampered_manifest_is_caught_and_says_what_to_do(tmp_path: Path) -> None:
    store = IndexStore(tmp_path)
    store.build([Tool("send_email", "Send mail."), Tool("get_weather", "Weather.")], "bm25", "kw")
    path = tmp_path / "kw" / MANIFEST
    original = path.read_text()
    assert '"description": 0.6' in original
    # one flipped bit (0.6 -> 0.7) and a zeroed boost: each changed rankings with health "ok" before
    for edited in ('"description": 0.7', '"description": 0.0'):
        path.write_text(original.replace('"description": 0.6', edited, 1))
        with pytest.raises(IndexFormatError, match=r"does not match its own checksum.*toolsearch build --rebuild"):
            store.open("kw")
        with pytest.raises(IndexFormatError, match="own checksum"):
            read_manifest(tmp_path / "kw")
    path.write_text(original)
    assert store.open("kw").search("weather", 1).names == ["get_weather"]


def test_an_open_index_keeps_the_generation_it_reads_until_it_is_let_go(tmp_path: Path) -> None:
    """An index loaded from a folder reads its files there (tantivy's segments) when it is changed or saved: other
    writers' saves leave that generation until the index is let go, and its own saves under the name move it to the
    generation they wrote, so the one it was loaded from goes with its first save, as with any other save."""
    folder = tmp_path / "idx"

    def generations() -> set[str]:
        return {n for n in os.listdir(tmp_path) if n.startswith(".idx.gen-")}

    ToolIndex.build(_catalog("a"), backend="bm25").save(folder)
    loaded = ToolIndex.load(folder)
    first = folder.resolve()
    ToolIndex.build(_catalog("b"), backend="bm25").save(folder)  # other writers
    ToolIndex.build(_catalog("a"), backend="bm25").save(folder)
    assert first.is_dir() and generations() == {first.name, folder.resolve().name}
    loaded.upsert([Tool("tool_three", "Book a table at a restaurant.")])  # its tantivy files come from `first`
    loaded.save(folder)  # under its own name: it holds what it wrote, and `first` goes
    assert not first.exists() and generations() == {folder.resolve().name}
    assert ToolIndex.load(folder).search("restaurant table", 1).names == ["tool_three"]
    del loaded
    # an index that saves itself twice: the second save copies what the first wrote
    own = ToolIndex.load(folder)
    own.save(folder)
    own.save(folder)
    assert ToolIndex.load(folder).catalog.names == own.catalog.names and len(generations()) == 1
    ToolIndex.build(_catalog("b"), backend="bm25").save(folder)  # another writer: `own` keeps what it reads
    assert len(generations()) == 2
    del own  # let go: the next writer removes what it held
    ToolIndex.build(_catalog("a"), backend="bm25").save(folder)
    assert generations() == {folder.resolve().name}


class OpenIndexesAndWriters(RuleBasedStateMachine):
    """Indexes held open while others load, change and save the same name, in any order: every change and save of
    an open index works, a save is what the next load reads, and nothing outlives the last index let go."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="toolsearch-gens-"))
        self.folder = self.root / "idx"
        ToolIndex.build(_catalog("a"), backend="bm25").save(self.folder)
        self.open: list[ToolIndex] = []
        self.added = 0

    @rule()
    def load(self) -> None:
        self.open.append(ToolIndex.load(self.folder))

    @rule(flavour=st.sampled_from("ab"))
    def another_writer_builds(self, flavour: str) -> None:
        ToolIndex.build(_catalog(flavour), backend="bm25").save(self.folder)

    @precondition(lambda self: self.open)
    @rule(pick=st.integers(0, 7))
    def change_an_open_index(self, pick: int) -> None:
        index = self.open[pick % len(self.open)]
        self.added += 1
        name = f"added_{self.added}"
        index.upsert([Tool(name, f"Reserve seat {self.added} at the zoo{self.added} ticket desk.")])
        assert index.search(f"zoo{self.added}", 1).names == [name]

    @precondition(lambda self: self.open)
    @rule(pick=st.integers(0, 7))
    def save_an_open_index(self, pick: int) -> None:
        index = self.open[pick % len(self.open)]
        index.save(self.folder)
        assert ToolIndex.load(self.folder).catalog.names == index.catalog.names

    @precondition(lambda self: self.open)
    @rule(pick=st.integers(0, 7))
    def let_one_go(self, pick: int) -> None:
        del self.open[pick % len(self.open)]

    def teardown(self) -> None:
        try:
            self.open.clear()
            ToolIndex.build(_catalog("a"), backend="bm25").save(self.folder)
            left = [n for n in os.listdir(self.root) if n.startswith(".idx.")]
            assert left == [self.folder.resolve().name], left
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


OpenIndexesAndWriters.TestCase.settings = settings(max_examples=25, stateful_step_count=12, deadline=None)
test_open_indexes_and_writers_in_any_order = OpenIndexesAndWriters.TestCase


def test_a_backend_without_weak_references_holds_no_descriptor(tmp_path: Path) -> None:
    """Its end cannot be seen, so a descriptor kept for it would stay open for the life of the process, one per load."""
    from toolsearch.store import _Hold

    class Slotted:
        __slots__ = ()

    ToolIndex.build(_catalog("a"), backend="bm25").save(tmp_path / "idx")
    fd = os.open(tmp_path / "idx" / MANIFEST, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # as a reader holds it
    _Hold.attach(Slotted(), (tmp_path / "idx").resolve(), [fd])
    with (tmp_path / "idx" / MANIFEST).open("rb") as writer:
        fcntl.flock(writer, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a writer removing the generation takes: free


# --- what a release before the mark left ---------------------------------------------------------------------------


def _left_by_an_earlier_release(root: Path, name: str) -> list[Path]:
    """What builds and removals of `name` cut short leave when no mark was written (every release before the mark)."""
    _kill_mid_save(root, name)  # killed while it wrote its backend files
    (scratch,) = [root / n for n in os.listdir(root) if n.startswith(f".{name}.tmp-")]
    (scratch / MADE_MARK).unlink()  # the only thing in it an earlier release did not write
    empty = root / f".{name}.tmp-18ee6a55c43d5249-1f0e5cfc"  # killed between its mkdir and its mark
    empty.mkdir()
    cut = root / f".{name}.tmp-18ee6a55c43d524a-2a0e5cfc"  # killed while it wrote the manifest, last
    (cut / "backend").mkdir(parents=True)
    (cut / "tools.jsonl").write_text("{}\n")
    (cut / MANIFEST).write_text('{\n  "form')
    trash = root / f".{name}.trash-18ee6a55c43d524b-3a0e5cfc"  # a removal cut short after its manifest went
    (trash / "backend" / "vector").mkdir(parents=True)
    (trash / "backend" / "vector" / "vectors.npy").write_bytes(b"\0" * 64)
    (trash / "tools.offsets.npy").write_bytes(b"\0" * 16)
    (trash / "tools.table.json").write_text("{}")
    return [scratch, empty, cut, trash]


def _users_look_alikes(root: Path, name: str) -> dict[Path, str]:
    """Folders of the user's with the exact name shape that hold something toolsearch never writes there."""
    notes = root / f".{name}.tmp-18ee6a55c43d524c-4a0e5cfc"
    (notes / "backend").mkdir(parents=True)
    (notes / "tools.jsonl").write_text("my own tools\n")
    (notes / "notes.txt").write_text("my notes")
    app = root / f".{name}.trash-18ee6a55c43d524d-5a0e5cfc"
    (app / "backend").mkdir(parents=True)
    (app / MANIFEST).write_text('{"name": "my web app"}')
    return {notes / "notes.txt": "my notes", app / MANIFEST: '{"name": "my web app"}'}


@pytest.mark.parametrize("then", ["build it again", "build another", "rm it"])
def test_what_builds_of_an_earlier_release_left_unmarked_is_removed(tmp_path: Path, then: str) -> None:
    # Before: a build of a release before the mark, killed, left .NAME.tmp-<id> (its tools and backend files, GBs for
    # a large vector index) that no later build or rm removed, and `list` did not show.
    root = tmp_path / "root"
    store = IndexStore(root)
    store.build([Tool("a")], "regex", "kept")
    left = _left_by_an_earlier_release(root, "kept")
    users = _users_look_alikes(root, "kept")
    if then == "build it again":
        store.build([Tool("a")], "regex", "kept")
    elif then == "build another":
        store.build([Tool("b")], "regex", "other")
    else:
        store.remove("kept")
    assert [p.name for p in left if os.path.lexists(p)] == []
    assert {p: p.read_text() for p in users} == users  # the user's are left as they are
    assert _left(root, "kept") == sorted(p.parent.name for p in users)
