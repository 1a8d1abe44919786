#!/bin/sh
OUT=/tmp/pf28/parts.txt
: > $OUT
for round in 1 2; do
  for mrp in 300000 30000; do
    echo "## round $round maxRecordsPerPartition=$mrp $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $OUT
    PYTHONPATH=/work/wt/pipefast28/src timeout 900 /work/main/.venv/bin/python /work/wt/pipefast28/benchmarks/bench_pipeline.py \
      --url amqp://guest:guest@127.0.0.1:58281/%2F --rows 300000 --max-records-per-partition $mrp --only stream \
      --broker-pid $(cat /tmp/pf28/broker-old.pid) 2>&1 | grep -E "^(stream read)" >> $OUT
  done
done
echo done >> $OUT
