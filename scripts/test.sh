#!/usr/bin/env bash
# Installs everything the tests need into ./.venv and runs them all: ruff and mypy, the pytest suite,
# then a short smoke run of every fuzz harness. Used by .ci/run; works on a fresh machine with only Python 3.11+.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,spark,docs]'

# Java for PySpark (tests/pipeline): Debian's openjdk-17-jre-headless unless a java >= 17 is there.
bash scripts/install-java.sh
export SANSMQ_REQUIRE_SPARK=1

# Headless Chromium (Debian's package) and @stomp/stompjs for the real-browser WebSocket tests.
bash scripts/install-browser-deps.sh
# PostgreSQL for the PostgreSQL-store tests: installed here, so a missing server fails instead of skipping.
bash scripts/install-postgres.sh install
export SANSMQ_REQUIRE_POSTGRES=1

# Lint and type checks first (a few seconds): ruff over the tree, mypy as configured in pyproject.toml
# (strict on the codecs). Same commands as `tox -e lint`.
.venv/bin/ruff check .
.venv/bin/mypy

# The documentation site (docs/_build/html), warnings as errors; graphviz draws its state diagrams.
bash scripts/install-graphviz.sh
bash scripts/build-docs.sh

# Bytecode cached outside the tree, even where the environment sets PYTHONDONTWRITEBYTECODE: the
# suite starts hundreds of `python -m servers` subprocesses, and each would compile src/ again
# (~4 s a start on a loaded 2-core machine: two e2e modules took 173 s instead of 300 s with it).
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-$PWD/.venv/pycache}

# Sockets for 1,000-connection tests: raise the soft descriptor limit as far as the hard one allows.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# The browser suite was just installed: a missing browser must fail, not skip. The 30 slowest
# tests are listed at the end: where CI time goes.
SANSMQ_REQUIRE_BROWSER=1 .venv/bin/python -m pytest --durations=30 "$@"

# The codec, engine, durability and protocol e2e suites again, on the mypyc-compiled wheel `pip install .`
# builds (the run above is on the pure-Python sources): 2-3 minutes of compiling, then ~4 minutes of tests.
PYTHON=.venv/bin/python bash scripts/test-compiled.sh -q

FUZZ_RUNS=${FUZZ_RUNS:-20000}
for harness in fuzz/*_fuzz.py; do
    [ -e "$harness" ] || continue
    name=$(basename "$harness" _fuzz.py)
    echo "fuzz smoke: $harness ($FUZZ_RUNS runs)"
    # New inputs go to a scratch directory so the committed seed corpus stays as it is.
    scratch=$(mktemp -d)
    .venv/bin/python "$harness" -runs="$FUZZ_RUNS" -max_total_time=60 -artifact_prefix="$scratch/" "$scratch" "fuzz/corpus/$name"
    rm -rf "$scratch"
done
