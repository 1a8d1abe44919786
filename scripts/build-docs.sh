#!/usr/bin/env bash
# Builds the documentation site into docs/_build/html (open docs/_build/html/index.html), warnings as
# errors. Reference pages are generated from the code on every build (docs/_ext/), so the build starts
# clean (-E). Needs the `docs` extra (sphinx, myst-parser) and graphviz's `dot` for the state diagrams.
# Used by scripts/test.sh and `tox -e docs`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
if ! command -v dot > /dev/null; then
    echo "build-docs: graphviz's 'dot' is missing (bash scripts/install-graphviz.sh)" >&2
    exit 1
fi
exec "$PY" -m sphinx -W --keep-going -E -q -b html docs docs/_build/html "$@"
