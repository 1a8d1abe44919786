"""Stream queues, sansmq side by side with RabbitMQ's streams over AMQP 0-9-1 (not a test).

Measures, per broker, in alternated rounds (A B, B A, A B ...: the machine's load drifts, so
compare the ratio of each pair, and report the load average):

* append rate with publisher confirms (a window of 1000 unconfirmed publishes, 100-byte bodies);
* read rate from ``first`` by one consumer and by 10 consumers (10 channels, prefetch 1000, acks
  every 500), and (phase ``bulk``, sansmq only) by ``sansmq_client.bulk.read_stream``, the Spark
  source's reader;
* for every broker whose pid is known, its CPU time per message in each phase (user + system, from
  /proc: less sensitive to the machine's load than the rates);
* with ``--rss-messages N``: the broker's RSS with an empty stream, with a stream of N messages, and
  its peak while one consumer reads ``--rss-read`` of them from ``first``.

Several sansmq versions can be compared in the same alternated rounds (``--sansmq LABEL=CHECKOUT``,
e.g. the main branch against a working tree); each is started here on the segment store with its
own ``src`` first on PYTHONPATH.

Filling a stream with 10,000,000 messages through AMQP takes long; ``--fill offline`` (the default
for sansmq) declares the stream through AMQP, stops the broker, appends the messages through the
stream log API (``engine.streams._files``, the same files the broker writes) and starts the broker
on that data directory again; ``--fill amqp`` (always used for RabbitMQ) publishes them with
``--fill-publishers`` connections, each with a confirm window of 5,000.

Usage (RabbitMQ optional):

    python benchmarks/bench_streams.py --messages 100000 --rounds 3 \
        [--sansmq main=../main --sansmq new=.] \
        [--rabbitmq 127.0.0.1:5682 --rabbitmq-pid PID] [--rss-messages 10000000 [--fill amqp]]
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import amqpproto
from amqpproto import BasicProperties, spec

BODY = b"x" * 100
WINDOW = 1000


class Client:
    """A blocking AMQP 0-9-1 client on one socket, pipelining publishes and reading deliveries."""

    def __init__(self, addr: tuple[str, int]) -> None:
        self.sock = socket.create_connection(addr)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = amqpproto.Connection(amqpproto.CLIENT)
        self.out: list[bytes] = []
        self.send(amqpproto.ProtocolHeader())
        self.wait(spec.ConnectionStart)
        self.send(spec.ConnectionStartOk({"product": "bench"}, "PLAIN", amqpproto.plain_response("guest", "guest"),
                                         "en_US"))
        self.send(self.conn.tune_ok(self.wait(spec.ConnectionTune)))
        self.send(spec.ConnectionOpen("/"))
        self.wait(spec.ConnectionOpenOk)

    def send(self, ev: Any, flush: bool = True) -> None:
        self.out.append(self.conn.send(ev))
        if flush:
            self.flush()

    def flush(self) -> None:
        if self.out:
            self.sock.sendall(b"".join(self.out))
            self.out = []

    def events(self) -> Any:
        """Events from one recv (blocking)."""
        while True:
            ev = self.conn.next_event()
            if ev is amqpproto.NEED_DATA:
                self.flush()  # acks queued meanwhile go out before we block
                data = self.sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("closed")
                self.conn.receive_data(data)
                continue
            if isinstance(ev, (spec.ConnectionClose, spec.ChannelClose)):
                raise RuntimeError(f"{ev.reply_code} {ev.reply_text}")
            yield ev

    def wait(self, cls: type) -> Any:
        for ev in self.events():
            if isinstance(ev, cls):
                return ev
        raise AssertionError

    def close(self) -> None:
        self.sock.close()


def declare(addr: tuple[str, int], name: str) -> None:
    c = Client(addr)
    c.send(spec.ChannelOpen(channel=1))
    c.wait(spec.ChannelOpenOk)
    c.send(spec.QueueDeclare(queue=name, durable=True, arguments={"x-queue-type": "stream"}, channel=1))
    c.wait(spec.QueueDeclareOk)
    c.close()


def append(addr: tuple[str, int], name: str, n: int, window: int = WINDOW) -> float:
    """Messages per second appended with confirms."""
    c = Client(addr)
    c.send(spec.ChannelOpen(channel=1))
    c.wait(spec.ChannelOpenOk)
    c.send(spec.ConfirmSelect(channel=1))
    c.wait(spec.ConfirmSelectOk)
    props = BasicProperties(delivery_mode=2)
    t0 = time.perf_counter()
    sent = confirmed = 0
    while confirmed < n:
        while sent < n and sent - confirmed < window:
            c.send(spec.BasicPublish(exchange="", routing_key=name, properties=props, body=BODY, channel=1), False)
            sent += 1
        c.flush()
        for ev in c.events():
            if isinstance(ev, spec.BasicAck):
                confirmed = ev.delivery_tag if ev.multiple else max(confirmed, ev.delivery_tag)
                break
    rate = n / (time.perf_counter() - t0)
    c.close()
    return rate


def read(addr: tuple[str, int], name: str, n: int, consumers: int = 1) -> float:
    """Messages per second delivered (summed over ``consumers``, each reading ``n`` from first)."""
    c = Client(addr)
    for ch in range(1, consumers + 1):
        c.send(spec.ChannelOpen(channel=ch))
        c.wait(spec.ChannelOpenOk)
        c.send(spec.BasicQos(prefetch_count=1000, channel=ch))
        c.wait(spec.BasicQosOk)
    t0 = time.perf_counter()
    for ch in range(1, consumers + 1):
        c.send(spec.BasicConsume(queue=name, consumer_tag=f"c{ch}", arguments={"x-stream-offset": "first"},
                                 channel=ch), False)
    c.flush()
    got = dict.fromkeys(range(1, consumers + 1), 0)
    done = 0
    for ev in c.events():
        if isinstance(ev, spec.BasicDeliver):
            ch = ev.channel
            got[ch] += 1
            if got[ch] % 500 == 0:
                c.send(spec.BasicAck(delivery_tag=ev.delivery_tag, multiple=True, channel=ch), False)
            if got[ch] == n:
                done += 1
                if done == consumers:
                    break
    rate = n * consumers / (time.perf_counter() - t0)
    c.close()
    return rate


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
    return int(m.group(1)) / 1024 if m else float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Broker:
    """A broker under test: its address, its pid when known (RSS, CPU), and how to restart it
    (sansmq only)."""

    def __init__(self, label: str, addr: tuple[str, int], pid: int | None, src: str | None = None,
                 data: str | None = None, proc: subprocess.Popen[bytes] | None = None) -> None:
        self.label, self.addr, self.pid, self.src, self.data, self.proc = label, addr, pid, src, data, proc

    @classmethod
    def start(cls, label: str, src: str) -> Broker:
        data = tempfile.mkdtemp(prefix="bench-streams-")
        b = cls(label, ("", 0), None, src, data)
        b.restart()
        return b

    def restart(self) -> None:
        assert self.src is not None and self.data is not None
        self.stop()
        env = {**os.environ, "PYTHONPATH": os.path.join(self.src, "src")}
        proc = subprocess.Popen([sys.executable, "-m", "servers", "serve", "--amqp", "127.0.0.1:0", "--no-stomp",
                                 "--no-ws", "--no-http", "--no-prometheus", "--data", self.data],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            m = re.search(rb"amqp listening on \[?([^\s\]]+)\]?:(\d+)", line)
            if m:
                self.proc, self.pid, self.addr = proc, proc.pid, (m.group(1).decode(), int(m.group(2)))
                threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
                return
        raise RuntimeError(f"sansmq ({self.src}) did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
            self.proc = None

    def close(self) -> None:
        """Stop it and delete the data directory it was started on."""
        self.stop()
        if self.src is not None and self.data:
            shutil.rmtree(self.data, ignore_errors=True)

    def measured(self, fn: Callable[[], float], n: int) -> tuple[float, float]:
        """``fn()``'s rate, and the broker's CPU microseconds per message meanwhile (nan without a pid)."""
        before = cpu_seconds(self.pid) if self.pid else 0.0
        rate = fn()
        cpu = (cpu_seconds(self.pid) - before) / n * 1e6 if self.pid else float("nan")
        return rate, cpu


def _drain(stream: Any) -> None:
    for _ in stream:
        pass


def fill_offline(src: str, data: str, name: str, n: int) -> float:
    """Append ``n`` messages to the stream ``name`` of vhost ``/`` in the stopped broker's data
    directory, through the stream log API of checkout ``src``; returns the seconds it took."""
    code = (
        "import sys, time\n"
        "from engine._message import Message\n"
        "from engine.streams._files import FileStreams\n"
        "data, name, n, body = sys.argv[1], sys.argv[2], int(sys.argv[3]), b'x' * int(sys.argv[4])\n"
        "streams = FileStreams(data, fsync=False)\n"
        "log = streams.open('/', name, None)\n"
        "now = time.time()\n"
        "for i in range(n):\n"
        "    log.append(Message(i, '', name, {}, body, persistent=True), now)\n"
        "    if i % 100_000 == 99_999:\n"
        "        log.sync()\n"
        "streams.close()\n"
    )
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, data, name, str(n), str(len(BODY))], check=True,
                   env={**os.environ, "PYTHONPATH": os.path.join(src, "src")})
    return time.perf_counter() - t0


def fill_amqp(addr: tuple[str, int], name: str, n: int, publishers: int) -> float:
    """Append ``n`` messages with ``publishers`` parallel confirming connections; returns seconds."""
    t0 = time.perf_counter()
    share = [n // publishers + (i < n % publishers) for i in range(publishers)]
    threads = [threading.Thread(target=append, args=(addr, name, k, 5000)) for k in share]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def peak_rss_while(pid: int, fn: Callable[[], Any]) -> float:
    """The highest RSS (MB) of ``pid`` sampled every 0.2 s while ``fn`` runs."""
    peak = rss_mb(pid)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.2):
            peak = max(peak, rss_mb(pid))

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        fn()
    finally:
        done.set()
        t.join()
    return max(peak, rss_mb(pid))


def rss_run(b: Broker, n: int, reads: int, fill: str, publishers: int) -> None:
    name = f"bench-rss-{os.getpid()}"
    declare(b.addr, name)
    if b.pid is None:
        print(f"RSS {b.label}: no pid given, skipped")
        return
    if fill == "offline" and b.src is not None:
        b.restart()  # both figures are of a freshly started broker: compare like with like
        assert b.pid is not None
        empty = rss_mb(b.pid)
        b.stop()
        took = fill_offline(b.src, b.data or "", name, n)
        how = f"filled offline through the stream log API in {took:.0f} s, broker restarted on it"
        t0 = time.perf_counter()
        b.restart()
        how += f" (start took {time.perf_counter() - t0:.1f} s)"
        assert b.pid is not None
        full = rss_mb(b.pid)
    else:
        empty = rss_mb(b.pid)
        took = fill_amqp(b.addr, name, n, publishers)
        how = f"filled through AMQP by {publishers} confirming publishers in {took:.0f} s ({n / took:,.0f}/s)"
        full = rss_mb(b.pid)
    rate = 0.0

    def reading() -> None:
        nonlocal rate
        rate = read(b.addr, name, reads)

    peak = peak_rss_while(b.pid, reading)
    print(f"RSS {b.label}: {empty:.1f} MB with an empty stream, {full:.1f} MB with {n:,} messages ({how}); "
          f"peak {peak:.1f} MB while one consumer read {reads:,} from first at {rate:,.0f}/s", flush=True)


PHASES = (("append", "append"), ("read1", "read x1"), ("read10", "read x10"), ("bulk", "bulk read"))


def bulk_read(addr: tuple[str, int], name: str, n: int) -> float:
    """Messages per second that ``sansmq_client.bulk.read_stream`` (the Spark source's reader:
    prefetch 2,000, acks as it decodes) reads from offset 0."""
    import sansmq_client.sync
    from sansmq_client.bulk import read_stream

    with sansmq_client.sync.connect(f"amqp://guest:guest@{addr[0]}:{addr[1]}/") as conn:
        t0 = time.perf_counter()
        got = sum(len(batch) for batch in read_stream(conn, name, 0, n))
        rate = got / (time.perf_counter() - t0)
    assert got == n, got
    return rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--phases", default="append,read1,read10",
                    help="which to run (reads need the append of the same round)")
    ap.add_argument("--sansmq", action="append", metavar="LABEL=CHECKOUT",
                    help="a sansmq checkout to start and measure (repeatable; default: this one as 'sansmq')")
    ap.add_argument("--rss-messages", type=int, default=0, help="RSS with a stream this long (0: skip)")
    ap.add_argument("--rss-read", type=int, default=1_000_000, help="messages read from first for the peak RSS")
    ap.add_argument("--fill", choices=("offline", "amqp"), default="offline",
                    help="how sansmq's RSS stream is filled (RabbitMQ's always through AMQP)")
    ap.add_argument("--fill-publishers", type=int, default=8)
    ap.add_argument("--rabbitmq", metavar="HOST:PORT")
    ap.add_argument("--rabbitmq-pid", type=int, help="the RabbitMQ node's beam pid (for RSS and CPU)")
    args = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    brokers = [Broker.start(label, os.path.abspath(src)) for label, _, src in
               (spec_.partition("=") for spec_ in args.sansmq or [f"sansmq={here}"])]
    if args.rabbitmq:
        host, _, port = args.rabbitmq.rpartition(":")
        brokers.append(Broker("rabbitmq", (host, int(port)), args.rabbitmq_pid))
    n = args.messages
    phases = tuple(p for p in PHASES if p[0] in args.phases.split(","))
    rates: dict[str, dict[str, list[float]]] = {b.label: {k: [] for k, _ in phases} for b in brokers}
    cpus: dict[str, dict[str, list[float]]] = {b.label: {k: [] for k, _ in phases} for b in brokers}
    loads = []
    try:
        for r in range(args.rounds if args.messages else 0):
            for b in brokers if r % 2 == 0 else brokers[::-1]:  # who goes first alternates too
                name = f"bench-stream-{os.getpid()}-{r}"
                declare(b.addr, name)
                loads.append(os.getloadavg()[0])
                runs: tuple[tuple[str, Callable[..., float], tuple[Any, ...], int], ...] = (
                    ("append", append, (b.addr, name, n), n), ("read1", read, (b.addr, name, n, 1), n),
                    ("read10", read, (b.addr, name, n, 10), 10 * n), ("bulk", bulk_read, (b.addr, name, n), n))
                for key, fn, fn_args, count in runs:
                    if key not in args.phases.split(","):
                        continue
                    rate, cpu = b.measured(functools.partial(fn, *fn_args), count)
                    rates[b.label][key].append(rate)
                    cpus[b.label][key].append(cpu)
                print(f"round {r} {b.label}: " + ", ".join(
                    f"{k} {rates[b.label][k][-1]:,.0f}/s ({cpus[b.label][k][-1]:.1f} us CPU/msg)" for k, _ in phases),
                    flush=True)
        if loads:
            base = brokers[-1].label if args.rabbitmq else brokers[0].label
            print(f"\nload average {min(loads):.1f}-{max(loads):.1f} (2 cores); medians of {args.rounds} alternated "
                  f"rounds, {n:,} messages of {len(BODY)} bytes; ratio = per-round ratio to {base}, median")
            print(f"{'':9}" + "".join(f"{b.label:>30}" for b in brokers))
            for key, label in phases:
                cells = []
                for b in brokers:
                    ratio = statistics.median(a / c for a, c in zip(rates[b.label][key], rates[base][key], strict=True))
                    cells.append(f"{statistics.median(rates[b.label][key]):,.0f}/s {statistics.median(cpus[b.label][key]):.1f}us"
                                 + (f" {ratio:.2f}x" if b.label != base else ""))
                print(f"{label:9}" + "".join(f"{c:>30}" for c in cells))
        if args.rss_messages:
            for b in brokers:
                rss_run(b, args.rss_messages, min(args.rss_read, args.rss_messages),
                        args.fill if b.src is not None else "amqp", args.fill_publishers)
    finally:
        for b in brokers:
            b.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
