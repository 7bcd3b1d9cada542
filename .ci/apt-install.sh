#!/usr/bin/env bash
# The one way a setup hook (.ci/setup.d) installs a Debian package: `apt-install.sh COMMAND PACKAGE...` installs the
# packages unless COMMAND is already on PATH, then checks that it is. A machine that cannot install them fails the
# build here, instead of letting the tests that start COMMAND fail (or skip) later. Needs root or sudo.
set -euo pipefail
command_name=$1
shift
if command -v "$command_name" >/dev/null 2>&1; then
  echo "$command_name found"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "$command_name missing and no root/sudo to install it" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "$@"
command -v "$command_name" >/dev/null 2>&1 || { echo "$command_name is still missing after apt-get install" >&2; exit 1; }
echo "installed $*"
