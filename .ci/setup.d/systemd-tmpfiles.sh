#!/usr/bin/env bash
# systemd-tmpfiles, the cleaner of /tmp most Linux machines run, for tests/test_scratch.py: an index's private
# folders must survive it. Present wherever systemd is; elsewhere Debian's systemd-standalone-tmpfiles brings it
# alone. A machine that cannot install it fails the build here instead of letting that test fail later.
set -euo pipefail
if command -v systemd-tmpfiles >/dev/null 2>&1; then
  echo "systemd-tmpfiles found: $(systemd-tmpfiles --version | head -n 1)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "systemd-tmpfiles missing and no root/sudo to install it" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends systemd-standalone-tmpfiles
command -v systemd-tmpfiles >/dev/null 2>&1 || { echo "systemd-tmpfiles is still missing after apt-get install" >&2; exit 1; }
echo "installed $(systemd-tmpfiles --version | head -n 1)"
