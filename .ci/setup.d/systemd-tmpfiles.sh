#!/usr/bin/env bash
# systemd-tmpfiles, the cleaner of /tmp most Linux machines run, for tests/test_scratch.py: an index's private
# folders must survive it. Present wherever systemd is; elsewhere Debian's systemd-standalone-tmpfiles brings it
# alone.
set -euo pipefail
bash "$(dirname "$0")/../apt-install.sh" systemd-tmpfiles systemd-standalone-tmpfiles
systemd-tmpfiles --version | head -n 1
