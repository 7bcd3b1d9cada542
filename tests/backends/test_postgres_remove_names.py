"""`PostgresIndex.remove` makes the one check `ToolIndex.remove` makes (a name spelt otherwise than a tool's, in case
or Unicode form, removes nothing and warns, naming the tool that stays), against the catalog as the store holds it."""

from __future__ import annotations

import warnings

import pytest
from pg_server import PostgresServer, pg_server, word_embedder  # noqa: F401  (a fixture)

from toolsearch import Tool
from toolsearch.pg import PostgresIndex

pytestmark = pytest.mark.slow

TOOLS = [Tool("delete_repo", "Delete a GitHub repository"), Tool("send_email", "Send an email"),
         Tool("caf\u00e9_order", "Order a coffee")]


def _open(dsn: str, name: str, tools: list[Tool] | None = None) -> PostgresIndex:
    return PostgresIndex.open(dsn, name, tools, poll=None, embedder=word_embedder(), cache=False)


def test_removing_a_name_spelt_otherwise_warns_naming_the_tool_that_stays(pg_server: PostgresServer) -> None:  # noqa: F811
    index = _open(pg_server.dsn(), "near-names", TOOLS)
    try:
        with pytest.warns(UserWarning, match="PostgresIndex.remove: no tool is named 'Delete_Repo', so none was "
                                             "removed; 'delete_repo'"):
            index.remove(["send_email", "Delete_Repo"])
        with pytest.warns(UserWarning, match="Unicode form"):
            index.remove(["cafe\u0301_order"])
        assert sorted(index.catalog.names) == ["caf\u00e9_order", "delete_repo"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # neither call warns: the near name is removed by the same call, or none
            index.remove(["delete_repo", "Delete_Repo", "never_existed"])
            index.remove(["delete_repo"])  # a retry after the removal is harmless
        assert index.catalog.names == ["caf\u00e9_order"]
    finally:
        index.close()


def test_the_check_reads_the_catalog_another_process_changed_since(pg_server: PostgresServer) -> None:  # noqa: F811
    # Before: the check read this process's copy of an older version (it follows changes once a second, or not at all
    # with poll=None), which still held 'delete_repo': no warning, though the removal removed nothing and
    # 'Delete_Repo', which another process had put in its place, stayed searchable and callable.
    mine = _open(pg_server.dsn(), "near-stale", TOOLS)
    other = _open(pg_server.dsn(), "near-stale")
    try:
        other.remove(["delete_repo"])
        other.upsert([Tool("Delete_Repo", "Delete a GitHub repository (renamed)")])
        assert "delete_repo" in mine.catalog  # this process has not caught up
        with pytest.warns(UserWarning, match="no tool is named 'delete_repo', so none was removed; 'Delete_Repo'"):
            mine.remove(["delete_repo"])
        assert "Delete_Repo" in mine.catalog and "delete_repo" not in mine.catalog
    finally:
        mine.close()
        other.close()
