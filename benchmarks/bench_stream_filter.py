"""Benchmark (not a test): a Spark batch read of a whole stream against the same read with a
1%-selective stream filter pushed down (``where(col("filter") == value)``, issue 28).

    python benchmarks/bench_stream_filter.py --url amqp://guest:guest@127.0.0.1:PORT/%2F \
        --broker-pid PID --rows 200000 --rounds 3

Fills a fresh stream with ``--rows`` messages of ``--body`` bytes whose ``x-stream-filter-value``
is one of ``--values`` values, in runs of ``--run`` messages per value (values clustered in time,
as regions or tenants publishing in bursts: the broker's chunk filters can skip the chunks of the
other values). Then, in ``--rounds`` alternated rounds (all then filtered, filtered then all, ...:
the machine's load drifts), times both reads into Spark's ``noop`` sink and reports per read:

* stream rows/s: the stream's rows covered per second of wall time (what the filter saves shows
  here: the same rows covered in less time);
* CPU per stream row: the broker's (``--broker-pid``, from /proc) and this process tree's (the
  Spark driver, its JVM and Python workers), in microseconds, user + system;
* the load average at the start of each read.

Medians over the rounds are printed last, with the ratio filtered / all.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from amqpproto import spec
from pipeline.session import make_session
from sansmq_client import sync
from sansmq_client.bulk import publish_batch

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and every live descendant (Spark's JVM and its Python workers)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(name))
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu_seconds(pid)
        todo += children.get(pid, [])
    return total


def fill(url: str, stream: str, rows: int, body: bytes, values: int, run: int) -> float:
    t0 = time.perf_counter()
    with sync.connect(url) as c:
        done, i = 0, 0
        while done < rows:
            n = min(run, rows - done)
            props = spec.encode_properties(spec.BasicProperties(
                delivery_mode=2, headers={"x-stream-filter-value": f"v{i % values:03d}"}))
            publish_batch(c, "", [(stream, props, body)] * n, timeout=120)
            done += n
            i += 1
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--broker-pid", type=int, default=None)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--values", type=int, default=100, help="distinct filter values (1/values selective)")
    ap.add_argument("--run", type=int, default=1000, help="messages per value in a row")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--max-records-per-partition", default="100000")
    a = ap.parse_args()

    stream = f"bench-filter-{os.getpid()}"
    with sync.connect(a.url) as c:
        c.declare_queue(stream, durable=True, arguments={"x-queue-type": "stream"})
    secs = fill(a.url, stream, a.rows, b"x" * a.body, a.values, a.run)
    print(f"fill: {a.rows:,} rows of {a.body} B, {a.values} values in runs of {a.run}, in {secs:.1f}s")

    spark = make_session(a.master, "bench_stream_filter")
    from pyspark.sql.functions import col

    wanted = f"v{42 % a.values:03d}"
    expect = sum(min(a.run, a.rows - s) for i, s in enumerate(range(0, a.rows, a.run))
                 if f"v{i % a.values:03d}" == wanted)

    def load():
        return (spark.read.format("sansmq").option("url", a.url).option("stream", stream)
                .option("maxRecordsPerPartition", a.max_records_per_partition).load())

    def read_all() -> int:
        load().write.format("noop").mode("overwrite").save()
        return a.rows

    def read_filtered() -> int:
        df = load().where(col("filter") == wanted)
        df.write.format("noop").mode("overwrite").save()
        return expect

    results: dict[str, list[tuple[float, float, float]]] = {"all": [], "filtered": []}
    jobs = {"all": read_all, "filtered": read_filtered}
    me = os.getpid()
    read_all()  # warm up: Spark's first job starts its workers
    got = load().where(col("filter") == wanted).count()
    assert got == expect, (got, expect)
    for r in range(a.rounds):
        order = ["all", "filtered"] if r % 2 == 0 else ["filtered", "all"]
        for label in order:
            load1 = os.getloadavg()[0]
            b0 = cpu_seconds(a.broker_pid) if a.broker_pid else 0.0
            s0 = tree_cpu(me)
            t0 = time.perf_counter()
            matched = jobs[label]()
            wall = time.perf_counter() - t0
            broker = (cpu_seconds(a.broker_pid) - b0) if a.broker_pid else float("nan")
            client = tree_cpu(me) - s0
            results[label].append((a.rows / wall, broker / a.rows * 1e6, client / a.rows * 1e6))
            print(f"round {r + 1} {label:8s} {matched:>9,} rows matched, {wall:6.2f}s = {a.rows / wall:>10,.0f} "
                  f"stream rows/s; CPU/stream row: broker {broker / a.rows * 1e6:6.2f} us, "
                  f"spark {client / a.rows * 1e6:6.2f} us; load {load1:.2f}")
    print("medians:")
    med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in results.items()}
    for k, (rate, broker, client) in med.items():
        print(f"  {k:8s} {rate:>10,.0f} stream rows/s; CPU/stream row: broker {broker:6.2f} us, spark {client:6.2f} us")
    print(f"  filtered/all: rows/s x{med['filtered'][0] / med['all'][0]:.1f}, broker CPU x{med['filtered'][1] / med['all'][1]:.2f}, "
          f"spark CPU x{med['filtered'][2] / med['all'][2]:.2f}")
    spark.stop()
    with sync.connect(a.url) as c:
        c.delete_queue(stream)


if __name__ == "__main__":
    main()
