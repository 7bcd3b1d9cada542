"""Servers configs: VS Code's `servers` + `inputs`, `${env:VAR}` / `${VAR}` / defaults, names never values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toolsearch.mcp import MCPConfigError, load_config, parse_config
from toolsearch.mcp.config import input_variable

SECRET = "s3cret-value-9f2"

VSCODE = {
    "inputs": [
        {"type": "promptString", "id": "github-token", "description": "GitHub token", "password": True},
        {"type": "promptString", "id": "region", "description": "Region", "default": "eu-west-1"},
    ],
    "servers": {
        "github": {
            "type": "stdio", "command": "${env:TOOLS_BIN}/github-mcp", "args": ["--region", "${input:region}"],
            "env": {"GITHUB_TOKEN": "${input:github-token}", "LOG": "${env:LOG_LEVEL:-info}"},
            "cwd": "${workspaceFolder}/srv",
        },
        "remote": {
            "type": "http", "url": "https://${env:HOST}/mcp",
            "headers": {"Authorization": "Bearer ${input:github-token}", "X-Team": "${TEAM:-core}"},
        },
    },
}


def test_input_variables_are_named_from_the_input_id() -> None:
    assert input_variable("github-token") == "TOOLSEARCH_INPUT_GITHUB_TOKEN"
    assert input_variable("api.key2") == "TOOLSEARCH_INPUT_API_KEY2"


def test_a_vscode_config_expands_env_inputs_and_folders(tmp_path: Path) -> None:
    folder = tmp_path / "project" / ".vscode"
    folder.mkdir(parents=True)
    (folder / "mcp.json").write_text(json.dumps(VSCODE))
    environ = {"TOOLS_BIN": "/opt/bin", "HOST": "mcp.example.test", "TOOLSEARCH_INPUT_GITHUB_TOKEN": SECRET}
    config = load_config(folder / "mcp.json", environ=environ)
    github, remote = config["github"], config["remote"]
    assert github.command == "/opt/bin/github-mcp"
    assert github.args == ("--region", "eu-west-1")  # the input's default: nothing set in the environment
    assert github.env == {"GITHUB_TOKEN": SECRET, "LOG": "info"}
    assert github.cwd == str(tmp_path / "project" / "srv")  # the workspace is the folder holding .vscode
    assert remote.url == "https://mcp.example.test/mcp"
    assert remote.headers == {"Authorization": f"Bearer {SECRET}", "X-Team": "core"}
    # messages and logs describe a server as written
    assert github.describe() == "${env:TOOLS_BIN}/github-mcp --region ${input:region}"
    assert remote.describe() == "https://${env:HOST}/mcp (http)"


def test_env_and_plain_forms_agree() -> None:
    environ = {"A": "1", "TOOLSEARCH_INPUT_REGION": "us"}
    args = ["${A}", "${env:A}", "${B:-2}", "${env:B:-3}", "${input:region}"]
    data = {"servers": {"s": {"command": "x", "args": args}}, "inputs": [{"id": "region", "type": "promptString"}]}
    assert parse_config(data, environ=environ)["s"].args == ("1", "1", "2", "3", "us")  # the environment wins


@pytest.mark.parametrize(("value", "environ", "message"), [
    ("${input:github-token}", {}, "uses ${input:github-token} (GitHub token): VS Code prompts for inputs, "
     "toolsearch reads them from the environment; set TOOLSEARCH_INPUT_GITHUB_TOKEN"),
    ("${input:nope}", {}, "uses ${input:nope}, which the config's 'inputs' does not declare; declare it, or set "
     "TOOLSEARCH_INPUT_NOPE"),
    ("${env:MISSING}", {}, "uses ${env:MISSING} but MISSING is not set"),
    ("${MISSING}", {}, "uses ${MISSING} but MISSING is not set"),
    ("${command:pickFile}", {}, "not ${command:...}"),
    ("${a b}", {}, "is not a variable name"),
])
def test_a_variable_that_cannot_be_expanded_is_named(value: str, environ: dict[str, str], message: str) -> None:
    data: dict[str, Any] = {"inputs": VSCODE["inputs"], "servers": {"s": {"command": "x", "env": {"K": value}}}}
    with pytest.raises(MCPConfigError) as raised:
        parse_config(data, environ=environ)
    assert message in str(raised.value)
    assert "server 's' env K" in str(raised.value)


@pytest.mark.parametrize("field", ["command", "args", "env", "cwd", "url", "headers"])
def test_every_expanded_field_names_the_variable_never_its_value(field: str) -> None:
    """A value that fails after expansion is reported as written; a missing variable by name."""
    entry: dict[str, Any] = {"command": "x"} if field not in ("url", "headers") else {"url": "https://h/mcp"}
    entry[field] = {"args": ["${NOPE}"], "env": {"K": "${NOPE}"}, "headers": {"H": "${NOPE}"}}.get(field, "${NOPE}")
    with pytest.raises(MCPConfigError, match=r"uses \$\{NOPE\} but NOPE is not set"):
        parse_config({"mcpServers": {"s": entry}}, environ={})
    with pytest.raises(MCPConfigError) as raised:
        parse_config({"mcpServers": {"s": {"url": "${URL}"}}}, environ={"URL": f"ftp://{SECRET}"})
    assert "'${URL}'" in str(raised.value) and SECRET not in str(raised.value)


def test_the_servers_key_is_read_like_mcp_servers() -> None:
    with pytest.raises(MCPConfigError, match="'servers' must be an object"):
        parse_config({"servers": []}, environ={})
    with pytest.raises(MCPConfigError, match="'inputs' must be a list of objects with an 'id'"):
        parse_config({"servers": {"s": {"command": "x"}}, "inputs": {"id": "x"}}, environ={})
    with pytest.raises(MCPConfigError, match="nor VS Code's 'servers'"):
        parse_config({"inputs": []}, environ={})


def test_workspace_folder_needs_a_file() -> None:
    with pytest.raises(MCPConfigError, match="only a config read from a file has"):
        parse_config({"servers": {"s": {"command": "${workspaceFolder}/run"}}}, environ={})
    config = parse_config({"servers": {"s": {"command": "${userHome}/run"}}}, environ={})
    assert config["s"].command == f"{Path.home()}/run"


def test_build_indexes_a_vscode_config(tmp_path: Path) -> None:
    """`toolsearch build .vscode/mcp.json` starts the server with its input from the environment."""
    folder = tmp_path / ".vscode"
    folder.mkdir()
    time_server = str(Path(sys.executable).parent / "mcp-server-time")
    (folder / "mcp.json").write_text(json.dumps({
        "inputs": [{"type": "promptString", "id": "timezone", "description": "Your time zone"}],
        "servers": {"time": {"type": "stdio", "command": "${env:SERVER}", "args": ["--local-timezone",
                                                                                   "${input:timezone}"]}},
    }))
    env = {**os.environ, "SERVER": time_server, "TOOLSEARCH_HOME": str(tmp_path / "home")}
    argv = [sys.executable, "-m", "toolsearch", "build", ".vscode/mcp.json", "--backend", "bm25", "--json"]
    missing = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1
    assert "set TOOLSEARCH_INPUT_TIMEZONE" in missing.stderr and time_server not in missing.stderr
    env["TOOLSEARCH_INPUT_TIMEZONE"] = "Europe/Lisbon"
    built = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout)["tools"] >= 2  # get_current_time, convert_time


# --- a stdio server's envFile (VS Code) ------------------------------------------------------------------------


def _env_file_config(folder: Path, entry: dict[str, Any]) -> Path:
    (folder / ".vscode").mkdir(parents=True, exist_ok=True)
    (folder / ".vscode" / "mcp.json").write_text(json.dumps({"servers": {"srv": entry}}))
    return folder / ".vscode" / "mcp.json"


def test_an_env_file_reaches_the_server_under_its_env_entries(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text('# the team keys\nAPI_KEY=from-file\nexport REGION="eu west"\nLOG=debug\nEMPTY=\n')
    config = load_config(_env_file_config(tmp_path, {
        "type": "stdio", "command": "srv", "envFile": "${workspaceFolder}/.env", "env": {"LOG": "info"}}))
    # as written in the file (quotes taken off, `export` allowed), and an `env` entry wins over the file's
    assert config["srv"].env == {"API_KEY": "from-file", "REGION": "eu west", "LOG": "info", "EMPTY": ""}
    relative = load_config(_env_file_config(tmp_path / "b", {"command": "srv", "envFile": "../../.env"}))
    assert relative["srv"].env["API_KEY"] == "from-file"  # against the config's own folder, like cwd


@pytest.mark.parametrize(
    ("text", "entry", "said"),
    [
        (None, {"command": "srv", "envFile": "missing.env"}, "envFile 'missing.env' is not a file"),
        ("A=1\nthis line is no assignment\n", {"command": "srv", "envFile": "x.env"}, "line 2 is not KEY=value"),
        ("A=1\nTOKEN\n", {"command": "srv", "envFile": "x.env"}, "line 2 names 'TOKEN' without a value"),
        ("A=1\n", {"url": "https://mcp.example.test/mcp", "envFile": "x.env"}, "an HTTP server has none"),
    ],
)
def test_an_env_file_that_cannot_be_used_is_refused_naming_it(
    tmp_path: Path, text: str | None, entry: dict[str, Any], said: str
) -> None:
    if text is not None:
        (tmp_path / ".vscode").mkdir()
        (tmp_path / ".vscode" / "x.env").write_text(text)
    with pytest.raises(MCPConfigError, match="server 'srv': .*" + said):
        load_config(_env_file_config(tmp_path, entry))


def test_build_starts_a_server_with_the_variables_of_its_env_file(tmp_path: Path) -> None:
    """The toy server lists as many filler tools as its environment asks: the envFile's variable reached it."""
    toy = Path(__file__).resolve().parents[1] / "mcp_servers" / "toy_server.py"
    (tmp_path / "toy.env").write_text("TOY_EXTRA_TOOLS=5\n")
    (tmp_path / "servers.json").write_text(json.dumps({"mcpServers": {"toy": {
        "command": sys.executable, "args": [str(toy)], "envFile": "toy.env"}}}))
    env = {**os.environ, "TOOLSEARCH_HOME": str(tmp_path / "home")}
    argv = [sys.executable, "-m", "toolsearch", "build", "servers.json", "--backend", "bm25", "--json"]
    with_file = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert with_file.returncode == 0, with_file.stderr
    (tmp_path / "toy.env").write_text("TOY_EXTRA_TOOLS=0\n")
    without = subprocess.run([*argv, "--rebuild"], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=120)
    assert without.returncode == 0, without.stderr
    assert json.loads(with_file.stdout)["tools"] == json.loads(without.stdout)["tools"] + 5


