#!/usr/bin/env bash
# Installs what tests/browser needs: Debian's chromium and the npm packages pinned by
# tools/browser/package-lock.json (outside tests/, so node_modules never mixes with our tests). Idempotent; safe to run again. Never downloads a browser
# build of its own (playwright's browser download is skipped; the tests use /usr/bin/chromium).
set -euo pipefail
cd "$(dirname "$0")/.."

# apt/dpkg may be busy with another install on this machine: wait for its locks instead of failing.
wait_for_apt() {
    local waited=0
    command -v fuser >/dev/null 2>&1 || return 0   # no psmisc: rely on apt's own Lock::Timeout
    while fuser /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock \
            /var/cache/apt/archives/lock >/dev/null 2>&1; do
        if [ "$waited" -ge 900 ]; then
            echo "install-browser-deps: apt/dpkg still locked after ${waited}s" >&2
            return 1
        fi
        [ $((waited % 30)) -eq 0 ] && echo "install-browser-deps: waiting for the apt/dpkg lock..."
        sleep 5
        waited=$((waited + 5))
    done
}

apt_get() {
    # Lock::Timeout covers the window between our check and apt taking the lock.
    wait_for_apt
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"
}

if [ ! -x /usr/bin/chromium ]; then
    apt_get update -q
    apt_get install -y -q --no-install-recommends chromium
fi
/usr/bin/chromium --version

if ! command -v npm >/dev/null 2>&1; then
    apt_get update -q
    apt_get install -y -q --no-install-recommends nodejs npm
fi
cd tools/browser
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
# npm ci wipes and reinstalls node_modules; skip it when node_modules was installed from this lock.
if [ -f node_modules/.package-lock.json ] && [ ! package-lock.json -nt node_modules/.package-lock.json ] \
        && [ -d node_modules/@stomp/stompjs ] && [ -d node_modules/playwright-core ]; then
    echo "install-browser-deps: node_modules is up to date"
else
    npm ci --no-audit --no-fund --loglevel=error
fi
