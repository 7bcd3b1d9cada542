"""`toolsearch tune` (toolsearch.training.tune): the rows it learns from, what it refuses, and an index that
carries its own request encoder. Training itself needs torch (the `train` extra), which CI does not install;
benchmarks/results/tune.md measures it, and the refusal without torch is tested here in every environment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from redis_server import RedisServer
from tuned_model import tuned_model  # noqa: F401  (a fixture)

from toolsearch import IndexFormatError, StoredIndexError, Tool, ToolIndex
from toolsearch._errors import BackendError, UsageError
from toolsearch.cli import EXIT_USAGE, EXIT_USER_ERROR, main
from toolsearch.embeddings import ToolsEmbedder, resolve_embedder
from toolsearch.model_file import WEIGHTS_FILE, copy_model, read_card
from toolsearch.stores.usage_redis import RedisUsageStore
from toolsearch.training.tune import TUNED_MODEL_ID, tune_index, usage_anchors
from toolsearch.usage import FileUsageStore, UsageLog, usage_path
from toolsearch.usage_cli import read_usage

pytestmark = pytest.mark.slow  # the real model's weights

TOOLS = [
    Tool("send_email", "Send an email message to one or more recipients."),
    Tool("get_weather", "Current weather and forecast for a city."),
    Tool("create_invoice", "Create a customer invoice with line items."),
    Tool("track_shipment", "Track a parcel by its tracking number."),
]


def raw_log(index: ToolIndex, pairs: list[tuple[str, str]]) -> UsageLog:
    log = UsageLog(index.catalog.hash, privacy="raw")
    for query, tool in pairs:
        log.add(query, tool, [])
    return log


def test_the_log_gives_one_row_per_request_text_with_every_tool_it_led_to() -> None:
    index = ToolIndex.build(TOOLS, backend="bm25")
    log = raw_log(index, [("mail the team", "send_email"), ("mail the team", "create_invoice"),
                          ("rain in Oslo?", "get_weather"), ("rain in Oslo?", "no_such_tool")])
    log.add("bill the client", "send_email", [])
    hashed = UsageLog(index.catalog.hash)
    hashed.add("where is my parcel", "track_shipment", [])
    anchors, skipped = usage_anchors(log, {t.name for t in TOOLS})
    assert {(a.text, a.relevant) for a in anchors} == {
        ("mail the team", ("send_email", "create_invoice")), ("rain in Oslo?", ("get_weather",)),
        ("bill the client", ("send_email",)),
    }
    assert skipped == {"without_text": 0, "unknown_tool": 1}
    assert usage_anchors(hashed, {t.name for t in TOOLS}) == ([], {"without_text": 1, "unknown_tool": 0})


def test_what_tune_cannot_learn_from_is_refused_before_any_training() -> None:
    hybrid = ToolIndex.build(TOOLS, backend="hybrid")
    with pytest.raises(UsageError, match="usage log is empty"):
        tune_index(hybrid, UsageLog(hybrid.catalog.hash, privacy="raw"))
    hashed = UsageLog(hybrid.catalog.hash)
    hashed.add("where is my parcel", "track_shipment", [])
    with pytest.raises(UsageError, match=r"no request text.*privacy 'raw'"):
        tune_index(hybrid, hashed)
    with pytest.raises(UsageError, match="names a tool of this index"):
        tune_index(hybrid, raw_log(hybrid, [("pay the bill", "pay_bill")]))
    lexical = ToolIndex.build(TOOLS, backend="bm25")
    with pytest.raises(BackendError, match="bm25 backend: build it with --backend hybrid"):
        tune_index(lexical, raw_log(lexical, [("where is my parcel", "track_shipment")]))


def test_without_torch_tune_names_the_extra_to_install(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import sys
        sys.modules["torch"] = None  # as on a machine without the train extra
        from toolsearch import Tool, ToolIndex
        from toolsearch.training.tune import tune_index
        from toolsearch.usage import UsageLog
        from toolsearch._errors import MissingDependencyError
        index = ToolIndex.build([Tool("track_shipment", "Track a parcel by its tracking number."),
                                 Tool("get_weather", "Current weather for a city.")], backend="hybrid")
        log = UsageLog(index.catalog.hash, privacy="raw")
        log.add("where is my parcel", "track_shipment", [])
        log.add("make me a coffee", "kitchen_brew_coffee", [])  # a tool of another catalog: left out, and said
        try:
            tune_index(index, log, work=__import__("pathlib").Path(sys.argv[1]))
        except MissingDependencyError as exc:
            print("refused:", exc)
    """)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          timeout=300, env={**os.environ})
    assert proc.returncode == 0, proc.stderr
    assert "refused:" in proc.stdout and "toolsearch[train]" in proc.stdout, proc.stdout
    assert "log entries left out: 1 calling tools this index does not have" in proc.stdout, proc.stdout
    assert list(tmp_path.iterdir()) == []  # the scratch folder is gone


