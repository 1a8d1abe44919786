"""The ``sansmq`` command line: ``sansmq serve [--server KIND] [--stomp HOST:PORT] ...``."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from engine.config import Config
from engine.store import StoreError

from ._driver import Listener
from ._run import SERVER_KINDS, is_postgres_url, make_broker, make_store, run
from sansmq_bench.options import DESCRIPTION as BENCH_DESCRIPTION
from sansmq_bench.options import EPILOG as BENCH_EPILOG
from sansmq_bench.options import add_arguments as add_bench_arguments
from pipeline.analyze import DESCRIPTION as ANALYZE_DESCRIPTION
from pipeline.analyze import add_arguments as add_analyze_arguments

__all__ = ["main", "parse_address", "parse_bytes", "build_parser"]

#: one row per wire protocol the broker speaks: (protocol string given to the broker, default
#: port, listening unless disabled?). A new listener (e.g. ("amqp", 5672, True)) is one more row.
PROTOCOLS: tuple[tuple[str, int, bool], ...] = (
    ("stomp", 61613, True),
    ("ws", 15674, True),  # STOMP over WebSocket on path /ws, as RabbitMQ's Web-STOMP
    ("amqp", 5672, True),
)
DEFAULT_HOST = "127.0.0.1"
DEFAULT_DATA = "./sansmq-data"


def parse_address(text: str, default_port: int) -> tuple[str, int]:
    """``HOST:PORT``, ``HOST``, ``:PORT`` or ``[v6]:PORT`` -> (host, port)."""
    host, port = text, str(default_port)
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (len(text) > end + 1 and text[end + 1] != ":"):
            raise ValueError(f"bad address {text!r}")
        host = text[1:end]
        if len(text) > end + 2:
            port = text[end + 2 :]
    elif text.count(":") == 1:
        host, port = text.split(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bad port in {text!r}")
    return host or DEFAULT_HOST, int(port)


_UNITS = {"": 1, "B": 1, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3}


def parse_bytes(text: str) -> int:
    """``536870912``, ``512MiB``, ``1GB`` -> bytes (as RabbitMQ's absolute watermark units)."""
    t = text.strip().upper()
    digits = t.rstrip("BKMGI")
    unit = t[len(digits):]
    if not digits.isdigit() or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 1073741824, 512MiB, 2GB)")
    return int(digits) * _UNITS[unit]


def _store_kind(text: str) -> str:
    if text in ("segment", "memory") or is_postgres_url(text):
        return text
    raise argparse.ArgumentTypeError(f"expected segment, memory or a postgresql:// URL, not {text!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sansmq", description="sansmq message broker")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the broker")
    serve.add_argument("--server", choices=SERVER_KINDS, default="threads",
                       help="I/O driver (default threads: the fastest in benchmarks/, see the README)")
    for proto, port, enabled in PROTOCOLS:
        default = f"{DEFAULT_HOST}:{port}" if enabled else ""
        serve.add_argument(
            f"--{proto}",
            metavar="HOST:PORT",
            default=default,
            help=f"{proto} listener (default {default or 'off'}; '' disables it)",
        )
        serve.add_argument(
            f"--no-{proto}", dest=proto, action="store_const", const="", help=f"no {proto} listener"
        )
    serve.add_argument("--config", metavar="FILE.toml", help="users, vhosts and limits")
    serve.add_argument(
        "--data", metavar="DIR", default=DEFAULT_DATA, help=f"data directory (default {DEFAULT_DATA})"
    )
    serve.add_argument(
        "--store",
        type=_store_kind,
        default="segment",
        metavar="segment|memory|postgresql://USER@HOST:PORT/DB",
        help="segment: durable embedded store in --data (default); memory: nothing survives a restart; "
        "postgresql://...: durable store in that PostgreSQL database (needs the 'postgresql' extra)",
    )
    serve.add_argument(
        "--sync",
        choices=["on", "off"],
        default="on",
        help="on: receipts/confirms of persistent messages wait for fsync (default); off: faster, unsafe",
    )
    serve.add_argument(
        "--memory-high-watermark",
        metavar="BYTES",
        type=parse_bytes,
        help="queued message bytes above which publishing connections are blocked "
        "(AMQP connection.blocked); 0 disables; overrides limits.memory_high_watermark (default 1GiB)",
    )
    serve.add_argument(
        "--log-level",
        default="info",
        type=str.lower,
        choices=["debug", "info", "warning", "error", "critical"],
    )
    bench = sub.add_parser(
        "bench",
        help="load-test a broker (AMQP, STOMP, STOMP over WebSocket), like PerfTest",
        description=BENCH_DESCRIPTION,
        epilog=BENCH_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bench_arguments(bench)
    analyze = sub.add_parser("analyze", help="traffic report from a firehose trace stream (Spark job)",
                             description=ANALYZE_DESCRIPTION)
    add_analyze_arguments(analyze)
    return parser


def _serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    listeners = []
    for proto, port, _ in PROTOCOLS:
        value = getattr(args, proto)
        if value:
            try:
                listeners.append(Listener(proto, *parse_address(value, port)))
            except ValueError as exc:
                parser.error(str(exc))
    if not listeners:
        parser.error("no listener enabled")
    try:
        config = Config.from_file(args.config) if args.config else Config()
    except (OSError, ValueError, KeyError, TypeError) as exc:  # TOMLDecodeError: a ValueError
        parser.error(f"cannot load config {args.config}: {exc}")
    if args.memory_high_watermark is not None:
        config.limits.memory_high_watermark = args.memory_high_watermark
    where = {"segment": args.data, "memory": None}.get(args.store, args.store)
    try:
        store = make_store(where, sync=args.sync == "on")
    except (OSError, StoreError) as exc:
        logging.getLogger("sansmq").error("cannot open the store: %s", exc)
        return 1
    try:
        run(args.server, listeners, broker=make_broker(config, store=store))
    except OSError as exc:  # typically: address in use / cannot bind
        logging.getLogger("sansmq").error("cannot serve: %s", exc)
        return 1
    finally:
        store.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "bench":
        from sansmq_bench import command

        return command(args, parser)
    if args.command == "analyze":
        from pipeline.analyze import command as analyze_command

        return analyze_command(args, parser)
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(name)s: %(message)s",
    )
    if args.command == "serve":
        return _serve(args, parser)
    parser.error(f"unknown command {args.command!r}")
    return 2
