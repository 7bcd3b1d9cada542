"""A wire-format plug-in whose `parse_call` raises on a call that is not its shape is skipped, named in a warning.

The plug-in is installed the way pip lays it out (a dist-info beside its module, on sys.path) and found through
its `toolsearch.wire_formats` entry point, as in production. It assumes every call is its own shape and raises
KeyError otherwise, where the contract says to return None: the call must still get the answer toolsearch gives
it, not the plug-in's bare KeyError.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugin_site import write_distribution

from toolsearch import ArgumentTypeError, PluginWarning
from toolsearch.plugins import rescan
from toolsearch.providers import ToolCall, parse_tool_call

ACME = '''
from toolsearch.providers import ToolCall, WireFormat

def parse(data, search_name):
    return ToolCall(data["call_id"], data["tool"], {})  # assumes its own shape: raises KeyError on any other

ACME = WireFormat("acme_chat", "Acme", render_tool=lambda t, a: {"tool": a}, parse_call=parse,
                  render_result=lambda c, content, e: {"r": content})
'''


@pytest.fixture()
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    write_distribution(site, "acme-fmt", {"toolsearch.wire_formats": {"acme_chat": "acme_fmt:ACME"}}, acme_fmt=ACME)
    rescan()
    yield
    sys.modules.pop("acme_fmt", None)
    rescan()


def test_a_plugin_whose_parse_call_raises_leaves_the_call_its_own_answer(acme: None) -> None:
    with pytest.warns(PluginWarning, match=(
        r"the tool format 'acme_chat' \(entry point acme_chat = 'acme_fmt:ACME' in group 'toolsearch.wire_formats' "
        r"of acme-fmt 1.0\) raised KeyError: 'call_id' in parse_call, so it was skipped for this call"
    )), pytest.raises(ArgumentTypeError, match=r"a tool call needs at least a 'name'; got keys \['arguments'\]"):
        parse_tool_call({"arguments": "{}"})


def test_the_plugin_still_reads_its_own_calls(acme: None) -> None:
    assert parse_tool_call({"call_id": "a1", "tool": "lookup"}) == ToolCall("a1", "lookup", {})
