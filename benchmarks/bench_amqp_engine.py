"""In-process CPU cost of the AMQP hot path (codec + engine, no sockets): S1- and S3-shaped loads.

The broker is driven through its driver contract with bytes made by amqpproto client connections:
one producer publishing 1 KB transient messages in bursts of 100, consumers with prefetch 100
acking with multiple=true every 50 deliveries (mqload's S1 shape), or a fanout exchange to N
queues (S3). Prints CPU microseconds per delivered message: a stable figure on a busy machine,
where socket benchmarks swing by 2x. ``--durable`` is S2's shape: a durable queue on a SegmentStore
(in a temporary directory, fsync off: the disk's time is not the engine's), persistent messages,
publisher confirms, and the store's sync run whenever the broker asks for one. Usage:

    PYTHONPATH=src python benchmarks/bench_amqp_engine.py [--messages 50000] [--fanout 10] [--durable]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

import amqpproto as a
from amqpproto import spec
from amqpproto._writers import frame
from engine import Broker, Config, Sync, Write
from engine.segment_store import SegmentStore
from engine.store import MemoryStore


def _client(broker: Broker, conn_id: int) -> a.Connection:
    c = a.Connection(a.CLIENT, heartbeat=0)
    broker.connection_made(conn_id, "amqp", ("127.0.0.1", 1000 + conn_id), 1.0)
    _exchange(broker, conn_id, c, c.send(a.ProtocolHeader()))
    for _ in range(10):  # start-ok, tune-ok + open, open-ok
        if c.state == a.OPEN:
            return c
        _collect(broker, {conn_id: c})
    raise RuntimeError(f"handshake stuck in {c.state}")


def _exchange(broker: Broker, conn_id: int, c: a.Connection, data: bytes) -> list:
    """Send ``data`` to the broker, feed the replies to ``c``; returns client events for conn_id."""
    broker.data_received(conn_id, data, 1.0)
    return _collect(broker, {conn_id: c})[conn_id]


def _collect(broker: Broker, clients: dict[int, a.Connection]) -> dict[int, list]:
    out: dict[int, list] = {k: [] for k in clients}
    acts = broker.drain()
    for act in acts:
        if type(act) is Write:
            broker.data_sent(act.conn_id, len(act.data))  # the "socket" took it all
    for act in acts:
        if type(act) is Write and act.conn_id in clients:
            c = clients[act.conn_id]
            c.receive_data(act.data)
            while True:
                ev = c.next_event()
                if ev is a.NEED_DATA:
                    break
                if type(ev) is spec.ConnectionStart:
                    replies = [c.send(spec.ConnectionStartOk({}, "PLAIN", a.plain_response("guest", "guest"), "en_US"))]
                    out[act.conn_id].append(ev)
                    broker.data_received(act.conn_id, b"".join(replies), 1.0)
                elif type(ev) is spec.ConnectionTune:
                    broker.data_received(act.conn_id, c.send(c.tune_ok(ev)) +
                                         c.send(spec.ConnectionOpen("/")), 1.0)
                else:
                    out[act.conn_id].append(ev)
    return out


def _rpc(broker: Broker, cid: int, c: a.Connection, m) -> None:
    broker.data_received(cid, c.send(m), 1.0)
    while True:
        evs = _collect(broker, {cid: c})[cid]
        if not evs:
            return
        # keep pumping until the handshake and the reply have gone through
        if any(type(e).__name__.endswith("Ok") and type(e) is not spec.ConnectionOpenOk for e in evs):
            return


def _ack(tag: int) -> bytes:
    """basic.ack multiple=true on channel 1, as a client would send it."""
    return frame(1, 1, spec.ENCODERS[spec.BasicAck](spec.BasicAck(tag, True)))


def drain_syncing(broker: Broker) -> tuple[list[Write], bool]:
    """One ``drain``: every Sync run at once (and reported synced), every Write taken whole by
    the "socket". Returns the writes, and whether a sync was run (it may release more)."""
    writes = []
    synced = False
    for act in broker.drain():
        if type(act) is Sync:
            broker.run_sync(act.token)
            broker.synced(act.token, 1.0)
            synced = True
        elif type(act) is Write:
            broker.data_sent(act.conn_id, len(act.data))
            writes.append(act)
    return writes, synced


def run(messages: int, fanout: int, durable: bool = False, trace: bool = False) -> float:
    """CPU microseconds per delivery. ``trace``: the vhost traced, a stream bound to its firehose
    (amq.rabbitmq.trace, key ``#``) taking a publish and a deliver record per message."""
    tmp = tempfile.TemporaryDirectory(prefix="bench-amqp-")
    store = SegmentStore(tmp.name, sync=False) if durable or trace else MemoryStore()
    broker = Broker(Config(trace_vhosts=("/",) if trace else ()), store, random.Random(1))
    prod = _client(broker, 1)
    _rpc(broker, 1, prod, spec.ChannelOpen(channel=1))
    if trace:
        _rpc(broker, 1, prod, spec.QueueDeclare(0, "firehose", durable=True, arguments={"x-queue-type": "stream"},
                                                channel=1))
        _rpc(broker, 1, prod, spec.QueueBind(0, "firehose", "amq.rabbitmq.trace", "#", channel=1))
    if durable:
        _rpc(broker, 1, prod, spec.ConfirmSelect(False, channel=1))
    queues = [f"q{i}" for i in range(max(fanout, 1))]
    exchange, key = ("", queues[0]) if fanout == 0 else ("fan", "")
    if fanout:
        _rpc(broker, 1, prod, spec.ExchangeDeclare(0, "fan", "fanout", channel=1))
    cons = {}
    for i, q in enumerate(queues):
        cid = 10 + i
        c = _client(broker, cid)
        _rpc(broker, cid, c, spec.ChannelOpen(channel=1))
        _rpc(broker, cid, c, spec.QueueDeclare(0, q, durable=durable, channel=1))
        if fanout:
            _rpc(broker, cid, c, spec.QueueBind(0, q, "fan", "", channel=1))
        _rpc(broker, cid, c, spec.BasicQos(0, 100, False, channel=1))
        _rpc(broker, cid, c, spec.BasicConsume(0, q, "ct", channel=1))
        cons[cid] = c
    body = b"x" * 1024
    props = spec.BasicProperties(delivery_mode=2 if durable else 1)
    burst = 100
    one = prod.send(spec.BasicPublish(0, exchange, key, False, False, props, body, channel=1))
    pending = {cid: 0 for cid in cons}
    last_tag = {cid: 0 for cid in cons}
    delivered = 0
    mark = b"\x00<\x00<"  # basic.deliver's class/method ids; the bodies never contain them
    t0 = time.process_time()
    for _ in range(messages // burst):
        broker.data_received(1, one * burst, 1.0)
        while True:
            writes, got = drain_syncing(broker)
            for act in writes:
                if act.conn_id in cons:
                    n = act.data.count(mark)
                    if n:
                        got = True
                        delivered += n
                        pending[act.conn_id] += n
                        last_tag[act.conn_id] += n
            for cid in cons:
                if pending[cid]:
                    broker.data_received(cid, _ack(last_tag[cid]), 1.0)
                    pending[cid] = 0
                    got = True
            t = broker.get_timer()
            if t is not None and t <= 1.0:  # dispatch deferred to the next loop turn
                broker.handle_timer(1.0)
                got = True
            if not got:
                break
    cpu = time.process_time() - t0
    tmp.cleanup()
    assert delivered == (messages // burst) * burst * len(cons), delivered
    return cpu / delivered * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=30000)
    ap.add_argument("--fanout", type=int, default=0, help="0 = S1 (default exchange), N = S3 fanout to N queues")
    ap.add_argument("--durable", action="store_true", help="S2: durable queue, persistent, confirms")
    ap.add_argument("--trace", action="store_true", help="the firehose on, a stream bound to it")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    runs = sorted(run(args.messages, args.fanout, args.durable, args.trace) for _ in range(args.repeat))
    print(f"fanout={args.fanout} durable={args.durable} trace={args.trace} messages={args.messages}: "
          f"{runs[len(runs) // 2]:.1f} us CPU per delivery (runs {', '.join(f'{r:.1f}' for r in runs)})")


if __name__ == "__main__":
    main()
