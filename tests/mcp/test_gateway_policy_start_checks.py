"""A policy rule that can match nothing stops `toolsearch mcp serve` at start, naming the rule and the name to use;
a tool pattern that matches no tool yet only warns (an upstream may list it later).

Real gateway processes over two toy upstreams, `safe` and `my.bank` (whose tools the gateway names `my_bank__*`).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp_servers import PY, gateway_env, http_gateway, toy, write_config

pytestmark = pytest.mark.slow

TOKEN = "alice-" + "a" * 40
ALICE = {"issuer": "static", "subjects": ["alice"]}


def serve(tmp_path: Path, rule: dict[str, Any], *, auth: bool = True) -> subprocess.CompletedProcess[str]:
    config = write_config(tmp_path / "servers.json", {"safe": toy(), "my.bank": toy()})
    (tmp_path / "policy.json").write_text(json.dumps({"rules": [{"servers": ["safe"]}, rule]}))
    argv = [PY, "-m", "toolsearch", "mcp", "serve", "--config", str(config), "--transport", "http", "--port", "0",
            "--backend", "bm25", "--tool-policy", str(tmp_path / "policy.json")]  # fmt: skip
    if auth:
        entry = {"subject": "alice", "scopes": ["tools"], "token": TOKEN}
        (tmp_path / "tokens.json").write_text(json.dumps({"tokens": [entry]}))
        (tmp_path / "tokens.json").chmod(0o600)
        argv += ["--auth-tokens", str(tmp_path / "tokens.json"), "--auth-scope", "tools"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=gateway_env())


@pytest.mark.parametrize(
    ("rule", "auth", "said"),
    [
        ({"when": ALICE, "servers": ["bnak"]}, True, "rule 2 names the server 'bnak', which matches no server"),
        ({"when": ALICE, "servers": ["my_bank"]}, True, "use 'my.bank', the name the config gives it"),
        ({"when": ALICE, "tools": ["my.bank__echo"]}, True, "the tool 'my.bank__echo'"),
        ({"when": ALICE, "tools": ["my.bank__echo"]}, True, "use 'my_bank__echo'"),
        ({"when": ALICE, "servers": ["safe"]}, False, "names the issuer 'static', which is not one this gateway"),
    ],
)
def test_a_rule_that_can_match_nothing_stops_the_start(
    tmp_path: Path, rule: dict[str, Any], auth: bool, said: str
) -> None:
    refused = serve(tmp_path, rule, auth=auth)
    assert refused.returncode != 0 and "ready" not in refused.stderr
    assert f"policy {tmp_path / 'policy.json'}: " in refused.stderr and said in refused.stderr


def test_a_tool_pattern_that_matches_no_tool_yet_only_warns(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"safe": toy(), "my.bank": toy()})
    policy = {"rules": [{"servers": ["my.bank"]}, {"tools": ["echo", "safe__echo"]}]}
    (tmp_path / "policy.json").write_text(json.dumps(policy))
    with http_gateway(config, "--backend", "bm25", "--tool-policy", str(tmp_path / "policy.json")) as gateway:
        assert gateway.logged("rule 2 names the tool 'echo', which matches no tool of this gateway now")
        policy_lines = [line for line in gateway.stderr.splitlines() if "policy" in line]
        assert len(policy_lines) == 1  # 'my.bank' (a server) and 'safe__echo' (a tool it lists) are fine


def test_a_rule_naming_a_server_the_config_turns_off_starts_and_says_so(tmp_path: Path) -> None:
    disabled = {**toy(), "disabled": True}
    config = write_config(tmp_path / "servers.json", {"safe": toy(), "github": disabled, "my.bank": disabled})
    rules = [{"servers": ["safe"]}, {"when": {"scopes": ["tools:admin"]}, "servers": ["github", "my.bank"]},
             {"when": {"scopes": ["tools:admin"]}, "tools": ["my_bank__echo"]}]  # fmt: skip
    (tmp_path / "policy.json").write_text(json.dumps({"rules": rules}))
    with http_gateway(config, "--backend", "bm25", "--tool-policy", str(tmp_path / "policy.json")) as gateway:
        assert gateway.logged("rule 2 names the server 'github', which the config turns off")
        assert gateway.logged("rule 2 names the server 'my.bank', which the config turns off")
        assert "matches no server" not in gateway.stderr
