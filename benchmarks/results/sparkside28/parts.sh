#!/bin/sh
# new code: a stream read planned as 1, 2 (the default on 2 cores) and 10 tasks per trigger, alternately
OUT=$1; ROUNDS=$2
PORT=$(cat /tmp/sp28/port); BPID=$(cat /tmp/sp28/broker.pid)
: > $OUT
for round in $(seq $ROUNDS); do
  for mp in 1 default 10; do
    echo "## round $round minPartitions=$mp $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $OUT
    if [ $mp = default ]; then set -- ; else set -- --min-partitions $mp; fi
    (cd /tmp/sp28 && PYTHONPATH=/work/wt/sparkside28/src timeout 900 /work/main/.venv/bin/python /work/wt/sparkside28/benchmarks/bench_pipeline.py \
      --url amqp://guest:guest@127.0.0.1:$PORT/%2F --rows 1000000 --broker-pid $BPID --only stream "$@" 2>&1) \
      | grep -E "^(fill|batch read|stream read|sink|Traceback|[A-Za-z]*Error)" >> $OUT
  done
done
echo done >> $OUT
