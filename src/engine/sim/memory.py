"""The memory invariant, checked after every step: what the broker holds stays within a bound of
the workload's live data, so a leak fails with a seed instead of growing unseen.

* the body bytes the memory alarm counts (queued in memory, held by the delayed exchange) are at
  most those of the messages not surely settled (the oracle's ``live``; a message whose ack may be
  lost with a power cut stays live; one that may be repeated counts once per copy), plus what the
  churn actor put in its queues; the received bytes the codecs hold are at most a frame's worth;
* every queue the workload knows holds at most as many messages (ready and unacked) as are live
  for it (a dead-lettered message is live for its dead-letter queue too);
* the broker has no more sessions than the network has connections open.
"""

from __future__ import annotations

from collections import Counter

from .oracle import Oracle, Violation
from .workload import QUEUES
from .world import SimWorld

__all__ = ["SLACK", "check_memory"]

#: received bytes codecs may hold: a partial frame or two
SLACK = 64 * 1024


def check_memory(world: SimWorld, oracle: Oracle, extra_bytes: int = 0) -> None:
    broker = world.broker
    bound = sum(size * (1 + oracle.repeats(mid)) for mid, size in oracle.live.items()) + extra_bytes
    if broker.model.queued_bytes > bound:
        raise Violation("memory", f"the queues hold {broker.model.queued_bytes} bytes of bodies, the live "
                                  f"data bound is {bound}")
    if broker.inbound_bytes > SLACK:
        raise Violation("memory", f"the codecs hold {broker.inbound_bytes} received bytes")
    live: Counter[str] = Counter()
    for mid in oracle.live:
        pub = oracle.published[mid]
        copies = 1 + oracle.repeats(mid)
        live[pub.queue] += copies
        if pub.dead_to is not None:
            live[pub.dead_to] += copies
    # after damage to the disk any removal may be lost (so any message back): counts say nothing
    vhost = None if oracle.media_faults or oracle.truncated else broker.model.vhosts.get("/")
    for name in [*live, *(q for q in QUEUES if q not in live)]:
        q = vhost.queues.get(name) if vhost is not None else None
        if q is None or q.stream:
            continue
        held = q.count + q.unacked_count()
        if held > live[name]:
            raise Violation("memory", f"queue {name} holds {held} messages, only {live[name]} are live")
    open_conns = sum(1 for c in world.net.clients.values() if not c.gone)
    if len(broker.sessions) > open_conns:
        raise Violation("memory", f"{len(broker.sessions)} sessions for {open_conns} open connections")
