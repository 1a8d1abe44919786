"""In-process STOMP engine benchmark: the S4 and S6 workloads of issue 7 without sockets.

    PYTHONPATH=src python benchmarks/bench_engine_stomp.py [s4|s6|s7] [--seconds 3] [--profile]

Drives ``engine.Broker`` directly with the frames mqload sends (its SEND template, its ACK frame,
its SUBSCRIBE headers) in 64 KB batches, as a server would read them, and drains the actions
after each call. Reports messages (S4) or deliveries (S6/S7) per CPU-second spent inside the
broker (the simulated clients' own work is not counted): the engine's and codecs' cost, free of
socket I/O and of other processes' load, so before/after comparisons on a busy machine stay
meaningful (CPU contention still moves it by 10-20%: compare medians taken close together). ``--profile`` prints the cProfile top 25 (by own time). ``--batches N`` runs a fixed amount of
work once, for instruction counts (``valgrind --tool=callgrind``: the difference between two N is
deterministic, unlike time on a shared machine).

s4: 1 producer -> /queue/bench -> 1 subscriber, ack client-individual, prefetch 100, 1 KB bodies.
s5: mqload's S5 cycle, one at a time: SEND persistent:true with a receipt to /queue/bench.receipt,
    the store's sync (a SegmentStore in a temporary directory, fsync off: the disk's time is not
    the engine's), RECEIPT, MESSAGE to the one subscriber, its ACK. Reports receipted SENDs per
    CPU-second; what is left is what one receipt costs in Python besides the fdatasync.
s6: 1 producer -> /topic/bench -> 10 subscribers, ack auto, 1 KB bodies.
s7: s6 over WebSocket (masked client frames), 75 subscribers, 117-byte bodies.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import re
import sys
import tempfile
import time

from engine import Broker, Config, MemoryStore, Sync, Write  # noqa: E402
from engine.segment_store import SegmentStore  # noqa: E402

BATCH = 64 * 1024


def _body(size: int, seq: int) -> bytes:
    head = b"%016x%08x%016x" % (seq, 0xBEEF, seq)
    return (head + b"x" * size)[:size]


def _stomp_connect(broker: Broker, conn_id: int, now: float, proto: str = "stomp") -> None:
    broker.connection_made(conn_id, proto, ("127.0.0.1", 40000 + conn_id), now)


class _Ws:
    """Just enough of a WebSocket client: the upgrade and masked text frames."""

    KEY = b"dGhlIHNhbXBsZSBub25jZQ=="

    @staticmethod
    def upgrade() -> bytes:
        return (b"GET /ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Key: " + _Ws.KEY + b"\r\nSec-WebSocket-Version: 13\r\n"
                b"Sec-WebSocket-Protocol: v12.stomp\r\n\r\n")

    @staticmethod
    def frame(payload: bytes) -> bytes:
        n = len(payload)
        if n < 126:
            head = bytes((0x81, 0x80 | n))
        elif n < 65536:
            head = bytes((0x81, 0x80 | 126)) + n.to_bytes(2, "big")
        else:
            head = bytes((0x81, 0x80 | 127)) + n.to_bytes(8, "big")
        return head + b"\0\0\0\0" + payload  # zero mask: payload unchanged


class Bench:
    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        self.ws = scenario == "s7"
        if scenario == "s5":
            self._dir = tempfile.TemporaryDirectory(prefix="bench-s5-")
            store: MemoryStore | SegmentStore = SegmentStore(self._dir.name, sync=False)
        else:
            store = MemoryStore()
        self.broker = Broker(Config(), store, random.Random(1))
        self.now = 1_800_000_000.0
        self.inbox: dict[int, bytearray] = {}
        self.sent_bytes = 0
        self.delivered = 0
        #: CPU seconds spent inside the broker (feeding it and draining it), not in this client
        self.busy = 0.0

    # -- plumbing --------------------------------------------------------------------------------
    def feed(self, conn_id: int, data: bytes) -> None:
        t0 = time.process_time()
        self.broker.data_received(conn_id, data, self.now)
        self.pump()
        self.busy += time.process_time() - t0

    def pump(self) -> None:
        broker = self.broker
        while True:
            actions = broker.drain()
            if not actions:
                return
            sent: dict[int, int] = {}
            for a in actions:
                if type(a) is Sync:  # as the threads server does when nothing else is ready
                    broker.run_sync(a.token)
                    broker.synced(a.token, self.now)
                elif type(a) is Write:
                    self.inbox.setdefault(a.conn_id, bytearray()).extend(a.data)
                    sent[a.conn_id] = sent.get(a.conn_id, 0) + len(a.data)
            for conn_id, n in sent.items():
                broker.data_sent(conn_id, n)

    def wrap(self, data: bytes) -> bytes:
        return _Ws.frame(data) if self.ws else data

    def open(self, conn_id: int) -> None:
        _stomp_connect(self.broker, conn_id, self.now, "ws" if self.ws else "stomp")
        if self.ws:
            self.feed(conn_id, _Ws.upgrade())
        self.feed(conn_id, self.wrap(b"CONNECT\naccept-version:1.0,1.1,1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0"))
        self.inbox.pop(conn_id, None)

    # -- workloads -------------------------------------------------------------------------------
    def setup(self) -> tuple[int, list[int]]:
        if self.scenario == "s4":
            subs, dest, ack, size = 1, "/queue/bench", "client-individual", 1024
        elif self.scenario == "s5":
            subs, dest, ack, size = 1, "/queue/bench.receipt", "client-individual", 1024
        elif self.scenario == "s6":
            subs, dest, ack, size = 10, "/topic/bench", "auto", 1024
        else:
            subs, dest, ack, size = 75, "/topic/bench.ws", "auto", 117
        self.size, self.dest = size, dest
        consumers = list(range(2, 2 + subs))
        for i, c in enumerate(consumers):
            self.open(c)
            self.feed(c, self.wrap(
                (f"SUBSCRIBE\nid:{i}\ndestination:{dest}\nack:{ack}\nprefetch-count:100\n"
                 f"activemq.prefetchSize:100\nprefetch:100\n\n\0").encode()))
        self.open(1)
        return 1, consumers

    def send_receipted(self, producer: int, seq: int) -> int:
        """One S5 cycle: a persistent SEND with a receipt, the sync, the RECEIPT (checked)."""
        frame = (b"SEND\ndestination:%s\npersistent:true\nreceipt:r%d\ncontent-length:%d\n\n"
                 % (self.dest.encode(), seq, self.size)) + _body(self.size, seq) + b"\0"
        self.feed(producer, frame)
        receipt = self.inbox.pop(producer, b"")
        assert receipt.startswith(b"RECEIPT\nreceipt-id:r%d\n" % seq), receipt
        return 1

    def send_batch(self, producer: int, seq: int) -> int:
        head = f"SEND\ndestination:{self.dest}\ncontent-length:{self.size}\n\n".encode()
        frames = []
        total = 0
        while total < BATCH:
            f = head + _body(self.size, seq) + b"\0"
            if self.ws:
                f = _Ws.frame(f)
            frames.append(f)
            total += len(f)
            seq += 1
        self.feed(producer, b"".join(frames))
        return len(frames)

    def consume(self, consumers: list[int]) -> None:
        """Count MESSAGE frames; in S4 answer each with mqload's ACK frame (one batch per read)."""
        for c in consumers:
            data = self.inbox.pop(c, None)
            if not data:
                continue
            n = data.count(b"MESSAGE\n")
            self.delivered += n
            if self.scenario in ("s4", "s5"):
                acks = [b"ACK\nid:%s\nsubscription:0\nmessage-id:%s\n\n\0" % (m, m)
                        for m in re.findall(rb"\nack:([^\n]*)\n", bytes(data))]
                for i in range(0, len(acks), 60):
                    self.feed(c, b"".join(acks[i:i + 60]))

    def run(self, seconds: float, batches: int = 0) -> float:
        producer, consumers = self.setup()
        seq = 0
        self.busy = 0.0
        done = 0
        while (self.busy < seconds) if not batches else (done < batches):
            seq += (self.send_receipted if self.scenario == "s5" else self.send_batch)(producer, seq)
            self.consume(consumers)
            done += 1
        assert self.delivered, "nothing was delivered"
        return self.delivered / self.busy


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", nargs="?", default="s6", choices=("s4", "s5", "s6", "s7"))
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--batches", type=int, default=0,
                    help="run exactly this many 64 KB producer batches once (for instruction counts "
                         "under valgrind --tool=callgrind: compare two N to cancel the start-up)")
    ap.add_argument("--repeat", type=int, default=3, help="runs; the median is reported")
    args = ap.parse_args(argv)
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        rate = Bench(args.scenario).run(args.seconds)
        prof.disable()
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(25)
        print(f"{args.scenario}: {rate:,.0f} deliveries per CPU-second (under cProfile)")
        return 0
    if args.batches:
        bench = Bench(args.scenario)
        bench.run(0, args.batches)
        print(f"{args.scenario}: {bench.delivered} delivered in {args.batches} batches")
        return 0
    rates = sorted(Bench(args.scenario).run(args.seconds) for _ in range(args.repeat))
    what = {"s4": "messages", "s5": "receipted SENDs"}.get(args.scenario, "deliveries")
    print(f"{args.scenario}: {rates[len(rates) // 2]:,.0f} {what} per CPU-second "
          f"(median of {args.repeat}: {', '.join(f'{r:,.0f}' for r in rates)}; pid {os.getpid()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
