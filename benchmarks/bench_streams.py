"""Stream queues, sansmq side by side with RabbitMQ's streams over AMQP 0-9-1 (not a test).

Measures, per broker, in alternated rounds (A B A B ...: the machine's load drifts, so compare the
ratio of each pair, and report the load average):

* append rate with publisher confirms (a window of 1000 unconfirmed publishes, 100-byte bodies);
* read rate from ``first`` by one consumer and by 10 consumers (10 channels, prefetch 1000, acks
  every 500);
* the broker's RSS before and after the stream holds ``--rss-messages`` messages.

Usage (RabbitMQ optional; the sansmq server is started here on the segment store):

    python benchmarks/bench_streams.py --messages 100000 --rounds 3 \
        [--rabbitmq 127.0.0.1:5682 --rabbitmq-pid PID] [--rss-messages 1000000]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
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


def append(addr: tuple[str, int], name: str, n: int) -> float:
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
        while sent < n and sent - confirmed < WINDOW:
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


def read(addr: tuple[str, int], name: str, n: int, consumers: int) -> float:
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


def start_sansmq(data: str) -> tuple[subprocess.Popen[bytes], tuple[str, int]]:
    proc = subprocess.Popen([sys.executable, "-m", "servers", "serve", "--amqp", "127.0.0.1:0", "--no-stomp",
                             "--no-ws", "--data", data], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(rb"amqp listening on \[?([^\s\]]+)\]?:(\d+)", line)
        if m:
            return proc, (m.group(1).decode(), int(m.group(2)))
    raise RuntimeError("sansmq did not start")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rss-messages", type=int, default=0, help="append this many for the RSS figure (0: skip)")
    ap.add_argument("--rabbitmq", metavar="HOST:PORT")
    ap.add_argument("--rabbitmq-pid", type=int, help="the RabbitMQ node's beam pid (for RSS)")
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="bench-streams-")
    proc, addr = start_sansmq(data)
    brokers: dict[str, tuple[tuple[str, int], int | None]] = {"sansmq": (addr, proc.pid)}
    if args.rabbitmq:
        host, _, port = args.rabbitmq.rpartition(":")
        brokers["rabbitmq"] = ((host, int(port)), args.rabbitmq_pid)
    results: dict[str, dict[str, list[float]]] = {b: {"append": [], "read1": [], "read10": []} for b in brokers}
    try:
        for r in range(args.rounds):
            for b, (baddr, _) in brokers.items():
                name = f"bench-stream-{os.getpid()}-{r}"
                declare(baddr, name)
                results[b]["append"].append(append(baddr, name, args.messages))
                results[b]["read1"].append(read(baddr, name, args.messages, 1))
                results[b]["read10"].append(read(baddr, name, args.messages, 10))
                print(f"round {r} {b}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in results[b].items()),
                      flush=True)
        print(f"\nload average {os.getloadavg()[0]:.2f} (2 cores); medians of {args.rounds} alternated rounds, "
              f"{args.messages:,} messages of {len(BODY)} bytes")
        print(f"{'':8}" + "".join(f"{b:>14}" for b in brokers) + ("      ratio" if len(brokers) == 2 else ""))
        for k, label in (("append", "append"), ("read1", "read x1"), ("read10", "read x10")):
            meds = [statistics.median(results[b][k]) for b in brokers]
            ratio = ""
            if len(brokers) == 2:
                ratios = [a / bb for a, bb in zip(results["sansmq"][k], results["rabbitmq"][k], strict=True)]
                ratio = f"   {statistics.median(ratios):8.2f}"
            print(f"{label:8}" + "".join(f"{m:>12,.0f}/s" for m in meds) + ratio)
        if args.rss_messages:
            for b, (baddr, pid) in brokers.items():
                if pid is None:
                    continue
                name = f"bench-rss-{os.getpid()}"
                declare(baddr, name)
                before = rss_mb(pid)
                append(baddr, name, args.rss_messages)
                print(f"RSS {b}: {before:.0f} MB before, {rss_mb(pid):.0f} MB with a {args.rss_messages:,}-message "
                      "stream")
    finally:
        proc.terminate()
        proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
