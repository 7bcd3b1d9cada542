"""ToolPolicy: which tools a caller may use, from a JSON policy file, denying by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolsearch import Tool
from toolsearch._errors import PolicyError
from toolsearch.catalog import Catalog
from toolsearch.mcp.caller import ANONYMOUS, Caller, CallerPolicy
from toolsearch.mcp.policy import ToolPolicy


def tool(server: str, name: str) -> Tool:
    return Tool(name=f"{server}__{name}", description=f"{name} on {server}", namespace=server)


CATALOG = Catalog(
    [
        tool("time", "get_current_time"),
        tool("time", "convert_time"),
        tool("github", "list_issues"),
        tool("github", "get_issue"),
        tool("github", "create_issue"),
        tool("bank", "send_money"),
        tool("bank", "balance"),
    ]
)

RULES = {
    "rules": [
        {"when": {"scopes": ["tools:admin"]}, "servers": ["*"]},
        {"when": {"scopes": ["tools"]}, "servers": ["time"], "tools": ["github__list_*", "github__get_*"]},
        {"when": {"claims": {"groups": "finance"}}, "tools": ["bank__*"]},
        {"when": {"claims": {"tier": ["gold", "platinum"]}}, "tools": ["bank__balance"]},
        {"when": {"subjects": ["ci-bot"]}, "tools": ["github__create_issue"]},
    ]
}


def caller(subject: str = "u", scopes: tuple[str, ...] = (), **claims: object) -> Caller:
    return Caller.authenticated_as("https://id.example", subject, scopes=scopes, claims=claims)


@pytest.fixture
def policy(tmp_path: Path) -> ToolPolicy:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(RULES))
    return ToolPolicy.load(path)


def test_it_is_a_caller_policy(policy: ToolPolicy) -> None:
    checked: CallerPolicy = policy
    assert checked.allowed(caller(), CATALOG) == frozenset()


def test_scopes_grant_servers_and_tool_globs(policy: ToolPolicy) -> None:
    assert policy.allowed(caller(scopes=("tools",)), CATALOG) == {
        "time__get_current_time",
        "time__convert_time",
        "github__list_issues",
        "github__get_issue",
    }


def test_a_rule_granting_everything_gives_none(policy: ToolPolicy) -> None:
    assert policy.allowed(caller(scopes=("tools:admin",)), CATALOG) is None


def test_claims_match_a_value_or_any_of_a_list(policy: ToolPolicy) -> None:
    assert policy.allowed(caller(groups=["eng", "finance"]), CATALOG) == {"bank__send_money", "bank__balance"}
    assert policy.allowed(caller(tier="gold"), CATALOG) == {"bank__balance"}
    assert policy.allowed(caller(tier="bronze"), CATALOG) == frozenset()
    assert policy.allowed(caller(groups="finance-ops"), CATALOG) == frozenset()  # exact, not a prefix


def test_rules_add_up_and_subjects_are_exact(policy: ToolPolicy) -> None:
    both = policy.allowed(caller("ci-bot", scopes=("tools",)), CATALOG)
    assert both is not None and "github__create_issue" in both and "time__convert_time" in both
    assert policy.allowed(caller("ci-bot2"), CATALOG) == frozenset()


def test_no_rule_means_no_tools(policy: ToolPolicy) -> None:
    assert policy.allowed(ANONYMOUS, CATALOG) == frozenset()
    assert policy.allowed(caller(scopes=("tool",)), CATALOG) == frozenset()


def test_a_claim_of_another_type_does_not_match() -> None:
    policy = ToolPolicy([{"when": {"claims": {"admin": True}}, "servers": ["*"]}])
    assert policy.allowed(caller(admin=1), CATALOG) == frozenset()
    assert policy.allowed(caller(admin="true"), CATALOG) == frozenset()
    assert policy.allowed(caller(admin=True), CATALOG) is None


def test_a_rule_without_when_applies_to_everyone() -> None:
    policy = ToolPolicy([{"servers": ["time"]}])
    assert policy.allowed(ANONYMOUS, CATALOG) == {"time__get_current_time", "time__convert_time"}


def test_globs_are_case_sensitive_and_anchored() -> None:
    policy = ToolPolicy([{"tools": ["GITHUB__*", "bank__send"]}])
    assert policy.allowed(ANONYMOUS, CATALOG) == frozenset()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "not valid JSON at line 1"),
        ('{"rules": {}}', "rules: Input should be a valid list"),
        ('{"rules": [{"tools": ["x"]}, {"tool": ["y"]}]}', "rule 2 (rules.1.tool): Extra inputs are not permitted"),
        ('{"rules": [{"when": {"scope": ["a"]}}]}', "rule 1 (rules.0.when.scope): Extra inputs"),
        ('{"rules": [{"servers": [" time"]}]}', "rule 1 (rules.0.servers)"),
        ('{"rules": [{"when": {"claims": {"g": {"a": 1}}}}]}', "rule 1 (rules.0.when.claims.g"),
        ('{"rule": []}', "rules: Field required"),
    ],
)
def test_a_bad_policy_file_names_the_file_and_the_rule(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "policy.json"
    path.write_text(content)
    with pytest.raises(PolicyError) as caught:
        ToolPolicy.load(path)
    assert str(caught.value).startswith(f"policy {path}: ") and message in str(caught.value)


def test_a_missing_policy_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read it"):
        ToolPolicy.load(tmp_path / "nope.json")


def test_the_tool_policy_flag_loads_and_checks_the_file(tmp_path: Path) -> None:
    import argparse

    from toolsearch.mcp.policy import add_policy_arguments, policy_from_args

    parser = argparse.ArgumentParser()
    add_policy_arguments(parser)
    assert policy_from_args(parser.parse_args([])) is None
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(RULES))
    loaded = policy_from_args(parser.parse_args(["--tool-policy", str(path)]))
    assert loaded is not None and loaded.allowed(caller(scopes=("tools:admin",)), CATALOG) is None
    path.write_text('{"rules": [{"servers": "time"}]}')
    with pytest.raises(PolicyError, match="rule 1"):
        policy_from_args(parser.parse_args(["--tool-policy", str(path)]))


def test_an_answer_is_worked_out_once_per_catalog_and_applying_rules() -> None:
    policy = ToolPolicy([{"when": {"scopes": ["git"]}, "servers": ["github"]}, {"tools": ["time__*"]}])
    git = Caller.authenticated_as("static", "ana", scopes={"git"})
    other = Caller.authenticated_as("static", "bo", scopes={"git", "extra"})  # the same rules apply
    first = policy.allowed(git, CATALOG)
    assert first is not None and policy.allowed(other, CATALOG) is first  # reused, not recomputed
    assert policy.allowed(ANONYMOUS, CATALOG) != first  # another set of rules: another answer
    grown = Catalog([*CATALOG, tool("github", "close_issue")])
    again = policy.allowed(git, grown)
    assert again is not None and "github__close_issue" in again and "github__close_issue" not in first


def test_an_issuer_condition_matches_only_the_callers_it_vouched_for() -> None:
    policy = ToolPolicy([{"when": {"issuer": "static", "subjects": ["ci-bot"]}, "servers": ["bank"]}])
    static = Caller.authenticated_as("static", "ci-bot")
    namesake = Caller.authenticated_as("https://id.example", "ci-bot")  # another issuer's subject of that name
    assert policy.allowed(static, CATALOG) == {"bank__send_money", "bank__balance"}
    assert policy.allowed(namesake, CATALOG) == frozenset()
    assert (static.issuer, namesake.issuer, ANONYMOUS.issuer) == ("static", "https://id.example", "")


def test_rules_the_token_sources_make_ambiguous_or_dead_are_refused() -> None:
    from toolsearch.mcp.auth import AuthSettings
    from toolsearch.mcp.settings import GatewaySettings

    bare = ToolPolicy([{"when": {"scopes": ["tools"]}, "servers": ["time"]},
                       {"when": {"subjects": ["ci-bot"]}, "servers": ["bank"]}], source="p.json")
    bare.check_issuers({"static"})  # one source: its subjects are unambiguous
    with pytest.raises(PolicyError, match=r"p\.json: rule 2 names subjects without an issuer.*'static'"):
        bare.check_issuers({"static", "https://id.example"})
    typo = ToolPolicy([{"when": {"issuer": "statik", "subjects": ["ci-bot"]}, "servers": ["bank"]}], source="p.json")
    with pytest.raises(PolicyError, match=r"rule 1 names the issuer 'statik', which is not one this gateway accepts"):
        typo.check_issuers({"static"})
    both = AuthSettings(issuer="https://id.example", tokens_file=Path("tokens.json"))
    assert both.issuers == {"static", "https://id.example"}
    with pytest.raises(PolicyError, match="rule 2 names subjects without an issuer"):
        GatewaySettings(transport="http", policy=bare, auth=both)
