#!/bin/sh
# alternate old (merge-base 70437b4) and new (branch sparkside28) Spark-side code against one broker
OUT=$1; ROWS=$2; ROUNDS=$3
PORT=$(cat /tmp/sp28/port); BPID=$(cat /tmp/sp28/broker.pid)
: > $OUT
for round in $(seq $ROUNDS); do
  for side in old new; do
    if [ $side = old ]; then SRC=OLD_SRC; EXTRA="--max-records-per-partition 250000"; else SRC=/work/wt/sparkside28/src; EXTRA=""; fi
    echo "## round $round $side $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $OUT
    (cd /tmp/sp28 && PYTHONPATH=$SRC timeout 900 /work/main/.venv/bin/python /work/wt/sparkside28/benchmarks/bench_pipeline.py \
      --url amqp://guest:guest@127.0.0.1:$PORT/%2F --rows $ROWS --broker-pid $BPID --only batch stream $EXTRA 2>&1) \
      | grep -E "^(fill|batch read|stream read|sink|Traceback|[A-Za-z]*Error)" >> $OUT
  done
done
echo done >> $OUT