# --- credentials written literally in a URL ------------------------------------------------------------------


def test_a_password_or_token_written_in_a_url_is_never_described() -> None:
    data = {"mcpServers": {
        "remote": {"url": "https://alice:hunter2-pw@mcp.example.test:8443/mcp?token=tok-123&region=eu#frag-9"},
        "bridge": {"command": "npx", "args": ["mcp-remote", "https://ghp_token-456@mcp.example.test/mcp?api_key=k-789"]},
    }}
    config = parse_config(data, environ={})
    remote, bridge = config["remote"], config["bridge"]
    assert remote.url == data["mcpServers"]["remote"]["url"]  # the connection itself uses the URL as written
    assert remote.describe() == "https://***@mcp.example.test:8443/mcp?token=***&region=***#*** (http)"
    assert bridge.describe() == "npx mcp-remote https://***@mcp.example.test/mcp?api_key=***"
    shown = " ".join([remote.describe(), bridge.describe(), repr(remote), repr(bridge), repr(config)])
    for secret in ("hunter2-pw", "alice", "tok-123", "frag-9", "ghp_token-456", "k-789"):
        assert secret not in shown


def test_a_credential_written_as_a_command_line_argument_is_never_described() -> None:
    args = ["serve", "--api-key", "sk-live-1", "--githubToken=ghp-2", "-e", "DB_PASSWORD=pw-3", "--header",
            "Authorization: Bearer b-4", "--region", "eu", "--token", "${env:GITHUB_TOKEN}"]  # fmt: skip
    config = parse_config({"mcpServers": {"local": {"command": "srv", "args": args}}}, environ={"GITHUB_TOKEN": "g-5"})
    local = config["local"]
    assert local.args[2] == "sk-live-1"  # the server itself is started with its arguments as written
    assert local.describe() == (
        'srv serve --api-key *** --githubToken=*** -e DB_PASSWORD=*** --header "Authorization: ***" --region eu'
        " --token ${env:GITHUB_TOKEN}"  # a variable's name is shown, its value never
    )
    shown = " ".join([local.describe(), repr(local), repr(config)])
    for secret in ("sk-live-1", "ghp-2", "pw-3", "b-4", "g-5"):
        assert secret not in shown


