#!/bin/sh
# new code: the batch read (the session's first job) with workers importing PySpark from the installed
# package (make_session's worker_spark_home) and from pyspark.zip (SPARK_HOME set to PySpark's own home,
# which turns it off), alternately
OUT=$1; ROUNDS=$2
PORT=$(cat /tmp/sp28/port); BPID=$(cat /tmp/sp28/broker.pid)
HOME_DIR=$(/work/main/.venv/bin/python -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))")
: > $OUT
for round in $(seq $ROUNDS); do
  for side in zip installed; do
    echo "## round $round pyspark from $side $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $OUT
    if [ $side = zip ]; then export SPARK_HOME=$HOME_DIR; else unset SPARK_HOME; fi
    (cd /tmp/sp28 && PYTHONPATH=/work/wt/sparkside28/src timeout 900 /work/main/.venv/bin/python /work/wt/sparkside28/benchmarks/bench_pipeline.py \
      --url amqp://guest:guest@127.0.0.1:$PORT/%2F --rows 300000 --broker-pid $BPID --only batch stream 2>&1) \
      | grep -E "^(fill|batch read|stream read|sink|Traceback|[A-Za-z]*Error)" >> $OUT
  done
done
echo done >> $OUT
