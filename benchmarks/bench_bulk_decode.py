"""Benchmark (not a test): rows/s of decoding stream deliveries in-process, bulk vs general path.

A buffer of N deliveries as a sansmq stream sends them (basic.deliver + content header with
content_type, timestamp and an ``x-stream-offset`` header plus two others, + body) is decoded

- bulk: ``amqpproto.bulk.StreamDeliveryDecoder`` into ``DeliveryColumns`` (or, on an older checkout
  without it, the pipeline's ``pipeline.columns.DeliveryDecoder`` it came from: run this script with
  that checkout's ``src`` first on PYTHONPATH for a before/after comparison);
- general: a client-role ``Connection``: ``receive_data`` + ``next_event`` per delivery (a
  ``BasicDeliver`` with its properties and headers dict), for reference.

    python benchmarks/bench_bulk_decode.py [--rows 20000] [--body 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import amqpproto as a
from amqpproto import spec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_amqpproto import open_pair  # noqa: E402


def _bulk():
    """(decoder factory, columns factory, which) for this checkout."""
    try:
        from amqpproto.bulk import DeliveryColumns, StreamDeliveryDecoder
        return StreamDeliveryDecoder, DeliveryColumns, "amqpproto.bulk"
    except ImportError:
        from pipeline.columns import Columns, DeliveryDecoder
        return DeliveryDecoder, Columns, "pipeline.columns"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    client, server = open_pair()
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    wire = b"".join(
        server.send(spec.BasicDeliver("ctag", i + 1, False, "", "events.k", channel=1, body=b"x" * args.body,
                                      properties=spec.BasicProperties(
                                          content_type="application/json", delivery_mode=2, timestamp=ts,
                                          headers={"x-stream-offset": i, "source": "sensor-7", "n": 3})))
        for i in range(args.rows))
    decoder_cls, columns_cls, which = _bulk()

    def bulk() -> int:
        cols = columns_cls()
        pos, seen, other = decoder_cls().decode(wire, 0, cols, 0, 1 << 62, 1 << 62)
        assert pos == len(wire) and not other
        return len(cols)

    def general() -> int:
        client.receive_data(wire)
        n = 0
        while client.next_event() is not a.NEED_DATA:
            n += 1
        return n

    for name, fn in ((f"bulk ({which})", bulk), ("general (Connection.next_event)", general)):
        best = 0.0
        for _ in range(args.rounds):  # keep the best: the machine is shared
            t0 = time.perf_counter()
            n = fn()
            best = max(best, n / (time.perf_counter() - t0))
        assert n == args.rows
        print(f"{name:40} {best:12,.0f} rows/s  ({args.rows} rows, {args.body} B bodies)")


if __name__ == "__main__":
    main()
