"""``RelayLinks``: the I/O of consuming a queue through its leader (``engine.cluster.relay``).

One thread per relay (a stream's feed too): it logs in to the leader's link listener, consumes the
queue there with a prefetch of ``PREFETCH``, hands each batch of deliveries to the loop thread (a
feed: only the offset after its last, acked at once), sends the acks the
loop queued, and every ``IDLE_CHECK`` seconds asks the loop whether the queue still has a consumer
here. When the relay stops (no consumer left, this node leads the queue now) or the link fails, the
connection is closed, so the leader requeues what it delivered and was not acked; a failed link is
made again (to the leader the leases name by then) while consumers remain.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from typing import Any

from engine.cluster.relay import ACK, REQUEUE, Relay, Relays
from engine.model.streams import STREAM_OFFSET_HEADER
from engine.storage.postgres.cluster import ClusterStore

from .client import BrokerError, Client
from .peer import connect_peer, delivery_fields

__all__ = ["RelayLinks", "PREFETCH"]

log = logging.getLogger("sansmq.cluster")

#: deliveries a relay may hold unacked from the leader (the local consumers' prefetch applies here)
PREFETCH = 250
#: seconds between two checks that the relayed queue still has a consumer here
IDLE_CHECK = 0.5
#: seconds a relay waits for the leader's next delivery before sending its pending acks again
POLL = 0.02
#: seconds before a relay whose link failed is made again
RETRY = 0.5


class RelayLinks:
    """Starts a thread per relay; ``post(fn)`` runs ``fn(broker)`` on the loop thread."""

    def __init__(self, store: ClusterStore, tls: ssl.SSLContext | None = None) -> None:
        self.store = store
        self.tls = tls
        self.relays: Relays | None = None
        self.post: Any = None  # set once the server exists (ClusterNode)

    def open(self, relay: Relay) -> None:
        threading.Thread(target=self._run, args=(relay,), name=f"sansmq-relay-{relay.queue.name}",
                         daemon=True).start()

    def _connect(self, relay: Relay) -> Client:
        client = connect_peer(self.store, relay.leader, relay.queue.vhost.name, self.tls)
        client.qos(PREFETCH)
        # a stream's feed reads the leader's log on from this node's committed end
        client.consume(relay.queue.name, None if relay.start is None else {"x-stream-offset": relay.start})
        return client

    def _run(self, relay: Relay) -> None:
        relays = self.relays
        assert relays is not None
        client: Client | None = None
        try:
            client = self._connect(relay)
            next_check = time.monotonic() + IDLE_CHECK
            acks = relay.acks
            while relay.active:
                while acks:
                    _settle(client, *acks.popleft())
                first = client.next_delivery(POLL)
                if first is not None:
                    batch = [first, *client.deliveries]
                    client.deliveries.clear()
                    if relay.start is None:
                        self.post(lambda b, batch=batch: _deliver(relays, relay, batch))
                    else:  # a stream's feed: how far the leader committed; its credit back at once
                        client.ack(batch[-1].delivery_tag, multiple=True)
                        tail = (batch[-1].properties.headers or {})[STREAM_OFFSET_HEADER] + 1
                        self.post(lambda b, tail=tail: relays.followed(relay, tail))
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + IDLE_CHECK
                    self.post(lambda b: _check(relays, relay))
            while acks:  # the acks made before the stop still count: sent ahead of the close
                _settle(client, *acks.popleft())
            client.flush()
        except (OSError, BrokerError, TimeoutError) as exc:
            if relay.active:
                log.warning("cluster: consuming queue '%s' through node %s failed: %s", relay.queue.name,
                            relay.leader, exc)
                time.sleep(RETRY)
                self.post(lambda b: _restart(relays, relay))
        finally:
            if client is not None:
                client.close()


def _settle(client: Client, tag: int, how: int) -> None:
    if how == ACK:
        client.ack(tag, multiple=False)
    else:  # the leader counts the return (x-delivery-count) and requeues or dead-letters it
        client.reject(tag, requeue=how == REQUEUE)


def _deliver(relays: Relays, relay: Relay, batch: list[Any]) -> None:
    for d in batch:
        headers, persistent, priority = delivery_fields(d)
        relays.delivered(relay, d.delivery_tag, d.redelivered, d.exchange, d.routing_key, headers, d.body,
                         persistent, priority)


def _check(relays: Relays, relay: Relay) -> None:
    """Stop a relay nobody here needs; one whose queue's leader is another node now (the old one
    stalled) consumes there instead."""
    if not relays.idle(relay) and relay.queue.leader != relay.leader:
        _restart(relays, relay)


def _restart(relays: Relays, relay: Relay) -> None:
    """The link failed: what it brought goes back to the leader; consumers left here get a new one."""
    q = relay.queue
    relays.stop(relay)
    if q.consumers and q.leader is not None:
        relays.consumed(q)
