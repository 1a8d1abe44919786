"""``sansmq bench``: a load generator for AMQP 0-9-1, STOMP and STOMP over WebSocket brokers.

Like RabbitMQ's PerfTest: producers and consumers on their own connections, message size, rate
or unbounded, duration or count, publisher confirms / receipts, prefetch, ack modes, persistent
messages. Prints msg/s and latency percentiles every second on stderr and a JSON summary at the
end. The clients are built on this project's sans-IO codecs (amqpproto, stompproto, wsframe).

    from sansmq_bench import parse_options, run_sync
    summary = run_sync(parse_options(["-P", "stomp", "-z", "5"]))
"""

from __future__ import annotations

import argparse

from .options import Options, add_arguments, options_from_args, parse_options
from .runner import main, run, run_sync
from .stats import Histogram, Stats

__all__ = ["Options", "Histogram", "Stats", "add_arguments", "options_from_args", "parse_options",
           "run", "run_sync", "main", "command"]


def command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """The ``sansmq bench`` subcommand: argparse namespace -> exit code."""
    try:
        opts = options_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    return main(opts)
