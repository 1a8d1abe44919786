"""In-process CPU cost of a stream append with publisher confirms (codec + engine + stream log, no
sockets): bench_streams.py's append phase without the network.

One AMQP connection publishes persistent 100-byte messages through the default exchange to a stream
queue on a SegmentStore (temporary directory, fsync off: the disk's time is not the engine's), in
confirm mode, in reads of ``--burst`` publishes; every Sync the broker asks for is run at once and
the confirms counted. Prints CPU microseconds per confirmed append (median of ``--repeat`` runs).
``--producer`` adds ``x-producer``/``x-publishing-id`` headers (deduplicated appends). Usage:

    PYTHONPATH=src python benchmarks/bench_stream_append.py [--messages 50000] [--burst 100] [--producer]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

from bench_amqp_engine import _client, _rpc, drain_syncing

import amqpproto as a
from amqpproto import spec
from engine import Broker, Config
from engine.segment_store import SegmentStore

BODY = b"x" * 100


def run(messages: int, burst: int, producer: bool, profile: str | None = None) -> float:
    tmp = tempfile.TemporaryDirectory(prefix="bench-stream-")
    broker = Broker(Config(), SegmentStore(tmp.name, sync=False), random.Random(1))
    prod = _client(broker, 1)
    _rpc(broker, 1, prod, spec.ChannelOpen(channel=1))
    _rpc(broker, 1, prod, spec.ConfirmSelect(False, channel=1))
    _rpc(broker, 1, prod, spec.QueueDeclare(0, "s", durable=True, arguments={"x-queue-type": "stream"}, channel=1))
    reads = []
    for r in range(messages // burst):
        if producer:
            reads.append(b"".join(prod.send(spec.BasicPublish(0, "", "s", False, False, spec.BasicProperties(
                delivery_mode=2, headers={"x-producer": "p", "x-publishing-id": r * burst + i}), BODY, channel=1))
                for i in range(burst)))
        else:
            one = prod.send(spec.BasicPublish(0, "", "s", False, False, spec.BasicProperties(delivery_mode=2), BODY,
                                              channel=1))
            reads.append(one * burst)
    confirmed = 0
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t0 = time.process_time()
    for data in reads:
        broker.data_received(1, data, 1.0)
        busy = True
        while busy:
            writes, busy = drain_syncing(broker)
            for act in writes:
                prod.receive_data(act.data)
                while (ev := prod.next_event()) is not a.NEED_DATA:
                    if type(ev) is spec.BasicAck:
                        confirmed = ev.delivery_tag
    cpu = time.process_time() - t0
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile)
    tmp.cleanup()
    assert confirmed == len(reads) * burst, confirmed
    return cpu / confirmed * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50000)
    ap.add_argument("--burst", type=int, default=100, help="publishes per read")
    ap.add_argument("--producer", action="store_true", help="with x-producer / x-publishing-id (dedup)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", help="write a cProfile of one run here instead")
    args = ap.parse_args()
    if args.profile:
        print(f"{run(args.messages, args.burst, args.producer, args.profile):.2f} us (profiled)")
        return
    runs = sorted(run(args.messages, args.burst, args.producer) for _ in range(args.repeat))
    print(f"stream append burst={args.burst} producer={args.producer} messages={args.messages}: "
          f"{runs[len(runs) // 2]:.2f} us CPU per confirmed append (runs {', '.join(f'{r:.2f}' for r in runs)})")


if __name__ == "__main__":
    main()
