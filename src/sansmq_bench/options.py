"""``sansmq bench`` options: the argparse arguments and the validated ``Options`` they become."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from .payload import HEADER_SIZE

__all__ = ["Options", "add_arguments", "options_from_args", "parse_options", "DEFAULT_URLS",
           "DESCRIPTION", "EPILOG"]

DESCRIPTION = """\
Load-test a broker over AMQP 0-9-1, STOMP or STOMP over WebSocket, like RabbitMQ's PerfTest:
msg/s and latency percentiles every second on stderr, a JSON summary at the end on stdout (or
--json FILE). Exit status 1 if the broker refused or closed a connection, or nothing was sent
or received."""
EPILOG = """examples:
  sansmq bench -P amqp -r 1000 -z 10                     1 -> 1, 1 KB, 1,000 msg/s: the broker's latency
  sansmq bench -U stomp://guest:guest@127.0.0.1:61613/ -f --confirm 1 -z 10    synchronous receipts
  sansmq bench -P ws -t news -y 75 -s 117 --ack auto -r 200 --json out.json     fanout to 75
  sansmq bench -P amqp -z 10 -A 10                       unbounded, multi-ack: throughput

Without --rate producers outpace the consumers, a backlog builds up in the queue and the reported
latency (seconds) is the time messages wait in it: use unbounded runs for throughput and runs with
a --rate the broker sustains for latency.
"""

#: protocol -> (URL scheme, default URL); the ports are sansmq's and RabbitMQ's defaults
DEFAULT_URLS: dict[str, str] = {
    "amqp": "amqp://guest:guest@127.0.0.1:5672/",
    "stomp": "stomp://guest:guest@127.0.0.1:61613/",
    "ws": "ws://guest:guest@127.0.0.1:15674/ws",
}
_SCHEME_PROTOCOL = {"amqp": "amqp", "stomp": "stomp", "ws": "ws"}
_DEFAULT_PORT = {"amqp": 5672, "stomp": 61613, "ws": 15674}


@dataclass(frozen=True, slots=True)
class Options:
    """One run's settings; ``options_from_args`` checks their consistency."""

    protocol: str = "amqp"
    url: str = DEFAULT_URLS["amqp"]
    host: str = "127.0.0.1"
    port: int = 5672
    user: str = "guest"
    password: str = "guest"
    vhost: str = "/"
    ws_path: str = "/ws"
    producers: int = 1
    consumers: int = 1
    size: int = 1024
    queue: str = "sansmq-bench"
    queues: int = 1
    topic: str | None = None
    rate: float = 0.0  # per producer, msg/s; 0 = as fast as flow control allows
    duration: float = 10.0  # seconds of publishing, unless count is set
    count: int = 0  # messages per producer; 0 = until duration
    confirm: int = 0  # AMQP: publisher-confirm window; STOMP: max messages not yet receipted
    receipt_every: int = 0  # STOMP: a receipt on every Nth SEND
    prefetch: int = 100
    ack: str = "each"  # auto | each
    multi_ack: int = 1  # ack every Nth delivery cumulatively (AMQP multiple, STOMP ack:client)
    persistent: bool = False
    #: AMQP queue.declare arguments (PerfTest's --queue-args), e.g. {"x-queue-type": "quorum"}
    queue_args: dict[str, Any] = field(default_factory=dict)
    drain: float = 5.0  # seconds to wait for the last deliveries/confirms once publishing stops
    #: SO_SNDBUF of every connection (bytes); 0 = the kernel's autotuning (several MB on loopback,
    #: where an unbounded producer's messages then wait before the broker sees them)
    send_buffer: int = 0
    json: str | None = None
    quiet: bool = False

    @property
    def fanout(self) -> bool:
        """Every consumer gets every message (topic mode) rather than sharing queues."""
        return self.topic is not None

    def queue_names(self) -> list[str]:
        if self.queues == 1:
            return [self.queue]
        return [f"{self.queue}-{i}" for i in range(1, self.queues + 1)]

    def public(self) -> dict[str, Any]:
        """The options as the JSON summary shows them (password redacted)."""
        out = asdict(self)
        out["password"] = "***"
        out["url"] = redact_url(self.url)
        return out


def redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The bench arguments, PerfTest's short letters where it has them."""
    add = p.add_argument
    add("-P", "--protocol", choices=sorted(_SCHEME_PROTOCOL.values()),
        help="amqp, stomp or ws (STOMP over WebSocket); default: from --url's scheme, else amqp")
    add("-U", "--url", help="amqp://user:pass@host:port/vhost, stomp://user:pass@host:port[/vhost], "
        "ws://user:pass@host:port/ws (default: guest on 127.0.0.1 at the protocol's usual port)")
    add("--vhost", help="virtual host (STOMP CONNECT host header); default: from the URL, else /")
    add("-x", "--producers", type=int, default=1, help="producer connections (default 1)")
    add("-y", "--consumers", type=int, default=1, help="consumer connections (default 1)")
    add("-s", "--size", type=int, default=1024, help=f"message body bytes, >= {HEADER_SIZE} (default 1024)")
    add("-u", "--queue", default="sansmq-bench", help="queue name (default sansmq-bench)")
    add("--queues", type=int, default=1,
        help="spread producers and consumers round-robin over N queues NAME-1..NAME-N")
    add("-t", "--topic", help="fanout mode: every consumer gets every message "
        "(STOMP /topic/NAME; AMQP amq.topic with key NAME, one exclusive queue per consumer)")
    add("-r", "--rate", type=float, default=0.0, help="msg/s per producer (default: unbounded)")
    add("-z", "--duration", type=float, help="seconds of publishing (default 10 unless --count)")
    add("-C", "--count", type=int, default=0, help="messages per producer, then stop")
    add("-c", "--confirm", type=int, default=0,
        help="AMQP: publisher confirms, at most N unconfirmed; STOMP: at most N not yet receipted")
    add("--receipt-every", type=int, default=0,
        help="STOMP: ask for a RECEIPT on every Nth SEND (default: 1 with --confirm, else none)")
    add("-q", "--prefetch", type=int, default=100, help="consumer prefetch, 0 = unlimited (default 100)")
    add("--ack", choices=["auto", "each"], default="each",
        help="auto: no acks (AMQP no-ack, STOMP ack:auto); each: the consumer acks (default)")
    add("-A", "--multi-ack", type=int, default=1,
        help="ack every Nth delivery cumulatively (AMQP multiple, STOMP ack:client); default 1")
    add("-f", "--persistent", action="store_true", help="persistent messages (durable queues)")
    add("--queue-args", default="", metavar="K=V[,K=V...]",
        help="AMQP: queue.declare arguments, as PerfTest takes them: x-queue-type=quorum,x-max-length=1000 "
             "(digits are integers)")
    add("--drain", type=float, default=5.0,
        help="seconds to wait for outstanding deliveries/confirms after publishing (default 5)")
    add("--send-buffer", type=int, default=0, metavar="BYTES",
        help="SO_SNDBUF of every connection; with an unbounded producer, the latency then shows the broker's "
             "share rather than the messages waiting in our own socket (default 0: the kernel's autotuning)")
    add("--json", metavar="FILE", help="write the JSON summary to FILE instead of stdout")
    add("--quiet", action="store_true", help="no progress lines on stderr")


