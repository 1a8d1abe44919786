"""In-process CPU cost of reading a stream (codec + engine + stream log, no sockets):
bench_streams.py's read phases without the network.

A stream queue on a SegmentStore (temporary directory, fsync off) is filled with persistent 100-byte
messages through AMQP; then ``--consumers`` channels of one connection each consume all of them from
``first`` (prefetch 1,000, a multiple ack every 500, as bench_streams.py's client does), the broker
handing out what each ack allows. Prints CPU microseconds per delivery, client side excluded
(median of ``--repeat`` runs). Usage:

    PYTHONPATH=src python benchmarks/bench_stream_read.py [--messages 50000] [--consumers 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

from bench_amqp_engine import _client, _rpc, drain_syncing

import amqpproto as a
from amqpproto import spec
from engine import Broker, Config
from engine.segment_store import SegmentStore

BODY = b"x" * 100


def _fill(broker: Broker, messages: int) -> None:
    prod = _client(broker, 1)
    _rpc(broker, 1, prod, spec.ChannelOpen(channel=1))
    _rpc(broker, 1, prod, spec.ConfirmSelect(False, channel=1))
    _rpc(broker, 1, prod, spec.QueueDeclare(0, "s", durable=True, arguments={"x-queue-type": "stream"}, channel=1))
    one = prod.send(spec.BasicPublish(0, "", "s", False, False, spec.BasicProperties(delivery_mode=2), BODY,
                                      channel=1))
    for _ in range(messages // 1000):
        broker.data_received(1, one * 1000, 1.0)
        while drain_syncing(broker)[1]:
            pass


def run(messages: int, consumers: int, profile: str | None = None) -> float:
    tmp = tempfile.TemporaryDirectory(prefix="bench-stream-")
    broker = Broker(Config(), SegmentStore(tmp.name, sync=False), random.Random(1))
    _fill(broker, messages)
    cons = _client(broker, 2)
    for ch in range(1, consumers + 1):
        _rpc(broker, 2, cons, spec.ChannelOpen(channel=ch))
        _rpc(broker, 2, cons, spec.BasicQos(0, 1000, False, channel=ch))
    got = dict.fromkeys(range(1, consumers + 1), 0)
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    cpu = 0.0
    if prof is not None:
        prof.disable()
    t0 = time.process_time()
    out = b"".join(cons.send(spec.BasicConsume(0, "s", f"c{ch}", arguments={"x-stream-offset": "first"}, channel=ch))
                   for ch in range(1, consumers + 1))
    total = 0
    while total < messages * consumers:
        if prof is not None:  # the broker's side only
            prof.enable()
        broker.data_received(2, out, 1.0)
        out = b""
        writes, _ = drain_syncing(broker)
        cpu += time.process_time() - t0
        if prof is not None:
            prof.disable()
        acks = []
        for act in writes:  # the client's side, not counted
            cons.receive_data(act.data)
            while (ev := cons.next_event()) is not a.NEED_DATA:
                if type(ev) is spec.BasicDeliver:
                    ch = ev.channel
                    got[ch] += 1
                    total += 1
                    if got[ch] % 500 == 0:
                        acks.append(cons.send(spec.BasicAck(ev.delivery_tag, True, channel=ch)))
        out = b"".join(acks)
        assert out or total == messages * consumers, "stalled"
        t0 = time.process_time()
    if prof is not None:
        prof.dump_stats(profile)
    tmp.cleanup()
    return cpu / total * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50000)
    ap.add_argument("--consumers", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", help="write a cProfile of one run here instead")
    args = ap.parse_args()
    if args.profile:
        run(args.messages, args.consumers, args.profile)
        return
    runs = [run(args.messages, args.consumers) for _ in range(args.repeat)]
    print(f"stream read consumers={args.consumers} messages={args.messages}: {statistics.median(runs):.2f} us CPU "
          f"per delivery (runs {', '.join(f'{r:.2f}' for r in runs)})")


if __name__ == "__main__":
    main()