def test_the_repr_of_a_server_shows_no_header_or_env_value() -> None:
    data = {"mcpServers": {
        "remote": {"url": "https://mcp.example.test/mcp", "headers": {"Authorization": f"Bearer {SECRET}"}},
        "local": {"command": "srv", "env": {"TOKEN": SECRET}},
    }}
    config = parse_config(data, environ={})
    assert repr(config["remote"]) == "ServerConfig(name='remote', 'https://mcp.example.test/mcp (http)')"
    assert SECRET not in repr(config)


def test_a_refused_url_is_quoted_without_its_credentials() -> None:
    data = {"mcpServers": {"remote": {"url": "ftp://alice:hunter2-pw@files.example.test/mcp?token=tok-123"}}}
    with pytest.raises(MCPConfigError) as caught:
        parse_config(data, environ={})
    refused = "url must start with http:// or https://, got 'ftp://***@files.example.test/mcp?token=***'"
    assert refused in str(caught.value)
    assert "hunter2" not in str(caught.value) and "tok-123" not in str(caught.value)


def test_a_server_named_twice_is_refused_not_dropped(tmp_path: Path) -> None:
    # Before: json kept the last "toy", and the first server was dropped without a word.
    path = tmp_path / "servers.json"
    path.write_text('{"mcpServers": {"toy": {"command": "a"}, "other": {"command": "b"}, "toy": {"command": "c"}}}')
    with pytest.raises(MCPConfigError, match=r"servers\.json: the key 'toy' is written twice in one object"):
        load_config(path)
    path.write_text('{"mcpServers": {"toy": {"command": "a", "env": {"KEY": "1", "KEY": "2"}}}}')
    with pytest.raises(MCPConfigError, match=r"the key 'KEY' is written twice"):
        load_config(path)


