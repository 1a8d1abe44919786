"""Benchmark (not a test): the broker's CPU per row of the Spark sink's traffic, without Spark.

    python benchmarks/bench_sink_publish.py --url amqp://guest:guest@127.0.0.1:5672/%2F --broker-pid PID

Publishes ``--rows`` rows into a fresh stream exactly as the sink does (``pipeline.sink``: one
producer ``x-producer``, ``x-publishing-id`` counting up from ``publishing_id(batch, row)``, delivery
mode 2, the properties encoded once around the id; ``sansmq_client.bulk.publish_batch``: mandatory,
confirms in windows of ``--confirm-window``) on ``--tasks`` connections one after another, as
Spark's tasks do. Prints rows/s, the broker's CPU microseconds per row (``--broker-pid``: from
/proc, user + system) and the load average before and after. Spark's own CPU is left out: this is
bench_pipeline.py's sink job with the client side made cheap, so the broker's share is what moves.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

from pipeline.sink import _ID, _template, publishing_id
from sansmq_client import sync
from sansmq_client.bulk import publish_batch


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(url: str, rows: int, tasks: int, body: bytes, window: int, broker_pid: int | None) -> dict[str, float]:
    stream = f"sink-bench-{uuid.uuid4().hex[:8]}"
    with sync.connect(url) as c:
        c.declare_queue(stream, durable=True, arguments={"x-queue-type": "stream"})
    per_task = rows // tasks
    query = uuid.uuid4()
    jobs = []
    for task in range(tasks):
        pre, post = _template(f"spark-{query}-{task}", None, ())
        first = publishing_id(0, 0)
        jobs.append([(stream, pre + _ID.pack(first + i) + post, body) for i in range(per_task)])
    cpu0 = _cpu(broker_pid) if broker_pid else 0.0
    t0 = time.perf_counter()
    for messages in jobs:
        with sync.connect(url) as c:
            publish_batch(c, "", messages, window=window, timeout=120)
    wall = time.perf_counter() - t0
    cpu = (_cpu(broker_pid) - cpu0) if broker_pid else 0.0
    with sync.connect(url) as c:
        c.delete_queue(stream)
    n = per_task * tasks
    return {"rows": n, "rows_per_s": n / wall, "broker_us_per_row": cpu / n * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--tasks", type=int, default=4, help="connections, one after another (Spark's tasks)")
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--confirm-window", type=int, default=1000)
    ap.add_argument("--broker-pid", type=int)
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    r = run(args.url, args.rows, args.tasks, b"x" * args.body, args.confirm_window, args.broker_pid)
    print(f"sink-shaped publish: {r['rows']} rows, {r['rows_per_s']:,.0f} rows/s, broker "
          f"{r['broker_us_per_row']:.2f} us CPU per row (load {load0:.2f} -> {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
