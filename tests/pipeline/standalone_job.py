"""A driver on a standalone Spark cluster (the deployment docs/pipeline.md describes), run by
test_spark_standalone.py as its own process (one SparkContext per process).

    python standalone_job.py MASTER URL SRC DST CHECKPOINT

Reads SRC in a batch job, then copies it to DST (bodies upper-cased) with a streaming query,
availableNow; prints one JSON line: the rows the batch read saw and the executors the cluster gave
(on a standalone cluster every task runs in an executor: none runs in the driver).
"""

from __future__ import annotations

import json
import sys

from pipeline.session import make_session


def main() -> None:
    master, url, src, dst, checkpoint = sys.argv[1:6]
    spark = make_session(master, "sansmq-standalone-test", {
        # executors connect back to the driver: the address they reach it at, and the one it listens on
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "512m", "spark.cores.max": "2", "spark.sql.shuffle.partitions": "2",
    })
    rows = (spark.read.format("sansmq").option("url", url).option("stream", src)
            .option("maxRecordsPerPartition", "500").load())
    count = rows.count()
    q = (spark.readStream.format("sansmq").option("url", url).option("stream", src)
         .option("maxRecordsPerTrigger", "1000").load()
         .selectExpr("upper(cast(body as string)) as body")
         .writeStream.format("sansmq").option("url", url).option("stream", dst)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # less the driver's
    print(json.dumps({"count": count, "executors": executors}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
