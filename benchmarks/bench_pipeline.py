"""Benchmark (not a test): rows/s from a stream into Spark, and through the sink with confirms.

    python benchmarks/bench_pipeline.py --url amqp://guest:guest@127.0.0.1:5672/%2F --rows 1000000

Fills a fresh stream with ``--rows`` messages of ``--body`` bytes (our blocking client, confirms in
windows), then times three Spark jobs on ``--master``:

* batch read   -- ``spark.read.format("sansmq")`` of the whole stream into the ``noop`` sink;
* stream read  -- ``readStream`` with ``trigger(availableNow=True)`` and ``maxRecordsPerTrigger``
  into the ``noop`` sink (micro-batches, checkpointed offsets);
* sink         -- ``spark.range`` rows written with ``df.write.format("sansmq")`` (publisher confirms,
  ``x-producer``/``x-publishing-id`` per row) into a second stream.

The options printed with each result are the Kafka-source-style options used (``--schema``: the
narrower schema given to the reads), then the CPU time per row of the broker (``--broker-pid``), the Spark JVM and its Python workers, and the load average (``--only``
picks the jobs). Needs a broker that serves stream queues (sansmq with streams, or RabbitMQ 3.10+) and
the spark extra.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from amqpproto import spec
from pipeline.session import make_session
from sansmq_client import sync
from sansmq_client.bulk import publish_batch


def fill(url: str, stream: str, rows: int, body: bytes) -> float:
    props = spec.encode_properties(spec.BasicProperties(delivery_mode=2))
    t0 = time.perf_counter()
    with sync.connect(url) as c:
        for done in range(0, rows, 100_000):  # a list per 100,000 rows: memory stays flat
            publish_batch(c, "", [(stream, props, body)] * min(100_000, rows - done), timeout=120)
    return time.perf_counter() - t0


def _stat(pid: int) -> tuple[int, str, float]:
    """(parent pid, command name, CPU seconds of the process and its waited-for children)."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), name, sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def cpu_split(broker_pid: int | None) -> dict[str, float]:
    """CPU seconds so far: the broker (``--broker-pid``), this process's Spark JVM, and the Python
    workers it runs (every live descendant of the JVM; a worker that exited is counted in its parent)."""
    procs = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                procs[int(entry)] = _stat(int(entry))
            except (OSError, ValueError):
                pass
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out = {"broker": procs[broker_pid][2]} if broker_pid in procs else {}
    jvms = [p for p in children.get(os.getpid(), []) if procs[p][1] == "java"]
    out["spark JVM"] = sum(procs[p][2] for p in jvms)
    todo, workers = [c for j in jvms for c in children.get(j, [])], 0.0
    while todo:
        pid = todo.pop()
        workers += procs[pid][2]
        todo += children.get(pid, [])
    out["python workers"] = workers
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=100, help="body size in bytes")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--max-records-per-partition", help="default: the source's (one task per stream's range)")
    ap.add_argument("--min-partitions", help="default: the source's (none)")
    ap.add_argument("--schema", help='a narrower schema for the reads, e.g. "offset long, body binary"')
    ap.add_argument("--max-records-per-trigger", default="500000")
    ap.add_argument("--prefetch", default="2000")
    ap.add_argument("--confirm-window", default="1000")
    ap.add_argument("--broker-pid", type=int, help="report the broker's CPU per row too")
    ap.add_argument("--only", nargs="*", default=["batch", "stream", "sink"], help="which jobs to time")
    ap.add_argument("--streams", type=int, default=1,
                    help="read the rows from this many streams (rows/streams each), as a partitioned stream's")
    a = ap.parse_args()

    base, dst = f"bench-pipeline-{os.getpid()}", f"bench-pipeline-out-{os.getpid()}"
    sources = [base] if a.streams == 1 else [f"{base}-{i}" for i in range(a.streams)]
    src = ",".join(sources)
    with sync.connect(a.url) as c:
        for s in (*sources, dst):
            c.declare_queue(s, durable=True, arguments={"x-queue-type": "stream"})
    secs = sum(fill(a.url, s, a.rows // a.streams, b"x" * a.body) for s in sources)
    print(f"fill: {a.rows} rows of {a.body} B in {secs:.1f}s = {a.rows / secs:,.0f} rows/s (client, confirms)")

    spark = make_session(a.master, "bench_pipeline")
    read_opts = {"url": a.url, "stream": src, "prefetch": a.prefetch}
    for name, value in (("maxRecordsPerPartition", a.max_records_per_partition), ("minPartitions", a.min_partitions)):
        if value is not None:
            read_opts[name] = value
    shown_read = {**read_opts, **({"schema": a.schema} if a.schema else {})}

    def with_options(reader):  # the read options, and the schema if given
        for k, v in read_opts.items():
            reader = reader.option(k, v)
        return reader if a.schema is None else reader.schema(a.schema)

    def timed(label: str, opts: dict[str, str], job) -> None:
        before = cpu_split(a.broker_pid)
        t0 = time.perf_counter()
        rows = job()
        secs = time.perf_counter() - t0
        used = {k: v - before.get(k, 0.0) for k, v in cpu_split(a.broker_pid).items()}
        shown = ", ".join(f"{k}={v}" for k, v in opts.items() if k != "url")
        cpu = "  CPU us/row: " + ", ".join(f"{k} {v / rows * 1e6:.1f}" for k, v in used.items())
        print(f"{label:12s} {rows:>10,} rows in {secs:6.1f}s = {rows / secs:>10,.0f} rows/s   ({shown}){cpu}"
              f"  load {os.getloadavg()[0]:.1f}", flush=True)

    def batch_read() -> int:
        with_options(spark.read.format("sansmq")).load().write.format("noop").mode("overwrite").save()
        return a.rows

    def stream_read() -> int:
        reader = with_options(spark.readStream.format("sansmq").option("maxRecordsPerTrigger", a.max_records_per_trigger))
        with tempfile.TemporaryDirectory() as ck:
            q = (reader.load().writeStream.format("noop").option("checkpointLocation", ck)
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            return sum(p["numInputRows"] for p in q.recentProgress)

    def sink() -> int:
        df = spark.range(a.rows, numPartitions=spark.sparkContext.defaultParallelism).selectExpr(
            f"cast(repeat('y', {a.body}) as binary) as body")
        (df.write.format("sansmq").option("url", a.url).option("stream", dst)
         .option("confirmWindow", a.confirm_window).mode("append").save())
        return a.rows

    if "batch" in a.only:
        timed("batch read", shown_read, batch_read)
    if "stream" in a.only:
        timed("stream read", {**shown_read, "maxRecordsPerTrigger": a.max_records_per_trigger}, stream_read)
    if "sink" in a.only:
        timed("sink", {"stream": dst, "confirmWindow": a.confirm_window}, sink)
    spark.stop()
    with sync.connect(a.url) as c:
        for s in (*sources, dst):
            c.delete_queue(s)


if __name__ == "__main__":
    main()