def test_an_entry_without_command_or_url_says_so_and_names_its_keys() -> None:
    # Before: a typo of 'command' read as an HTTP server missing its 'url'.
    with pytest.raises(MCPConfigError, match=r"neither 'command' \(a stdio server\) nor 'url' .*keys: 'cmd', 'args'"):
        parse_config({"mcpServers": {"toy": {"cmd": "python", "args": ["server.py"]}}})
    with pytest.raises(MCPConfigError, match=r"neither 'command' .*its keys: none"):
        parse_config({"mcpServers": {"toy": {}}})


@pytest.mark.parametrize("value", [None, {"a": 1}, ["x"]])
def test_an_env_or_header_value_that_is_not_a_string_number_or_boolean_is_refused(value: Any) -> None:
    # Before: null reached the server as the text "null" (an `Authorization: null` header), an object as JSON text.
    with pytest.raises(MCPConfigError, match=r"env\.Y"):
        parse_config({"mcpServers": {"toy": {"command": "python", "env": {"Y": value}}}})
    with pytest.raises(MCPConfigError, match=r"headers\.Authorization"):
        parse_config({"mcpServers": {"remote": {"url": "https://h/mcp", "headers": {"Authorization": value}}}})
    kept = parse_config({"mcpServers": {"toy": {"command": "python", "env": {"N": 3, "B": True, "S": "s"}}}})
    assert dict(kept.servers[0].env) == {"N": "3", "B": "true", "S": "s"}


