"""``sansmq analyze``: a Spark job over a trace stream writing an HTML report, PNG plots and Parquet.

    sansmq analyze --url amqp://guest:guest@127.0.0.1:5672/%2F --stream trace --out report/

Spark is imported only when the command runs, so ``sansmq serve`` never needs the spark extra.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sansmq_client import ClientError

from .driver import Driver, StreamNotFound, endpoint
from .options import DEFAULT_URL

__all__ = ["add_arguments", "command", "analyze", "DESCRIPTION"]

DESCRIPTION = ("Analyse a stream bound to the firehose (amq.rabbitmq.trace) with Spark: a summary of what "
               "is wrong, worst first (slowest consumers, largest backlogs, dead letters, unroutable "
               "publishes), then messages/s and bytes/s per exchange and queue, backlog over time, sizes, "
               "publish->deliver latency, redeliveries and dead letters, unroutable publishes, top routing "
               "keys (log scales where one queue dwarfs the rest). Writes OUT/index.html, PNG plots and "
               "OUT/tables/*.parquet.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=DEFAULT_URL, help="AMQP URL of the broker (default: %(default)s)")
    p.add_argument("--stream", default="trace", help="the trace stream(s), comma-separated (default: %(default)s)")
    p.add_argument("--out", default="report", type=Path, help="output directory (default: %(default)s)")
    p.add_argument("--master", default="local[*]", help="Spark master (default: %(default)s)")
    p.add_argument("--starting-offsets", default="earliest", help="earliest | latest | JSON (default: %(default)s)")
    p.add_argument("--ending-offsets", default="latest", help="latest | JSON (default: %(default)s)")


def analyze(spark: Any, url: str, stream: str, out: Path, starting: str = "earliest",
            ending: str = "latest") -> Path:
    """Run the job on ``spark``; returns the path of index.html."""
    from .analytics import tables, trace_events
    from .report import render

    df = (spark.read.format("sansmq").option("url", url).option("stream", stream)
          .option("startingOffsets", starting).option("endingOffsets", ending).load())
    events = trace_events(df).cache()
    try:  # the tables are small aggregates: one Spark job each, written from the driver
        frames = {name: table.toPandas() for name, table in tables(events).items()}
    finally:
        events.unpersist()
    (out / "tables").mkdir(parents=True, exist_ok=True)
    for name, frame in frames.items():
        # microsecond timestamps: Spark reads no nanosecond Parquet timestamps
        frame.to_parquet(out / "tables" / f"{name}.parquet", index=False, coerce_timestamps="us",
                         allow_truncated_timestamps=True)
    ep = endpoint(url)
    host, port = ep.hosts[0]
    return render(frames, out, f"{host}:{port} vhost {ep.vhost} stream {stream}",
                  spark.conf.get("spark.sql.session.timeZone"))


def command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        endpoint(args.url)
        for spec in (args.starting_offsets, args.ending_offsets):
            if spec not in ("earliest", "latest"):
                json.loads(spec)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        import matplotlib  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:  # depends on the install
        parser.error(f"sansmq analyze needs the spark extra (pip install 'sansmq[spark]'): {exc}")
    try:  # the broker and the streams, checked before Spark starts: a one-line error, no traceback
        with Driver(args.url, 10) as client:
            for stream in args.stream.split(","):
                client.status(stream.strip())
    except StreamNotFound as exc:
        print(f"sansmq analyze: error: stream {args.stream!r}: {exc}", file=sys.stderr)
        return 1
    except ClientError as exc:  # unreachable, log-in refused, another channel error
        print(f"sansmq analyze: error: {exc}", file=sys.stderr)
        return 1
    from .session import make_session

    spark = make_session(args.master, "sansmq analyze")
    try:
        index = analyze(spark, args.url, args.stream, args.out, args.starting_offsets, args.ending_offsets)
    finally:
        spark.stop()
    print(f"report: {index}")
    return 0
