#!/usr/bin/env bash
# Debian's redis-server for the session-store tests (tests/stores/test_redis_store.py start their own
# server on a free port). Those tests must run in CI, so a missing binary that cannot be
# installed fails the build here instead of letting them skip.
set -euo pipefail
PATH="$PATH:/usr/bin"  # Debian installs it there; a minimal PATH may lack it
bash "$(dirname "$0")/../apt-install.sh" redis-server redis-server
redis-server --version
