#!/usr/bin/env bash
# Installs graphviz (`dot`), which draws the docs' state diagrams (scripts/build-docs.sh): Debian's
# package, unless `dot` is already on PATH. Idempotent.
set -euo pipefail

if command -v dot >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -q
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends graphviz
dot -V
