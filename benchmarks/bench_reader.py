"""Benchmark (not a test): the Spark reader's hot path in-process, rows/s of ``read_range`` (the
work of one Spark task: consume a stream range, build Arrow record batches) without Spark and
without a broker's own work: a stand-in broker (tests/pipeline/stream_standin.py) in a child process
sends pre-encoded deliveries, byte for byte what sansmq sends.

    python benchmarks/bench_reader.py --rows 200000 --body 100 --repeat 5

The same script runs against an older checkout of ``pipeline`` (PYTHONPATH) for a before/after
comparison; interleave the runs on a busy machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import sys
import time
from pathlib import Path

from amqpproto import spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "pipeline"))
from stream_standin import FakeStreamBroker  # noqa: E402


def _serve(rows: int, body: int, stamps: bool, ready: multiprocessing.Queue) -> None:
    props = spec.BasicProperties(delivery_mode=2, content_type="application/octet-stream")
    broker = FakeStreamBroker([("events", props, b"x" * body)] * rows, stamps=stamps)
    ready.put(broker.url)
    broker.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--prefetch", default="2000")
    ap.add_argument("--stamps", action="store_true", help="deliveries carry x-stream-timestamp, as sansmq's do")
    ap.add_argument("--columns", help='the columns read (a narrower schema), e.g. "offset,body"')
    a = ap.parse_args()

    from pipeline.options import ReadOptions
    from pipeline.source import StreamRange, read_range

    ready: multiprocessing.Queue = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(a.rows, a.body, a.stamps, ready), daemon=True)
    server.start()
    url = ready.get(timeout=60)
    opts = ReadOptions.parse({"url": url, "stream": "events", "prefetch": a.prefetch})
    if a.columns:  # an older checkout has no narrower schema
        opts = dataclasses.replace(opts, columns=tuple(a.columns.split(",")))
    part = StreamRange("events", 0, a.rows)
    best = 0.0
    for i in range(a.repeat + 1):  # the first run warms the server's encoding cache
        t0, c0 = time.perf_counter(), time.process_time()
        rows = sum(b.num_rows for b in read_range(opts, part))
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert rows == a.rows, rows
        if i:
            best = max(best, rows / cpu)
            print(f"run {i}: {rows / secs:>10,.0f} rows/s wall, {rows / cpu:>10,.0f} rows/s of reader CPU", flush=True)
    print(f"best: {best:,.0f} rows/s of reader CPU ({a.rows} rows of {a.body} B, prefetch {a.prefetch}"
          f"{', stamped' if a.stamps else ''}{', columns ' + a.columns if a.columns else ''})")
    server.terminate()


if __name__ == "__main__":
    main()
