"""`toolsearch tune --usage URL` finds a usage store by its URL's scheme as the stores do: in any case, so a plug-in
named `AcmeDB` is read for `AcmeDB://` and `acmedb://` alike."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from plugin_site import write_distribution

from toolsearch import Tool, ToolIndex
from toolsearch.cli import EXIT_USER_ERROR, main
from toolsearch.plugins import rescan

TOOLS = [
    Tool("send_email", "Send an email message to one or more recipients."),
    Tool("get_weather", "Current weather and forecast for a city."),
]

ACME_USAGE = """\
from pathlib import Path
from toolsearch.usage import InMemoryUsageStore

def open_usage(url, *, path=None, **options):
    Path(__file__).with_name("opened.txt").write_text(url)  # which URL the CLI opened this store for
    return InMemoryUsageStore()
"""


@pytest.mark.parametrize("url", ["acmedb://host/0", "AcmeDB://host/0", "ACMEDB://host/0"])
def test_tune_reads_a_usage_store_plugin_whose_name_has_capitals(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: the scheme was looked up in lower case ('acmedb') by exact name, which no plug-in has, so the URL was
    # read as an export file ("AcmeDB://host/0 is not a readable usage export ([Errno 2] No such file or directory:
    # 'AcmeDB:/host/0')") and the plug-in's store was never opened.
    entry_points = {"toolsearch.usage_stores": {"AcmeDB": "acme_usage:open_usage"}}
    site = write_distribution(tmp_path / "site", "acme-usage", entry_points, acme_usage=ACME_USAGE)
    monkeypatch.syspath_prepend(str(site))
    rescan()
    try:
        folder = ToolIndex.build(TOOLS, backend="hybrid").save(tmp_path / "idx")
        assert main(["tune", str(folder), "--usage", url]) == EXIT_USER_ERROR
        said = capsys.readouterr().err
        assert (site / "opened.txt").read_text() == url  # the plug-in's store was the one read
        assert "the usage log is empty" in said, said  # and found empty (it keeps nothing), as tune says
    finally:
        sys.modules.pop("acme_usage", None)
        monkeypatch.undo()
        rescan()
