"""Bytes per idle queue and per subscription in the engine model (a script, not a test).

    python benchmarks/bench_engine_memory.py [N]      # default N = 1_000_000

Measured with tracemalloc as the allocation delta of creating N of each, divided by N:
  * idle queue: a declared, non-durable queue with no messages, consumers or bindings
    (Queue object + its name + its slot in the vhost's queue dict);
  * queue subscription: a STOMP SUBSCRIBE to /queue/<q> on an existing queue (the subscription
    object, its id, the queue's consumer list, the session's subscription dict slot);
  * topic subscription: a STOMP SUBSCRIBE to /topic/<k> handled by the session (a light
    subscription bound straight into the amq.topic router, see engine.model.light: the subscription
    object, its id string, its session dict slot, and for "own key" its key string and router slot),
    once with a key per subscription and once with every subscription on one key. Everything the
    SUBSCRIBE frame carried is created inside the measurement, so it counts when it is kept.
  * the same own-key subscriptions again after each received one message and acked it (the lazy
    buffer must be gone again), measured on N // 10; likewise one prefix (/topic/p<i>*) and one
    wildcard pattern (/topic/w.<i>.*, informational: trie nodes, over the target) per subscription;
  * with a SegmentStore (a temporary directory, fsync off), on N // 10: an idle durable queue as
    issue 6 makes them (SUBSCRIBE + UNSUBSCRIBE /queue/idle-<i>: Queue, name, the store's slot) and
    mqload's s9 destination (SUBSCRIBE /queue/bench.mq.<i> with a receipt and auto-delete:true, kept:
    all of the above plus the subscription, its id and the queue's consumer list), both fed as
    bytes through the broker, so everything the frames make counts when it is kept.
"""

from __future__ import annotations

import gc
import random
import shutil
import sys
import tempfile
import tracemalloc

from engine import Broker, Config, Limits, MemoryStore, Sync
from engine.model.security import UserAccess
from engine.segment_store import SegmentStore
from engine.stomp.session import StompSession, StompSubscription


def measure(label: str, n: int, build) -> float:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    keep = build(n)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    per = (after - before) / n
    print(f"{label:<24} {n:>10,}  {per:8.1f} B each")
    del keep
    return per


