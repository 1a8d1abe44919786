"""Bytes per idle queue and per subscription in the engine model (a script, not a test).

    python benchmarks/bench_engine_memory.py [N]      # default N = 1_000_000

Measured with tracemalloc as the allocation delta of creating N of each, divided by N:
  * idle queue: a declared, non-durable queue with no messages, consumers or bindings
    (Queue object + its name + its slot in the vhost's queue dict);
  * queue subscription: a STOMP SUBSCRIBE to /queue/<q> on an existing queue (the subscription
    object, its id, the queue's consumer list, the session's subscription dict slot);
  * topic subscription: a STOMP SUBSCRIBE to /topic/<k> (its own auto-delete queue, the binding in
    the topic trie and the subscription), measured on N // 10 to keep the run short.
"""

from __future__ import annotations

import gc
import random
import sys
import tracemalloc

from engine import Broker, Config, MemoryStore
from engine._stomp_session import StompSession, StompSubscription


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


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    broker = Broker(Config(), MemoryStore(), random.Random(0))
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
    ids = [str(i) for i in range(n)]

    def queue_subs(count: int):
        for i in range(count):
            q = vhost.queues[names[i]]
            sub = StompSubscription(q, session, 0, ids[i], "/queue/" + names[i], "auto", False)
            session.subs[ids[i]] = sub
            model.consume(q, sub)
        model._dirty.clear()
        return None

    per_sub = measure("queue subscription", n, queue_subs)

    session2 = StompSession(broker, 2, ("127.0.0.1", 2))
    session2.vhost = vhost
    m = max(1, n // 10)
    from stompproto import Subscribe

    def topic_subs(count: int):
        for i in range(count):
            frame = Subscribe({"destination": f"/topic/t.{i}", "id": f"s{i}"})
            session2._on_subscribe(frame)
        model._dirty.clear()
        return None

    per_topic = measure("topic sub, own key", m, topic_subs)

    session3 = StompSession(broker, 3, ("127.0.0.1", 3))
    session3.vhost = vhost

    def shared_topic_subs(count: int):
        for i in range(count):
            session3._on_subscribe(Subscribe({"destination": "/topic/shared.key", "id": f"s{i}"}))
        model._dirty.clear()
        return None

    per_shared = measure("topic sub, shared key", m, shared_topic_subs)
    print()
    target = 300
    for label, value in (("idle queue incl. name", per_queue), ("queue subscription", per_sub), ("topic sub, own key", per_topic),
                         ("topic sub, shared key", per_shared)):
        print(f"{label:<24} {value:8.1f} B  {'OK' if value <= target else 'OVER'} (target <= {target} B)")


if __name__ == "__main__":
    main()
