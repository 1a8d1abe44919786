#!/bin/sh
# Alternate the broker before (BASE: the branch point's src) and after (NEW: this branch's src), each a
# `python -m servers serve` (threads server, segment store, sync on) on free ports, driven by
# bench_sink_publish.py (the sink's traffic without Spark). Usage: compare.sh BASE_SRC NEW_SRC OUT ROUNDS ROWS
BASE=$1; NEW=$2; OUT=$3; ROUNDS=${4:-3}; ROWS=${5:-300000}
PY=/work/main/.venv/bin/python
BENCH=$(dirname "$0")/../../bench_sink_publish.py
: > "$OUT"
for round in $(seq 1 "$ROUNDS"); do
  for side in base new; do
    if [ $side = base ]; then SRC=$BASE; else SRC=$NEW; fi
    PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    DATA=$(mktemp -d /tmp/ra28-data.XXXXXX)
    PYTHONPATH=$SRC $PY -m servers serve --server threads --amqp 127.0.0.1:$PORT --no-stomp --no-ws --no-http \
      --no-prometheus --data "$DATA" --log-level warning > "$DATA.log" 2>&1 &
    PID=$!
    for i in $(seq 1 50); do $PY -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 1)" 2>/dev/null && break; sleep 0.2; done
    echo "## round $round $side $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT"
    PYTHONPATH=$NEW $PY "$BENCH" --url "amqp://guest:guest@127.0.0.1:$PORT/%2F" --rows "$ROWS" --broker-pid $PID >> "$OUT" 2>&1
    kill $PID; wait $PID 2>/dev/null
    rm -rf "$DATA" "$DATA.log"
  done
done
echo done >> "$OUT"