def test_an_index_carries_a_request_encoder_that_does_not_ship(tuned_model: Path, tmp_path: Path) -> None:  # noqa: F811
    embedder = ToolsEmbedder(query_model=tuned_model)
    assert embedder.model_id.startswith(TUNED_MODEL_ID + "@") and embedder.model_id != ToolsEmbedder().model_id
    index = ToolIndex.build(TOOLS, backend="hybrid", embedder=embedder)
    folder = index.save(tmp_path / "idx")
    carried = next(folder.resolve().rglob(WEIGHTS_FILE))
    assert read_card(carried.parent)["sha256"] == embedder.card["sha256"]
    # a folder the caller named may change after the save: the index holds a copy of its own
    assert carried.stat().st_ino != (tuned_model / WEIGHTS_FILE).stat().st_ino
    # a fresh process: nothing but the index folder says which encoder embeds requests
    script = textwrap.dedent("""
        import json, sys
        from toolsearch import ToolIndex
        index = ToolIndex.load(sys.argv[1])
        print(json.dumps([index.backend.describe()["model"], index.search("where is my parcel", k=2).names]))
    """)
    proc = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    model, names = json.loads(proc.stdout)
    assert model == embedder.model_id
    assert names == index.search("where is my parcel", k=2).names
    with pytest.raises(IndexFormatError, match=r"carries its own model.*open it without model="):
        ToolIndex.load(folder, model="tools")
    # a change to the tools keeps it: the new tool is embedded by the document model, requests by the carried one
    reopened = ToolIndex.load(folder)
    reopened.upsert([Tool("book_flight", "Book a flight between two airports on a date.")])
    again = ToolIndex.load(reopened.save(tmp_path / "idx2"))
    assert again.backend.describe()["model"] == embedder.model_id
    assert again.search("fly from Oslo to Rome on Friday", k=1).names == ["book_flight"]
    # saved in place, twice: the first save retires the generation the encoder was read from (the index now holds
    # the one it wrote), and the second still has the encoder to save
    reopened.save(folder)
    # the encoder runs from a private copy, which never changes: the new generation shares its files where the
    # file system allows (no 23 MB copy per save), else copies them
    running = reopened.backend.dense.embedder.folder / WEIGHTS_FILE
    saved = next(folder.resolve().rglob(WEIGHTS_FILE))
    assert saved != carried
    assert (saved.stat().st_ino == running.stat().st_ino) is (saved.stat().st_dev == running.stat().st_dev)
    reopened.upsert([Tool("rent_car", "Rent a car at an airport for some days.")])
    assert not carried.exists()
    assert ToolIndex.load(reopened.save(folder)).search("hire a car in Rome", k=1).names == ["rent_car"]
    # the carried weights are covered by the index's own digests
    carried = next(folder.resolve().rglob(WEIGHTS_FILE))
    with carried.open("r+b") as fh:
        fh.seek(-100, 2)
        fh.write(b"\x00" * 50)
    with pytest.raises(StoredIndexError, match=WEIGHTS_FILE):
        ToolIndex.load(folder)


