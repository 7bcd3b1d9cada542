#!/usr/bin/env bash
# Debian's redis-server for the session-store tests (tests/stores/test_redis_store.py start their own
# server on a free port). Those tests must run in CI, so a missing binary that cannot be
# installed fails the build here instead of letting them skip.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ]; then
  echo "redis-server found: $(redis-server --version 2>/dev/null || /usr/bin/redis-server --version)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "redis-server missing and no root/sudo to install it" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends redis-server
command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || {
  echo "redis-server is still missing after apt-get install" >&2
  exit 1
}
echo "installed $(redis-server --version 2>/dev/null || /usr/bin/redis-server --version)"
