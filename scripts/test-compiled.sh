#!/usr/bin/env bash
# Builds the wheel as `pip install .` does (mypyc-compiled codecs, and the engine's hot path with
# SANSMQ_COMPILED_ENGINE=1 in the environment; needs a C compiler), installs it into a scratch
# directory and runs test suites against that install instead of the sources. By default: the codec suites (hypothesis and fuzz-harness tests included), the
# engine suite (determinism and the simulator included), the segment store's durability suites
# (crash, power cut) and the protocol e2e suites (real clients over sockets): what the compiled
# modules serve, chosen against CI time (docs/testing.md, "Compiled codecs (mypyc)").
# `bash scripts/test-compiled.sh tests` runs the whole suite on the compiled build.
# tests/test_compiled_build.py fails if the modules it imports are not the compiled ones.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-.venv/bin/python}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
rm -rf build  # setuptools' build tree: a stale module from an earlier build must not ship
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$scratch/wheel" .
"$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$scratch/site" "$scratch"/wheel/sansmq-*.whl

# Options alone (e.g. -x) still run the codec suites; any path given replaces them.
paths=0
for arg in "$@"; do
    case $arg in -*) ;; *) paths=1 ;; esac
done
if [ "$paths" -eq 0 ]; then
    set -- "$@" tests/stompproto tests/amqpproto tests/wsframe tests/test_codec_conventions.py \
        tests/engine tests/storage/test_segment_store.py tests/storage/test_crash.py \
        tests/storage/test_powercut.py tests/storage/test_store_crash_sim.py \
        tests/e2e/test_e2e_amqp.py tests/e2e/test_e2e_stomp.py tests/e2e/test_e2e_ws.py
fi
# The installed tree first on the path (servers started by e2e tests inherit it); the test suite's
# own helpers come from tests/ and fuzz/ as usual.
SANSMQ_EXPECT_COMPILED=1 PYTHONPATH="$scratch/site" "$PY" -m pytest -p no:cacheprovider tests/test_compiled_build.py "$@"
