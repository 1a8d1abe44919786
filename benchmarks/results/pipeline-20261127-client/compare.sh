#!/bin/sh
# alternate old (main) and new (branch) pipeline code against one broker; 3 rounds
OUT=/tmp/pf28/compare.txt
: > $OUT
for round in 1 2 3; do
  for side in old new; do
    if [ $side = old ]; then SRC=/tmp/pf28/old/src; else SRC=/work/wt/pipefast28/src; fi
    echo "## round $round $side $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $OUT
    PYTHONPATH=$SRC timeout 900 /work/main/.venv/bin/python /work/wt/pipefast28/benchmarks/bench_pipeline.py \
      --url amqp://guest:guest@127.0.0.1:58281/%2F --rows 300000 --broker-pid $(cat /tmp/pf28/broker-old.pid) 2>&1 \
      | grep -E "^(fill|batch read|stream read|sink)" >> $OUT
  done
done
echo done >> $OUT
