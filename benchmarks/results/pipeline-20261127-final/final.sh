#!/bin/sh
# The final tree alone: the whole bench twice, then the stream read with one, the default and ten
# partitions (minPartitions), alternately, twice. Each run its own broker (threads, segment store, fresh
# data directory). Usage: sh final.sh > final.txt
set -eu
PY=${PY:-$(pwd)/.venv/bin/python}
PORT=${PORT:-25672}
run() {  # label, bench arguments...
  label=$1; shift
  data=$(mktemp -d)
  PYTHONPATH=$(pwd)/src "$PY" -m servers serve --server threads --amqp 127.0.0.1:$PORT --stomp '' --ws '' \
    --http '' --prometheus '' --data "$data" > "$data/broker.log" 2>&1 &
  pid=$!
  sleep 4
  echo "== $label  loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=$(pwd)/src "$PY" benchmarks/bench_pipeline.py --url "amqp://guest:guest@127.0.0.1:$PORT/%2F" \
    --rows 1000000 --broker-pid $pid "$@" 2>/dev/null | grep -v '^Setting\|^To adjust'
  kill $pid; wait $pid 2>/dev/null || true
  rm -rf "$data"
}
for round in 1 2; do run "round $round: all jobs"; done
for round in 1 2; do
  run "round $round: stream read, minPartitions=1" --only stream --min-partitions 1
  run "round $round: stream read, default partitions" --only stream
  run "round $round: stream read, minPartitions=10" --only stream --min-partitions 10
done
# the same with a warm JVM: a batch read of the stream first, then the stream read (both with the setting)
for round in 1 2; do
  run "round $round: warm, minPartitions=1" --only batch stream --min-partitions 1
  run "round $round: warm, default partitions" --only batch stream
  run "round $round: warm, minPartitions=10" --only batch stream --min-partitions 10
done
# one stream against ten (a partitioned stream's partitions, 100,000 rows each), warm as above
for round in 1 2; do
  run "round $round: one stream" --only batch stream
  run "round $round: ten streams" --only batch stream --streams 10
done
