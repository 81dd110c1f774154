#!/bin/bash
# Install the Debian packages bindep.txt lists for a profile (test by
# default; make demo: demo) that are missing on this machine. As root they
# are installed; otherwise the exact command to run is printed and we fail,
# so nothing is silently skipped.
set -eu
bindep=${1:?usage: $0 path/to/bindep [profile]}
profile=${2:-test}
missing=$("$bindep" -b "$profile" || true)
if [ -z "$missing" ]; then
    exit 0
fi
# shellcheck disable=SC2086
if [ "$(id -u)" = 0 ]; then
    echo "Installing missing system packages: $missing"
    export DEBIAN_FRONTEND=noninteractive
    # A fresh machine has no package lists yet.
    apt-get install -y -q --no-install-recommends $missing || {
        apt-get update -q && apt-get install -y -q --no-install-recommends $missing
    }
else
    echo "Missing system packages. Run:" >&2
    echo "    sudo apt-get install -y --no-install-recommends $missing" >&2
    exit 1
fi
