#!/usr/bin/env bash
# Installs the Java runtime PySpark needs (Spark 4 runs on Java 17+): Debian's openjdk-17-jre-headless,
# unless a java of version 17 or newer is already on PATH. Idempotent.
set -euo pipefail

java_major() {
    # `java -version` prints e.g. 'openjdk version "17.0.15" 2025-04-15' on stderr
    java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1
}

if command -v java >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ] 2>/dev/null; then
    java -version 2>&1 | head -n1
    exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -q
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends openjdk-17-jre-headless
java -version 2>&1 | head -n1
