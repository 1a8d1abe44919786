#!/bin/sh
# new code: the full schema vs a narrower one ("offset long, body binary"), alternately
OUT=$1; ROUNDS=$2
PORT=$(cat /tmp/sp28/port); BPID=$(cat /tmp/sp28/broker.pid)
: > $OUT
for round in $(seq $ROUNDS); do
  for schema in full narrow; do
    echo "## round $round $schema $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $OUT
    if [ $schema = full ]; then set -- ; else set -- --schema "offset long, body binary"; fi
    (cd /tmp/sp28 && PYTHONPATH=/work/wt/sparkside28/src timeout 900 /work/main/.venv/bin/python /work/wt/sparkside28/benchmarks/bench_pipeline.py \
      --url amqp://guest:guest@127.0.0.1:$PORT/%2F --rows 1000000 --broker-pid $BPID --only batch stream "$@" 2>&1) \
      | grep -E "^(fill|batch read|stream read|sink|Traceback|[A-Za-z]*Error)" >> $OUT
  done
done
echo done >> $OUT