def test_the_cli_refuses_a_log_without_text_and_bad_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = ToolIndex.build(TOOLS, backend="hybrid")
    folder = index.save(tmp_path / "idx")
    hashed = UsageLog(index.catalog.hash)
    hashed.add("where is my parcel", "track_shipment", [])
    FileUsageStore(usage_path(folder)).save(hashed)
    assert main(["tune", str(folder)]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "no request text" in err and "privacy 'raw'" in err
    assert main(["tune", str(folder), "--epochs", "0"]) == EXIT_USAGE
    assert "--epochs must be at least 1" in capsys.readouterr().err
    assert main(["tune", str(folder), "--usage", str(tmp_path / "missing.json")]) == EXIT_USER_ERROR
    assert "not a readable usage export" in capsys.readouterr().err
    # a usage file of hashed logs (a gateway's default): read, and refused for what it keeps
    assert main(["tune", str(folder), "--usage", str(usage_path(folder))]) == EXIT_USER_ERROR
    assert "no request text" in capsys.readouterr().err


def test_tune_reads_every_log_of_a_usage_file_that_keeps_request_text(tmp_path: Path) -> None:
    # a gateway keeps a log per catalog (a new one whenever an upstream's tools change), in one file
    store = FileUsageStore(tmp_path / "usage.json")
    first, second = UsageLog("catalog-a", privacy="raw"), UsageLog("catalog-b", privacy="raw")
    first.add("mail the team", "send_email", [])
    second.add("mail the team", "send_email", [])  # carried over to the new catalog's log
    second.add("rain in Oslo?", "get_weather", [])
    hashed = UsageLog("catalog-c")
    hashed.add("bill the client", "create_invoice", [])
    for log in (first, second, hashed):
        store.save(log)
    joined = read_usage(str(store.path), "mine")
    assert joined.privacy == "raw" and joined.catalog == "mine" and len(joined) == 3
    anchors, _ = usage_anchors(joined, {t.name for t in TOOLS})
    assert {(a.text, a.relevant) for a in anchors} == {
        ("mail the team", ("send_email",)), ("rain in Oslo?", ("get_weather",))
    }
    store.delete("catalog-a")
    store.delete("catalog-b")
    assert read_usage(str(store.path), "mine").privacy == "hashed"  # nothing kept text: tune says why
    export = tmp_path / "export.json"
    export.write_text(json.dumps(first.to_dict()), encoding="utf-8")
    assert [e.query for e in read_usage(str(export), "mine")] == ["mail the team"]
    store.path.write_text(store.path.read_text().replace("catalog-c", "catalog-d"), encoding="utf-8")
    with pytest.raises(UsageError, match="does not match its checksum"):  # a damaged file is an error, not a guess
        read_usage(str(store.path), "mine")


def test_tune_reads_the_logs_gateway_workers_share_in_redis(
    redis_server: RedisServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = RedisUsageStore(redis_server.url)  # the store and prefix `mcp serve --session-store redis://` uses
    for catalog, privacy, query, tool in [("catalog-a", "raw", "mail the team", "send_email"),
                                          ("catalog-b", "raw", "rain in Oslo?", "get_weather"),
                                          ("catalog-c", "hashed", "bill the client", "create_invoice")]:
        log = store.open_log(catalog, privacy=privacy)  # type: ignore[arg-type]
        store.append(log, [e for e in [log.add(query, tool, [tool])] if e is not None])
    RedisUsageStore(redis_server.url, prefix="elsewhere:").open_log("catalog-z", privacy="raw")  # not this store's
    assert store.catalogs() == ["catalog-a", "catalog-b", "catalog-c"]
    joined = read_usage(redis_server.url, "mine")
    assert joined.catalog == "mine" and sorted(e.query or "" for e in joined) == ["mail the team", "rain in Oslo?"]
    # a store whose logs keep no text is read, and tune refuses it for that, naming the setting to use
    for catalog in ("catalog-a", "catalog-b"):
        store.delete(catalog)
    folder = ToolIndex.build(TOOLS, backend="hybrid").save(tmp_path / "idx")
    assert main(["tune", str(folder), "--usage", redis_server.url]) == EXIT_USER_ERROR
    assert "--usage-privacy raw" in capsys.readouterr().err
    redis_server.stop()
    assert main(["tune", str(folder), "--usage", redis_server.url]) == EXIT_USER_ERROR  # unreachable: said, not hung
    assert "usage store redis://" in capsys.readouterr().err


def test_a_tuned_encoder_is_a_model_anything_that_embeds_can_use(
    tuned_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    tuned_id = ToolsEmbedder(query_model=tuned_model).model_id
    catalog = tmp_path / "tools.json"
    catalog.write_text(json.dumps([t.to_dict() for t in TOOLS]), encoding="utf-8")
    # `--model DIR` builds with it, and the index carries it
    assert main(["build", str(catalog), "--out", str(tmp_path / "idx"), "--backend", "hybrid",
                 "--model", str(tuned_model)]) == 0
    assert ToolIndex.load(tmp_path / "idx").backend.describe()["model"] == tuned_id
    capsys.readouterr()
    assert main(["info", str(tmp_path / "idx")]) == 0  # `info` says so, from the card, without loading the index
    assert f"request encoder  {tuned_id}, carried in the index" in capsys.readouterr().out
    assert main(["info", str(tmp_path / "idx"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["encoder"]["model"] == tuned_id
    assert ToolIndex.load(tmp_path / "idx", model=str(tuned_model)).search("where is my parcel", 1).names == [
        "track_shipment"
    ]
    # `model export` writes it out again, whole and checked, for a gateway or a Postgres catalog
    capsys.readouterr()
    assert main(["model", "export", str(tmp_path / "idx"), "--out", str(tmp_path / "exported")]) == 0
    assert f"use it with --model {tmp_path / 'exported'}" in capsys.readouterr().out
    assert read_card(tmp_path / "exported") == read_card(tuned_model)
    assert ToolIndex.build(TOOLS, "vector", model=str(tmp_path / "exported")).backend.describe()["model"] == tuned_id
    assert main(["model", "export", str(tmp_path / "idx"), "--out", str(tmp_path / "exported")]) == EXIT_USER_ERROR
    assert "not an empty folder" in capsys.readouterr().err
    ToolIndex.build(TOOLS, backend="hybrid").save(tmp_path / "stock")
    assert main(["info", str(tmp_path / "stock"), "--json"]) == 0
    assert "encoder" not in json.loads(capsys.readouterr().out)  # the shipped model is not carried
    assert main(["model", "export", str(tmp_path / "stock"), "--out", str(tmp_path / "none")]) == EXIT_USER_ERROR
    assert "carries no request encoder of its own" in capsys.readouterr().err and not (tmp_path / "none").exists()
    # its id alone cannot find it: the message says where a tuned encoder comes from
    with pytest.raises(BackendError, match=r"pass its folder.*toolsearch model export"):
        resolve_embedder(tuned_id)


def test_a_damaged_encoder_is_not_exported_and_leaves_nothing(tuned_model: Path, tmp_path: Path) -> None:  # noqa: F811
    damaged = tmp_path / "damaged"
    shutil.copytree(tuned_model, damaged)
    with (damaged / WEIGHTS_FILE).open("r+b") as fh:
        fh.seek(-100, 2)
        fh.write(b"\x00" * 50)
    with pytest.raises(BackendError, match="damaged or was replaced"):
        copy_model(damaged, tmp_path / "out")
    assert [p.name for p in tmp_path.iterdir()] == ["damaged"]  # neither the folder asked for nor a half copy


def test_tune_reads_the_logs_of_earlier_catalogs_beside_the_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = ToolIndex.build(TOOLS, backend="hybrid")
    folder = index.save(tmp_path / "idx")
    # Logged before a tool changed and the index was rebuilt: kept under the old catalog's hash.
    earlier = UsageLog("an-earlier-catalog")
    earlier.add("where is my parcel", "track_shipment", [])
    FileUsageStore(usage_path(folder)).save(earlier)
    assert main(["tune", str(folder)]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    # Before: "the usage log is empty", with an entry beside it. Now it is read, and refused for what it keeps.
    assert "1 of the 1 usage entries were recorded for earlier catalogs" in err
    assert "no request text" in err and "privacy 'raw'" in err


@pytest.mark.parametrize(("out", "expected", "needle"), [
    ("bad name", EXIT_USAGE, "invalid index name 'bad name'"),
    ("mine", EXIT_USER_ERROR, "mine exists and is not a toolsearch index; refusing to replace it"),
])
def test_a_tune_target_that_cannot_be_written_is_refused_before_anything_is_read(
    out: str, expected: int, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    index = ToolIndex.build(TOOLS, backend="hybrid")
    folder = index.save(tmp_path / "idx")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's own")
    # A usage file that cannot even be read: before, it (or, with a good log, the whole training) came first,
    # and the refused target was found only when the tuned index was saved.
    usage_path(folder).write_text("{not json")
    code = main(["tune", str(folder), "--out", out])
    err = capsys.readouterr().err
    assert code == expected, err
    assert needle in err and "not a readable usage log" not in err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "the user's own"


def test_build_does_not_replace_a_tuned_index_unless_told_to(
    tuned_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    from toolsearch import IndexStore

    root = tmp_path / "indexes"
    tuned = ToolIndex.build(TOOLS, backend="hybrid", embedder=ToolsEmbedder(query_model=tuned_model))
    IndexStore(root).save(tuned, "mine")
    (tmp_path / "tools.json").write_text(json.dumps([t.to_dict() for t in TOOLS]))
    argv = ["build", str(tmp_path / "tools.json"), "--backend", "hybrid", "--root", str(root), "--name", "mine"]
    # Before: built over it, and the tuned encoder (minutes of training, nowhere else) was gone.
    assert main(argv) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "carries a request encoder" in err and "toolsearch model export mine --out DIR" in err and "--rebuild" in err
    assert ToolIndex.load(root / "mine").backend.describe()["model"] == tuned.backend.describe()["model"]
    # Kept the way the message says: exported, then built from its export over changed tools (no --rebuild).
    assert main(["model", "export", "mine", "--root", str(root), "--out", str(tmp_path / "encoder")]) == 0
    grown = [*TOOLS, Tool("book_flight", "Book a flight between two airports.")]
    (tmp_path / "tools.json").write_text(json.dumps([t.to_dict() for t in grown]))
    assert main([*argv, "--model", str(tmp_path / "encoder")]) == 0
    kept = ToolIndex.load(root / "mine")
    assert len(kept) == len(grown) and kept.backend.describe()["model"] == tuned.backend.describe()["model"]
    assert main([*argv, "--rebuild"]) == 0
    assert ToolIndex.load(root / "mine").backend.describe()["model"] != tuned.backend.describe()["model"]


def test_a_learning_rate_that_is_not_finite_is_refused_before_training(tmp_path: Path) -> None:
    from dataclasses import replace

    from toolsearch._errors import InvalidArgumentError
    from toolsearch.training.tune import TUNE_CONFIG

    index = ToolIndex.build(TOOLS, backend="hybrid")
    log = raw_log(index, [("where is my parcel", "track_shipment")])
    for rate in (float("inf"), float("nan"), -1e-4, 2.0):
        # Before: inf trained NaN weights into the encoder, and `toolsearch tune` saved the index with them.
        with pytest.raises(InvalidArgumentError, match="learning_rate must be a number above 0 and at most 1"):
            tune_index(index, log, config=replace(TUNE_CONFIG, learning_rate=rate), work=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_run_that_diverged_is_refused_and_the_index_and_its_log_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util
    from dataclasses import replace

    from toolsearch import MissingDependencyError
    from toolsearch.training.tune import TUNE_CONFIG

    index = ToolIndex.build(TOOLS, backend="hybrid")
    log = raw_log(index, [("where is my parcel", "track_shipment"), ("mail the report to ana", "send_email")])
    # logits scaled past any float: the loss and then every trained weight are NaN, as a far too large step makes them
    diverging = replace(TUNE_CONFIG, scale=float("inf"), epochs=1, threads=1)
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("sentence_transformers") is None:
        with pytest.raises(MissingDependencyError, match=r"toolsearch\[train\]"):
            tune_index(index, log, config=diverging, work=tmp_path, progress=lambda _: None)
        return
    # The trainer's save writes a model card, for which sentence-transformers looks the base model up on the hub,
    # reading the user's token first: a file beside the clone (tests/clone_only.py), here one that is not there.
    monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(tmp_path / "no-hf-token"))
    work = tmp_path / "work"
    work.mkdir()
    # Before: returned an index whose encoder gave NaN vectors, which `tune` saved in place of the old one.
    with pytest.raises(BackendError, match=r"training diverged.*not finite.*nothing was saved"):
        tune_index(index, log, config=diverging, work=work, progress=lambda _: None)
    assert list(work.iterdir()) == []  # no encoder left half-made
    assert index.search("where is my parcel", k=1).names == ["track_shipment"]


def test_build_does_not_replace_a_tuned_index_that_fails_its_checks_or_is_newer(
    tuned_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    from toolsearch import IndexStore
    from toolsearch.model_file import CARD_FILE
    from toolsearch.store import MANIFEST, manifest_digest

    root = tmp_path / "indexes"
    tuned = ToolIndex.build(TOOLS, backend="hybrid", embedder=ToolsEmbedder(query_model=tuned_model))
    for name in ("damaged", "newer"):
        IndexStore(root).save(tuned, name)
    manifest = (root / "newer").resolve() / MANIFEST
    data = json.loads(manifest.read_text())
    data["version"] += 1  # as a newer toolsearch writes it
    data["digest"] = manifest_digest(data)
    manifest.write_text(json.dumps(data, indent=2))
    (root / "damaged" / MANIFEST).write_text("{")  # its manifest is what fails: the encoder is found from its files
    (tmp_path / "tools.json").write_text(json.dumps([t.to_dict() for t in TOOLS]))
    build = ["build", str(tmp_path / "tools.json"), "--backend", "hybrid", "--root", str(root), "--name"]
    # Before: both were "rebuilt" with a warning, exit 0, and the encoder that existed nowhere else was gone.
    assert main([*build, "damaged"]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "fails its checks" in err and "carries a request encoder of its own" in err and "--rebuild" in err
    assert main([*build, "newer"]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "built by a newer toolsearch" in err and "Upgrade toolsearch" in err and "toolsearch rm newer" in err
    for name in ("damaged", "newer"):
        assert list((root / name).resolve().rglob(CARD_FILE)), name  # the encoder is still there
    assert main([*build, "damaged", "--rebuild"]) == 0  # told to: replaced, encoder and all
    assert not list((root / "damaged").resolve().rglob(CARD_FILE))
