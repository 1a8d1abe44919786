#!/bin/sh
# The pipeline benchmark, the session's base (BASE: a `git archive` of d3d3069) and this tree (NEW)
# alternately, ROUNDS rounds: each side's own broker (threads server, segment store, fresh data
# directory), bench script and pipeline package. Usage: BASE=/tmp/base NEW=. sh compare.sh > out.txt
set -eu
PY=${PY:-$(pwd)/.venv/bin/python}
ROWS=${ROWS:-1000000}
ROUNDS=${ROUNDS:-2}
PORT=${PORT:-25672}
for round in $(seq 1 "$ROUNDS"); do
  for side in base new; do
    if [ "$side" = base ]; then TREE=$BASE; else TREE=$NEW; fi
    data=$(mktemp -d)
    PYTHONPATH=$TREE/src "$PY" -m servers serve --server threads --amqp 127.0.0.1:$PORT --stomp '' --ws '' \
      --http '' --prometheus '' --data "$data" > "$data/broker.log" 2>&1 &
    pid=$!
    sleep 4
    echo "== round $round $side  loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
    PYTHONPATH=$TREE/src "$PY" "$TREE/benchmarks/bench_pipeline.py" --url "amqp://guest:guest@127.0.0.1:$PORT/%2F" \
      --rows "$ROWS" --broker-pid $pid "$@" 2>/dev/null | grep -v '^Setting\|^To adjust'
    kill $pid; wait $pid 2>/dev/null || true
    rm -rf "$data"
  done
done