def test_a_servers_scrubber_hides_what_it_was_configured_with_and_keeps_plain_words() -> None:
    # What an upstream sends back (a 401 quoting its token, a URL with its key) is scrubbed of these before the model
    # or the log sees it; before, nothing was.
    environ = {"TOKEN": "sk-live-Zq8x", "KEY": "PATHSECRET777", "PW": "pw"}
    config = parse_config(
        {
            "mcpServers": {
                "local": {
                    "command": "x",
                    "env": {"API_TOKEN": "${TOKEN}", "PASSWORD": "abc", "MODE": "cursor", "TZ": "UTC", "PORT": "8080",
                            "HOME_DIR": "/home/bob/projects"},
                },
                "remote": {  # (not `Authorization`: with the URL's user info, that is a config error)
                    "url": "https://u:${PW}@h.example/s/${KEY}/mcp?sig=qs-99",
                    "headers": {"Proxy-Authorization": "Bearer ${TOKEN}", "Accept": "application/json"},
                },
            }
        },
        environ=environ,
    )
    local, remote = config["local"].scrubber(), config["remote"].scrubber()
    quoted = "the credential 'sk-live-Zq8x' (password abc) was rejected: mode cursor, UTC, 8080, /home/bob/projects"
    assert local(quoted) == quoted.replace("sk-live-Zq8x", "***").replace("abc", "***")  # the rest are plain words
    said = "401 for 'Bearer sk-live-Zq8x' at /s/PATHSECRET777/mcp?sig=qs-99 (u:pw), Accept: application/json"
    assert remote(said) == "401 for '***' at /s/***/mcp?sig=*** (***), Accept: application/json"


def test_a_servers_scrubber_hides_whole_credentials_only_and_leaves_settings_and_words_alone() -> None:
    # Before: "database *** (region ***). Use format ***; auth *** is not ***owed; ***xistent column; c*** inst***
    # first; time zone ***.": a URL's user name and query values, `AUTH_TYPE=none` and any 8+ character value with a
    # digit were scrubbed, and inside other words.
    env = {
        "DATABASE_URL": "postgresql://postgres:S3cr3t-pw@db:5432/postgres",
        "AWS_REGION": "us-east-1",
        "AUTH_TYPE": "none",
        "TZ": "Europe/Berlin",
        "LANG": "en_US.UTF-8",
        "EXPORT_URL": "https://api.example.com/export?format=json&user=all",
        "SERVICE_TOKEN": "tok-9f8e7d6c5b",
    }
    config = parse_config({"mcpServers": {"db": {"command": "x", "env": env}}})
    scrub = config["db"].scrubber()
    said = (
        'relation "users" does not exist in database postgres (region us-east-1). Use format json; auth none is not '
        "allowed; nonexistent column; call install first; time zone Europe/Berlin; locale en_US.UTF-8."
    )
    assert scrub(said) == said
    leaked = "login postgres:S3cr3t-pw failed (password S3cr3t-pw); token tok-9f8e7d6c5b, not xtok-9f8e7d6c5bx"
    assert scrub(leaked) == "login *** failed (password ***); token ***, not xtok-9f8e7d6c5bx"


def test_a_servers_scrubber_hides_the_credentials_on_its_command_line() -> None:
    # Before: `describe()` hid `--api-key` and `--token=` values, but an upstream error quoting them reached the model
    # unchanged ("401 Unauthorized: key 'sk-live-Zq8xSECRET4242' ...").
    args = ["server.py", "--api-key", "sk-live-Zq8xSECRET4242", "--token=abcdefghijkl", "--db-password", "pw1",
            "-H", "X-Api-Key: header-secret-value", "--mode", "fast", "--auth", "none"]
    config = parse_config({"mcpServers": {"svc": {"command": "python", "args": args}}})
    assert config["svc"].describe() == (
        'python server.py --api-key *** --token=*** --db-password *** -H "X-Api-Key: ***" --mode fast --auth ***'
    )
    scrub = config["svc"].scrubber()
    said = (
        "401 Unauthorized: key 'sk-live-Zq8xSECRET4242', token abcdefghijkl, password pw1, header-secret-value; "
        "mode fast, auth none"
    )
    assert scrub(said) == "401 Unauthorized: key '***', token ***, password ***, ***; mode fast, auth none"
