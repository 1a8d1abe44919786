"""The ``sansmq`` command line: ``sansmq serve [--server KIND] [--stomp HOST:PORT] ...``.

Exit status (also in docs/operator/index.md): 0 stopped cleanly (or --check-config found no problem);
1 the broker could not start or run (port in use, data directory not writable, store unreachable,
a missing optional package); 2 the command line or the config file is wrong; 130 a second SIGINT
cut the graceful shutdown short. Every failure a user can cause is one line on stderr, no traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from importlib import metadata
from typing import Any, Sequence

from engine.config import Config
from engine.sim.cli import add_arguments as add_simulate_arguments
from engine.config_schema import ConfigError, load, parse_size
from engine.model import ModelError
from engine.store import Store, StoreError

from ._disk import DiskMonitor, machine_memory
from ._driver import Listener
from ._fds import raise_fd_limit
from ._run import (EXIT_INTERRUPTED, SERVER_KINDS, ServerUnavailable, check_server_available, is_postgres_url,
                   make_broker, make_server, make_store, run)
from ._sockets import ListenError
from .management import DEFAULT_HTTP, DEFAULT_PROMETHEUS, HTTPS_PORT, PROMETHEUS_HTTPS_PORT, OpsListeners, audit
from .management.request import MAX_DEPTH, too_deep
from .logs import BURST, DEFAULT_BACKUPS, DEFAULT_MAX_BYTES, LOG_FORMATS, WINDOW, setup_logging
from .recovery import log_recovery
from .tls import TlsOptionsError, make_ssl_context
from .streams_cli import add_streams_arguments, streams_command
from .cluster.cli import LINK_PORT, add_cluster_arguments, attach_node, cluster_command, open_cluster_store
from .cluster.tls import LINK_TLS_FLAGS, LinkTls, link_tls
from sansmq_bench.options import DESCRIPTION as BENCH_DESCRIPTION
from sansmq_bench.options import EPILOG as BENCH_EPILOG
from sansmq_bench.options import add_arguments as add_bench_arguments
from pipeline.analyze import DESCRIPTION as ANALYZE_DESCRIPTION
from pipeline.analyze import add_arguments as add_analyze_arguments

__all__ = ["main", "parse_address", "parse_bytes", "build_parser", "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE"]

log = logging.getLogger("sansmq")

EXIT_OK = 0
EXIT_FAILURE = 1  # the environment: ports, files, the database, missing packages
EXIT_USAGE = 2  # the command line or the config file (argparse's own status for usage errors)

#: one row per wire protocol the broker speaks: (protocol string given to the broker, default
#: port, listening unless disabled?). A new listener (e.g. ("amqp", 5672, True)) is one more row.
PROTOCOLS: tuple[tuple[str, int, bool], ...] = (
    ("stomp", 61613, True),
    ("ws", 15674, True),  # STOMP over WebSocket on path /ws, as RabbitMQ's Web-STOMP
    ("amqp", 5672, True),
)
#: the TLS listeners (RabbitMQ's ports): on by default once a certificate is given (--tls-cert)
TLS_PROTOCOLS: tuple[tuple[str, int], ...] = (("amqps", 5671), ("stomps", 61614), ("wss", 15673))
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


def parse_bytes(text: str) -> int:
    """``536870912``, ``512MiB``, ``1GB`` -> bytes (as RabbitMQ's absolute watermark units)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _store_kind(text: str) -> str:
    if text in ("segment", "memory") or is_postgres_url(text):
        return text
    raise argparse.ArgumentTypeError(f"expected segment, memory or a postgresql:// URL, not {text!r}")


def _version() -> str:
    try:
        return metadata.version("sansmq")
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return "unknown (not installed)"


def _repeat_limit(text: str) -> tuple[int, float]:
    """``20/10`` -> at most 20 similar lines per 10 seconds."""
    lines, sep, secs = text.partition("/")
    try:
        value = int(lines), float(secs.rstrip("s"))
    except ValueError:
        value = (0, 0.0)
    if not sep or value[0] < 1 or value[1] <= 0:
        raise argparse.ArgumentTypeError(f"expected LINES/SECONDS such as {BURST}/{WINDOW:g}, not {text!r}")
    return value


def _count(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, not {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, not {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sansmq", description="sansmq message broker (STOMP, AMQP 0-9-1, WebSocket)",
        epilog="exit status: 0 ok, 1 could not start or run, 2 bad command line or config, "
               "130 second SIGINT during shutdown")
    parser.add_argument("--version", action="version", version=f"sansmq {_version()}")
    sub = parser.add_subparsers(dest="command", required=True,
                                metavar="{serve,bench,analyze,streams,cluster,simulate}")
    serve = sub.add_parser(
        "serve", help="run the broker",
        description="Run the broker until SIGTERM or SIGINT, then close every client with its protocol's "
                    "close and wait for pending disk syncs (a second SIGINT exits at once).",
        epilog="exit status: 0 stopped cleanly or config OK, 1 could not start (port in use, data "
               "directory, store, missing package), 2 bad command line or config file, 130 second SIGINT")
    add_serve_arguments(serve)
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
    streams = sub.add_parser("streams", help="stream queues on a running broker: create, create-partitioned")
    add_streams_arguments(streams)
    cluster_cmd = sub.add_parser("cluster", help="a cluster on PostgreSQL: status, drain, revive, rebalance")
    add_cluster_arguments(cluster_cmd)
    simulate = sub.add_parser("simulate", help="deterministic simulation: seeded runs with injected faults",
                              description="Run seeded whole-broker simulations (engine.sim) in parallel processes.")
    add_simulate_arguments(simulate)
    parser.set_defaults(subparsers={"serve": serve, "bench": bench, "analyze": analyze,
                                    "streams": streams, "cluster": cluster_cmd, "simulate": simulate})
    return parser


def add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    """The options of ``sansmq serve``: listeners, TLS, config, store, cluster, limits, logging."""
    serve.add_argument("--server", choices=SERVER_KINDS, default="threads",
                       help="I/O driver (default threads: the fastest in benchmarks/, see the README; "
                            "trio needs pip install 'sansmq[trio]')")
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
    for name, (host, port), what in (("http", DEFAULT_HTTP, "management HTTP API and admin page"),
                                     ("prometheus", DEFAULT_PROMETHEUS, "Prometheus metrics")):
        serve.add_argument(f"--{name}", metavar="HOST:PORT", default=None,
                           help=f"{what} listener (default {host}:{port}, or the config file's '{name}'; "
                                "'' disables it)")
        serve.add_argument(f"--no-{name}", dest=name, action="store_const", const="", help=f"no {name} listener")
    for proto, port in TLS_PROTOCOLS:
        serve.add_argument(f"--{proto}", metavar="HOST:PORT", default=None,
                           help=f"{proto} listener (TLS; default {DEFAULT_HOST}:{port} when --tls-cert is given, "
                                "else off; '' disables it)")
        serve.add_argument(f"--no-{proto}", dest=proto, action="store_const", const="", help=f"no {proto} listener")
    for name, port, what in (("https", HTTPS_PORT, "management HTTP API and admin page"),
                             ("prometheus-https", PROMETHEUS_HTTPS_PORT, "Prometheus metrics")):
        serve.add_argument(f"--{name}", metavar="HOST:PORT", default=None,
                           help=f"{what} over TLS (needs --tls-cert; port {port} unless given; off unless "
                                f"given here or as '{name.replace('-', '_')}' in the config file)")
    tls = serve.add_argument_group("TLS (also [tls] in the config file)")
    tls.add_argument("--tls-cert", metavar="FILE.pem", help="server certificate chain (PEM; may hold the key)")
    tls.add_argument("--tls-key", metavar="FILE.pem", help="private key of --tls-cert (PEM)")
    tls.add_argument("--tls-ca", metavar="FILE.pem", help="CA bundle to verify client certificates with")
    tls.add_argument("--tls-verify-peer", action="store_true", default=None,
                     help="require a client certificate signed by --tls-ca (refused in the handshake otherwise)")
    serve.add_argument("--config", metavar="FILE.toml", help="users, vhosts, limits, tls, http and prometheus")
    serve.add_argument("--definitions", metavar="FILE.json",
                       help="import a definitions file (RabbitMQ's JSON: users, vhosts, permissions, policies, "
                            "queues, exchanges, bindings) at start, merged over the stored state")
    serve.add_argument("--check-config", action="store_true",
                       help="validate the command line and --config, print a summary and exit (0: valid)")
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
    cluster = serve.add_argument_group("cluster (also [cluster] in the config file; needs a postgresql:// --store)")
    cluster.add_argument("--node", metavar="NAME",
                         help="run as node NAME of the cluster of every node sharing the --store database")
    cluster.add_argument("--cluster-address", metavar="HOST:PORT",
                         help="the node-to-node link listener (AMQP for peers only; default 127.0.0.1:25672); "
                              "its bound address is advertised to the other nodes")
    cluster.add_argument("--cluster-lease", metavar="SECONDS", type=_seconds,
                         help="how long this node's queue leases outlive its last heartbeat before other "
                              "nodes take its queues over (default 5)")
    for flag, what in LINK_TLS_FLAGS:
        cluster.add_argument(f"--cluster-tls-{flag}", metavar="PEM", help=what)
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
    serve.add_argument("--disk-free-limit", metavar="BYTES", type=parse_bytes,
                       help="free space on the data directory's disk below which publishing connections are "
                            "blocked (the disk alarm); 0 disables; overrides disk_free_limit (default 50MB)")
    serve.add_argument("--flow-credit", metavar="N", type=_count,
                       help="ready messages a queue with consumers may hold before its publishers are not "
                            "read (until it drains to half); 0 disables; overrides limits.flow_credit (default 400)")
    serve.add_argument("--tcp-recv-buffer", metavar="BYTES", type=parse_bytes,
                       help="SO_RCVBUF of accepted connections: bounds what a paused publisher has in flight; "
                            "0 = the kernel's autotuning; overrides limits.tcp_recv_buffer (default 256KiB)")
    serve.add_argument("--trace", metavar="VHOST", action="append", default=[],
                       help="publish the vhost's traffic to its firehose, the amq.rabbitmq.trace exchange "
                            "(repeatable; adds to the config's trace_vhosts)")
    serve.add_argument("--events", metavar="VHOST", default=None,
                       help="publish the broker's events (connections, channels, queues, consumers, "
                            "bindings, users, alarms) to the amq.rabbitmq.event exchange of VHOST "
                            "(overrides the config's event_vhost)")
    serve.add_argument("--handshake-timeout", metavar="SECONDS", type=_seconds, default=None,
                       help="a connection not logged in this long after its accept (TLS, WebSocket upgrade, "
                            "STOMP CONNECT, AMQP connection.open) is closed; 0 disables; overrides "
                            "limits.handshake_timeout (milliseconds; default 10 s, as RabbitMQ)")
    serve.add_argument("--shutdown-timeout", metavar="SECONDS", type=_seconds, default=None,
                       help="on SIGTERM/SIGINT, how long clients get to answer their protocol's close "
                            "before they are dropped (default 5)")
    logs = serve.add_argument_group("logging")
    logs.add_argument(
        "--log-level",
        default="info",
        type=str.lower,
        choices=["debug", "info", "warning", "error", "critical"],
    )
    logs.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                      help="text: timestamp, level, component, message; json: one object per line "
                           "with the event's fields (peer, user, vhost, protocol, reason...)")
    logs.add_argument("--log-file", metavar="PATH",
                      help="log there instead of stderr, rotated by size (see --log-max-size)")
    logs.add_argument("--log-max-size", metavar="BYTES", type=parse_bytes, default=DEFAULT_MAX_BYTES,
                      help=f"rotate --log-file at this size, keeping {DEFAULT_BACKUPS} old files (default 10MiB)")
    logs.add_argument("--log-repeat-limit", metavar="LINES/SECONDS", type=_repeat_limit,
                      default=(BURST, WINDOW),
                      help=f"at most LINES similar lines (same message, different peers) per SECONDS; the rest "
                           f"are counted in a 'suppressed N similar messages' note (default {BURST}/{WINDOW:g})")


class CliError(Exception):
    """A failure the user can fix: printed as one line, the process exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


def _tls_context(args: argparse.Namespace, config: Config) -> Any:
    """The listeners' ssl.SSLContext from --tls-* over the config file's [tls], or None."""
    tls = config.tls
    cert = args.tls_cert or tls.cert
    if not cert:
        for flag in ("tls_key", "tls_ca", "tls_verify_peer"):
            if getattr(args, flag):
                raise CliError(f"--{flag.replace('_', '-')} needs --tls-cert", EXIT_USAGE)
        return None
    verify = tls.verify_peer if args.tls_verify_peer is None else args.tls_verify_peer
    try:
        return make_ssl_context(cert, args.tls_key or tls.key, args.tls_ca or tls.ca, verify)
    except TlsOptionsError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _link_tls(config: Config) -> LinkTls | None:
    """The node-to-node link's TLS contexts ([cluster] tls_* over --cluster-tls-*), or None."""
    try:
        return link_tls(config.cluster)
    except TlsOptionsError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _listeners(args: argparse.Namespace, config: Config) -> list[Listener]:
    listeners = []
    for proto, port, _ in PROTOCOLS:
        value = getattr(args, proto)
        if value:
            try:
                listeners.append(Listener(proto, *parse_address(value, port)))
            except ValueError as exc:
                raise CliError(f"--{proto}: {exc}", EXIT_USAGE) from None
    ctx = _tls_context(args, config)
    for proto, port in TLS_PROTOCOLS:
        value = getattr(args, proto)
        if value is None:
            value = f"{DEFAULT_HOST}:{port}" if ctx is not None else ""
        if not value:
            continue
        if ctx is None:
            raise CliError(f"--{proto} needs a certificate (--tls-cert or [tls] cert in the config file)", EXIT_USAGE)
        try:
            listeners.append(Listener(proto, *parse_address(value, port), tls=ctx))
        except ValueError as exc:
            raise CliError(f"--{proto}: {exc}", EXIT_USAGE) from None
    if not listeners:
        raise CliError("no listener enabled (every one of --stomp, --ws, --amqp is off)", EXIT_USAGE)
    if config.cluster.node is not None:  # the node-to-node link (engine.cluster.link)
        tls = _link_tls(config)
        try:
            listeners.append(Listener("cluster", *parse_address(config.cluster.address or
                                                                f"{DEFAULT_HOST}:{LINK_PORT}", LINK_PORT),
                                      tls=None if tls is None else tls.server))
        except ValueError as exc:
            raise CliError(f"--cluster-address: {exc}", EXIT_USAGE) from None
    return listeners


def _ops_addresses(args: argparse.Namespace, config: Config) -> tuple[tuple[str, int] | None, ...]:
    """(http, prometheus, https, prometheus_https) listener addresses: the flag, else the config
    file, else the default (the HTTPS ones are off by default, as RabbitMQ's management.ssl.*)."""
    out: list[tuple[str, int] | None] = []
    for name, default in (("http", DEFAULT_HTTP), ("prometheus", DEFAULT_PROMETHEUS),
                          ("https", (DEFAULT_HOST, HTTPS_PORT)),
                          ("prometheus_https", (DEFAULT_HOST, PROMETHEUS_HTTPS_PORT))):
        value = getattr(args, name)
        if value is None:
            value = getattr(config, name)
        if value is None:
            out.append(None if "https" in name else default)
            continue
        try:
            out.append(parse_address(value, default[1]) if value else None)
        except ValueError as exc:
            raise CliError(f"--{name.replace('_', '-')}: {exc}", EXIT_USAGE) from None
    return tuple(out)


def _ops_plan(args: argparse.Namespace, config: Config) -> tuple[Any, ...]:
    """OpsListeners' arguments after the server: the four addresses and the TLS context the HTTPS
    ones need (a CliError when they have none)."""
    http, prometheus, https, prometheus_https = _ops_addresses(args, config)
    ctx = _tls_context(args, config) if https or prometheus_https else None
    if (https or prometheus_https) and ctx is None:
        flag = "--https" if https else "--prometheus-https"
        raise CliError(f"{flag} needs a certificate (--tls-cert or [tls] cert in the config file)", EXIT_USAGE)
    return http, prometheus, https, prometheus_https, ctx


def _load_config(args: argparse.Namespace) -> Config:
    try:
        config = load(args.config) if args.config else Config()
    except ConfigError as exc:
        raise CliError(f"config: {exc}", EXIT_USAGE) from None
    if args.memory_high_watermark is not None:
        config.limits.memory_high_watermark = args.memory_high_watermark
    if args.disk_free_limit is not None:
        config.disk_free_limit, config.disk_free_limit_relative = args.disk_free_limit, None
    elif config.disk_free_limit_relative is not None:  # RabbitMQ's disk_free_limit.relative: times the RAM
        config.disk_free_limit = int(config.disk_free_limit_relative * machine_memory())
    if args.flow_credit is not None:
        config.limits.flow_credit = args.flow_credit
    if args.tcp_recv_buffer is not None:
        config.limits.tcp_recv_buffer = args.tcp_recv_buffer
    if args.handshake_timeout is not None:
        config.limits.handshake_timeout = round(args.handshake_timeout * 1000)
    for vhost in args.trace:
        if vhost not in config.vhosts:
            raise CliError(f"--trace: vhost '{vhost}' is not one of vhosts {list(config.vhosts)}", EXIT_USAGE)
        if vhost not in config.trace_vhosts:
            config.trace_vhosts = (*config.trace_vhosts, vhost)
    if args.node is not None:
        config.cluster.node = args.node or None
    if args.cluster_address is not None:
        config.cluster.address = args.cluster_address
    if args.cluster_lease is not None:
        if args.cluster_lease <= 0:
            raise CliError("--cluster-lease must be more than 0 seconds", EXIT_USAGE)
        config.cluster.lease = args.cluster_lease
    for flag, _ in LINK_TLS_FLAGS:
        value = getattr(args, f"cluster_tls_{flag}")
        if value is not None:
            setattr(config.cluster, f"tls_{flag}", value or None)
    if args.events is not None:
        if args.events not in config.vhosts:
            raise CliError(f"--events: vhost '{args.events}' is not one of vhosts {list(config.vhosts)}", EXIT_USAGE)
        config.event_vhost = args.events
    return config


def _open_store(args: argparse.Namespace, config: Config, listeners: list[Listener]) -> Store:
    where = {"segment": args.data, "memory": None}.get(args.store, args.store)
    try:
        if config.cluster.node is not None:
            return open_cluster_store(where, config.cluster, listeners, sync=args.sync == "on")
        return make_store(where, sync=args.sync == "on")
    except PermissionError as exc:
        raise CliError(f"cannot use the data directory {args.data}: {exc.strerror} ({exc.filename}); "
                       "choose another with --data or fix its permissions") from None
    except OSError as exc:
        raise CliError(f"cannot open the data directory {args.data}: {exc.strerror or exc}"
                       f"{f' ({exc.filename})' if exc.filename else ''}") from None
    except StoreError as exc:
        raise CliError(f"cannot open the store: {exc}") from None
    except ValueError as exc:  # a cluster node on a store that is not PostgreSQL
        raise CliError(str(exc), EXIT_USAGE) from None


def _check_config(args: argparse.Namespace, config: Config, listeners: list[Listener]) -> int:
    source = args.config or "(no --config: built-in defaults)"
    print(f"config OK: {source}: {len(config.users)} user(s), vhosts {', '.join(config.vhosts)}; "
          f"listeners {', '.join(f'{lst.protocol} {lst.host}:{lst.port}' for lst in listeners)}; "
          f"server {args.server}")
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    config = _load_config(args)
    listeners = _listeners(args, config)
    ops_plan = _ops_plan(args, config)
    try:
        check_server_available(args.server)
    except ServerUnavailable as exc:
        raise CliError(str(exc)) from None
    if args.check_config:
        return _check_config(args, config, listeners)
    raise_fd_limit()
    started = time.monotonic()
    store = _open_store(args, config, listeners)
    node: Any = None  # the cluster node's membership upkeep (servers.cluster.node)
    try:
        broker = make_broker(config, store=store)
        attach = attach_node(broker, store, _link_tls(config)) if config.cluster.node is not None else None
        log_recovery(broker, store, time.monotonic() - started)
        definitions = args.definitions or config.definitions
        if definitions:
            _load_definitions(broker, definitions)
        server = make_server(args.server, broker, listeners)
        if args.shutdown_timeout is not None:
            server.shutdown_timeout = args.shutdown_timeout
        if attach is not None:
            node = attach(server)
        http, prometheus, https, prometheus_https, ctx = ops_plan
        ops = OpsListeners(server, http, prometheus, https, prometheus_https, ctx, cluster=node)
        # the disk alarm watches the segment store's directory (a PostgreSQL or memory store has none here)
        disk = DiskMonitor(server, args.data) if args.store == "segment" else None

        def ready(bound: list[Listener]) -> None:
            ops.start()
            if disk is not None:
                disk.start()
            if node is not None:
                node.start(bound)

        try:
            ops.bind()  # every listener is bound before the first "listening" line
            run(args.server, listeners, broker=broker, driver=server, ready=ready)
        except ListenError as exc:  # an address is taken or refused: the flag that moves it
            raise CliError(f"{exc} ({_listener_flag_hint(exc.protocol)})") from None
        except OSError as exc:
            raise CliError(str(exc)) from None
        finally:
            if node is not None:
                node.stop()
            if disk is not None:
                disk.stop()
            ops.stop()
    finally:
        store.close()
    return EXIT_OK


#: listeners also set by a config file key of their name; the HTTPS ones are off unless asked for
_CONFIG_LISTENERS = ("http", "prometheus", "https", "prometheus_https")
_OFF_UNLESS_GIVEN = ("https", "prometheus_https")


def _listener_flag_hint(protocol: str) -> str:
    """How to fix a listener whose address cannot be bound: the flag (and config key) that moves it."""
    flag = protocol.replace("_", "-")
    hint = f"choose another address with --{flag} HOST:PORT"
    if protocol in _CONFIG_LISTENERS:
        hint += f" or '{protocol}' in the config file"
    if protocol not in _OFF_UNLESS_GIVEN:
        hint += f", or turn it off with --no-{flag}"
    return hint


def _read_definitions(path: str) -> Any:
    deep = CliError(f"definitions file {path} nests deeper than {MAX_DEPTH} levels", EXIT_USAGE)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise CliError(f"cannot read the definitions file {path}: {exc.strerror or exc}", EXIT_USAGE) from None
    except ValueError as exc:
        raise CliError(f"definitions file {path} is not JSON: {exc}", EXIT_USAGE) from None
    except RecursionError:
        raise deep from None
    if too_deep(doc):  # as through the API: what is imported is later walked recursively
        raise deep
    return doc


def _load_definitions(broker: Any, path: str) -> None:
    """RabbitMQ's ``load_definitions``: merged over what the store recovered, at every start."""
    doc = _read_definitions(path)
    try:
        notes = broker.import_definitions(doc)
    except ModelError as exc:
        raise CliError(f"definitions file {path}: {exc.text}", EXIT_USAGE) from None
    for note in notes:
        log.warning("definitions %s: %s", path, note)
    audit.definitions_imported(path, doc)


def _setup_logging(args: argparse.Namespace) -> None:
    burst, window = args.log_repeat_limit
    try:
        setup_logging(args.log_level, args.log_format, args.log_file, max_bytes=args.log_max_size,
                      burst=burst, window=window)
    except OSError as exc:
        raise CliError(f"cannot open the log file {args.log_file}: {exc.strerror or exc}") from None


def _fail(message: str, code: int, parser: argparse.ArgumentParser) -> int:
    """One line on stderr (and in the log when it goes to a file); never a traceback."""
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    if any(getattr(h, "baseFilename", None) for h in logging.getLogger().handlers):
        log.error("%s", message, extra={"event": "server.failed"})
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    sub: argparse.ArgumentParser = args.subparsers[args.command]
    if extra:  # the subcommand's own usage, not the top-level one
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "bench":
        from sansmq_bench import command

        return command(args, sub)
    if args.command == "analyze":
        from pipeline.analyze import command as analyze_command

        return analyze_command(args, sub)
    if args.command == "streams":
        return streams_command(args, sub)
    if args.command == "cluster":
        return cluster_command(args, sub)
    if args.command == "simulate":
        from engine.sim.cli import command as simulate_command

        return simulate_command(args)
    try:
        _setup_logging(args)
        return _serve(args)
    except CliError as exc:
        return _fail(str(exc), exc.code, sub)
    except KeyboardInterrupt:  # SIGINT before the signal handlers were installed (e.g. recovery)
        return _fail("interrupted while starting", EXIT_INTERRUPTED, sub)