def options_from_args(args: argparse.Namespace) -> Options:
    """Validate the parsed arguments; ValueError names the first problem."""
    url = args.url
    protocol = args.protocol
    if url is not None:
        scheme = urlsplit(url).scheme
        if scheme not in _SCHEME_PROTOCOL:
            raise ValueError(f"--url scheme must be amqp, stomp or ws, not {scheme!r}")
        if protocol is None:
            protocol = _SCHEME_PROTOCOL[scheme]
        elif _SCHEME_PROTOCOL[scheme] != protocol:
            raise ValueError(f"--url {scheme}:// does not match --protocol {protocol}")
    protocol = protocol or "amqp"
    url = url or DEFAULT_URLS[protocol]
    parts = urlsplit(url)
    try:
        port = parts.port or _DEFAULT_PORT[protocol]
    except ValueError as exc:
        raise ValueError(f"bad port in --url: {exc}") from None
    host = parts.hostname or "127.0.0.1"
    path = unquote(parts.path)
    if protocol == "ws":
        ws_path, url_vhost = (parts.path or "/ws"), "/"
    else:
        ws_path = "/ws"
        url_vhost = path[1:] if len(path) > 1 else "/"
    vhost = args.vhost or url_vhost
    duration = args.duration if args.duration is not None else (0.0 if args.count else 10.0)
    receipt_every = args.receipt_every
    if protocol != "amqp" and args.confirm and not receipt_every:
        receipt_every = 1
    opts = Options(
        protocol=protocol, url=url, host=host, port=port,
        user=unquote(parts.username) if parts.username is not None else "guest",
        password=unquote(parts.password) if parts.password is not None else "guest",
        vhost=vhost, ws_path=ws_path, producers=args.producers, consumers=args.consumers,
        size=args.size, queue=args.queue, queues=args.queues, topic=args.topic, rate=args.rate,
        duration=duration, count=args.count, confirm=args.confirm, receipt_every=receipt_every,
        prefetch=args.prefetch, ack=args.ack, multi_ack=args.multi_ack,
        persistent=args.persistent, queue_args=parse_queue_args(args.queue_args), drain=args.drain,
        send_buffer=args.send_buffer, json=args.json,
        quiet=args.quiet,
    )
    check(opts)
    return opts


def parse_queue_args(text: str) -> dict[str, Any]:
    """``x-queue-type=quorum,x-max-length=1000`` -> {"x-queue-type": "quorum", "x-max-length": 1000}."""
    out: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--queue-args: expected KEY=VALUE, not {item!r}")
        out[key] = int(value) if value.lstrip("-").isdigit() else value
    return out


def check(o: Options) -> None:
    """Reject settings that cannot run or would deadlock."""
    if o.producers < 0 or o.consumers < 0 or o.producers + o.consumers == 0:
        raise ValueError("need at least one producer or consumer (and no negative counts)")
    if o.size < HEADER_SIZE:
        raise ValueError(f"--size must be at least {HEADER_SIZE} (timestamp and run id)")
    if o.queues < 1:
        raise ValueError("--queues must be at least 1")
    if o.topic is not None and o.queues != 1:
        raise ValueError("--topic and --queues exclude each other")
    if o.rate < 0 or o.count < 0 or o.duration < 0 or o.drain < 0 or o.send_buffer < 0:
        raise ValueError("--rate, --count, --duration, --drain and --send-buffer must not be negative")
    if o.producers and not o.count and not o.duration:
        raise ValueError("give --duration or --count")
    if not o.producers and not o.duration:
        raise ValueError("a run without producers needs --duration")
    if o.confirm < 0 or o.receipt_every < 0 or o.prefetch < 0 or o.multi_ack < 1:
        raise ValueError("--confirm, --receipt-every and --prefetch must be >= 0, --multi-ack >= 1")
    if o.protocol == "amqp" and o.receipt_every:
        raise ValueError("--receipt-every is for STOMP; AMQP uses --confirm")
    if o.protocol != "amqp" and o.confirm and o.confirm < o.receipt_every:
        raise ValueError("--confirm must be at least --receipt-every (a window smaller than the "
                         "receipt interval never gets a receipt)")
    if o.queue_args and (o.protocol != "amqp" or o.topic is not None):
        raise ValueError("--queue-args is for AMQP queues (not STOMP, not --topic)")
    if o.ack == "auto" and o.multi_ack > 1:
        raise ValueError("--multi-ack needs --ack each")
    if o.prefetch and o.multi_ack > o.prefetch:
        raise ValueError("--multi-ack larger than --prefetch would stall the consumer")
    if not 0 < o.port < 65536:
        raise ValueError("port out of range")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sansmq bench", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return parser


def parse_options(argv: Sequence[str]) -> Options:
    """``sansmq bench`` arguments -> Options (argparse exits on bad syntax; ValueError otherwise)."""
    return options_from_args(build_parser().parse_args(list(argv)))