def stomp_with_store(n: int, frame: bytes, label: str) -> float:
    """Per-frame cost of ``frame % (i, ...)`` fed to a STOMP connection of a broker on a SegmentStore."""
    path = tempfile.mkdtemp(prefix="sansmq-bench-mem-")
    store = SegmentStore(path, sync=False)
    try:
        broker = Broker(Config(limits=Limits(max_subscriptions=n + 10)), store, random.Random(0))
        broker.connection_made(1, "stomp", ("127.0.0.1", 1), 1.0)

        def feed(data: bytes) -> None:
            broker.data_received(1, data, 1.0)
            for _ in range(2):  # receipts are released by the sync
                for action in broker.drain():
                    if isinstance(action, Sync):
                        store.sync(action.token)
                        broker.synced(action.token, 1.0)

        feed(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
        args = frame.count(b"%d")
        frames = [frame % ((i,) * args) for i in range(n)]

        def build(count: int) -> None:
            for i in range(0, count, 20):  # 20 in flight, as mqload --pipeline 20
                feed(b"".join(frames[i:i + 20]))

        return measure(label, n, build)
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    broker = Broker(Config(limits=Limits(max_subscriptions=n + 1)), MemoryStore(), random.Random(0))
    model = broker.model
    vhost = model.vhosts["/"]
    names = [f"q{i}" for i in range(n)]  # names exist before measuring: count them separately below

    def idle_queues(count: int):
        for i in range(count):
            model.declare_queue(vhost, names[i])
        return None

    per_queue = measure("idle queue (w/o name)", n, lambda c: idle_queues(c))
    name_bytes = sum(sys.getsizeof(s) for s in names[:1000]) / 1000
    print(f"{'  + its name str':<24} {'':>10}  {name_bytes:8.1f} B (allocated before measuring)")
    per_queue += name_bytes

    session = StompSession(broker, 1, ("127.0.0.1", 1))
    session.vhost = vhost
    session.access = UserAccess(broker.model.security, "guest", "/")
    ids = [str(i) for i in range(n)]

    def queue_subs(count: int):
        for i in range(count):
            q = vhost.queues[names[i]]
            sub = StompSubscription(q, session, 0, ids[i], "/queue/" + names[i], "auto", False)
            session.subs[ids[i]] = sub
            model.consume(q, sub)
        model.dirty.clear()
        return None

    per_sub = measure("queue subscription", n, queue_subs)

    session2 = StompSession(broker, 2, ("127.0.0.1", 2))
    session2.vhost = vhost
    session2.access = UserAccess(broker.model.security, "guest", "/")
    m = n
    from stompproto import Ack, Send, Subscribe

    def topic_subs(count: int):
        for i in range(count):
            frame = Subscribe({"destination": f"/topic/t.{i}", "id": f"s{i}"})
            session2._on_subscribe(frame)
        model.dirty.clear()
        return None

    per_topic = measure("topic sub, own key", m, topic_subs)

    session3 = StompSession(broker, 3, ("127.0.0.1", 3))
    session3.vhost = vhost
    session3.access = UserAccess(broker.model.security, "guest", "/")

    def shared_topic_subs(count: int):
        for i in range(count):
            session3._on_subscribe(Subscribe({"destination": "/topic/shared.key", "id": f"s{i}"}))
        model.dirty.clear()
        return None

    per_shared = measure("topic sub, shared key", m, shared_topic_subs)
    session2 = session3 = None  # type: ignore[assignment]  # release them before measuring on
    broker.model.vhosts["/"].exchanges["amq.topic"].router = type(vhost.exchanges["amq.topic"].router)()

    session4 = StompSession(broker, 4, ("127.0.0.1", 4))
    broker.sessions[4] = session4
    session4.data_received(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
    broker.drain()
    k = max(1, n // 10)

    def used_topic_subs(count: int):
        for i in range(count):
            session4._on_subscribe(Subscribe({"destination": f"/topic/u.{i}", "id": f"u{i}",
                                              "ack": "client-individual"}))
            session4._apply_send(Send({"destination": f"/topic/u.{i}"}, b"x"))
            model.dispatch()
            session4._apply_ack(Ack({"id": f"T_u{i}@@{model.next_tag}"}))
            model.dispatch()
            if i % 1000 == 0:
                broker.drain()  # the MESSAGE frames are written and gone
                session4.outbound = 0
        broker.drain()
        return None

    per_used = measure("topic sub, after 1 msg", k, used_topic_subs)
    assert all(sub.buf is None for sub in session4.subs.values())  # type: ignore[union-attr]

    def own_pattern_subs(fmt: str):
        def build(count: int):
            s = StompSession(broker, 5, ("127.0.0.1", 5))
            s.vhost = vhost
            s.access = UserAccess(broker.model.security, "guest", "/")
            for i in range(count):
                s._on_subscribe(Subscribe({"destination": fmt.format(i), "id": f"p{i}"}))
            return s
        return build

    per_prefix = measure("topic sub, own prefix", k, own_pattern_subs("/topic/p{}*"))
    # informational (no target): a trie node chain per own wildcard pattern
    measure("topic sub, own wildcard", k, own_pattern_subs("/topic/w.{}.*"))
    per_idle_durable = stomp_with_store(k, b"SUBSCRIBE\nid:s\ndestination:/queue/idle-%d\nack:auto\n\n\x00"
                                           b"UNSUBSCRIBE\nid:s\n\n\x00", "idle durable queue")
    per_s9 = stomp_with_store(k, b"SUBSCRIBE\nid:%d\ndestination:/queue/bench.mq.%d\nauto-delete:true\n"
                                 b"receipt:r%d\n\n\x00", "s9 /queue destination")
    print()
    target = 300
    for label, value in (("idle queue incl. name", per_queue), ("queue subscription", per_sub), ("topic sub, own key", per_topic),
                         ("topic sub, shared key", per_shared), ("topic sub, after 1 msg", per_used),
                         ("topic sub, own prefix", per_prefix), ("idle durable queue", per_idle_durable),
                         ("s9 /queue destination", per_s9)):
        print(f"{label:<24} {value:8.1f} B  {'OK' if value <= target else 'OVER'} (target <= {target} B)")


if __name__ == "__main__":
    main()
