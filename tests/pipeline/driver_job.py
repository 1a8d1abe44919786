"""A streaming query run as its own driver process (the SIGKILL test starts it with subprocess).

    python driver_job.py URL SRC DST CHECKPOINT [HOLD_MARKER]

Copies SRC to DST (bodies upper-cased) with availableNow, 1000 rows per micro-batch (``copy_query``;
the test restarts it in its own session). With
HOLD_MARKER, the sink's commit of batch 1 -- called after every row of the batch is published and
confirmed, before Spark records the batch as committed -- creates that file and waits forever, so
the test can SIGKILL the driver exactly there.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pipeline.datasource import SansmqDataSource
from pipeline.session import make_session
from pipeline.sink import StreamWriter


def copy_query(spark, url: str, src: str, dst: str, checkpoint: str):
    """SRC to DST, bodies upper-cased, availableNow, 1000 rows per micro-batch (started)."""
    return (spark.readStream.format("sansmq").option("url", url).option("stream", src)
            .option("maxRecordsPerTrigger", "1000").option("maxRecordsPerPartition", "500").load()
            .selectExpr("upper(cast(body as string)) as body")
            .writeStream.format("sansmq").option("url", url).option("stream", dst)
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())


def main() -> None:
    url, src, dst, checkpoint = sys.argv[1:5]
    marker = Path(sys.argv[5]) if len(sys.argv) > 5 else None

    class HoldingWriter(StreamWriter):
        def commit(self, messages, batchId):  # noqa: N803 - Spark's name
            if marker is not None and batchId == 1:
                marker.write_text(str(batchId))
                while True:
                    time.sleep(1)

    class HoldingSource(SansmqDataSource):
        def streamWriter(self, schema, overwrite):
            return HoldingWriter(self._write_options(schema))

    spark = make_session("local[2]", "sansmq-kill-test", {"spark.sql.shuffle.partitions": "2"})
    spark.dataSource.register(HoldingSource)  # same name "sansmq": replaces the plain one
    q = copy_query(spark, url, src, dst, checkpoint)
    q.awaitTermination()
    if q.exception() is not None:
        raise SystemExit(f"query failed: {q.exception()}")
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
