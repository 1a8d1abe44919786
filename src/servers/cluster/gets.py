"""``GetLinks``: basic.get of queues led by another node (``engine.cluster.relay.Relays.get``).

One link per (leader, vhost), with a thread of its own that runs that link's gets in order and
settles what they fetched (ack, reject) on the same connection: the leader's delivery tags are
that channel's. A link that fails is dropped and made again by the next get: the leader requeues
what it handed out on the old one and did not see settled (redelivered, as for any connection
that goes away), so settling those late goes nowhere; the get that failed is answered with the
failure (its client's channel is closed with 404, as RabbitMQ's when a queue's node is down).
"""

from __future__ import annotations

import logging
import queue
import ssl
import threading
from typing import Any

from engine.cluster.relay import Fetched, GetReply
from engine.model import Queue
from engine.storage.postgres.cluster import ClusterStore

from .client import BrokerError, Client
from .peer import connect_peer, delivery_fields

__all__ = ["GetLinks"]

log = logging.getLogger("sansmq.cluster")


class _Settler:
    """Settles, on the leader, what one connection of a ``GetLink`` fetched."""

    __slots__ = ("link", "client")

    def __init__(self, link: GetLink, client: Client) -> None:
        self.link = link
        self.client = client

    def settle(self, tag: int, requeue: bool | None) -> None:
        self.link.requests.put(("settle", self.client, tag, requeue))


class GetLink:
    """The gets of one (leader, vhost); ``post(fn)`` runs ``fn(broker)`` on the loop thread."""

    def __init__(self, store: ClusterStore, leader: str, vhost: str, post: Any, tls: ssl.SSLContext | None) -> None:
        self.store = store
        self.tls = tls
        self.leader = leader
        self.vhost = vhost
        self.post = post
        self.requests: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self.client: Client | None = None
        self.settler: _Settler | None = None
        threading.Thread(target=self._run, name=f"sansmq-get-{leader}", daemon=True).start()

    def _run(self) -> None:
        while (item := self.requests.get()) is not None:
            try:
                if item[0] == "get":
                    self._get(item[1], item[2], item[3])
                elif item[1] is self.client:  # a tag of an older connection means nothing on this one
                    _, client, tag, requeue = item
                    if requeue is None:
                        client.ack(tag, multiple=False)
                    else:
                        client.reject(tag, requeue)
                if self.client is not None and self.requests.empty():
                    self.client.flush()
            except (OSError, BrokerError, TimeoutError) as exc:
                self._drop()
                if item[0] == "get":
                    self.post(lambda b, reply=item[3], why=str(exc): reply(None, why))
                log.warning("cluster: basic.get link to node %s failed: %s", self.leader, exc)
        self._drop()

    def _get(self, name: str, no_ack: bool, reply: GetReply) -> None:
        if self.client is None:
            self.client = connect_peer(self.store, self.leader, self.vhost, self.tls)
            self.settler = _Settler(self, self.client)
        assert self.settler is not None
        d, count = self.client.get(name, no_ack)
        fetched = None
        if d is not None:
            headers, persistent, priority = delivery_fields(d)
            fetched = Fetched(self.settler, d.delivery_tag, d.redelivered, d.exchange, d.routing_key, headers,
                              d.body, persistent, priority, count)
        self.post(lambda b: reply(fetched, None))

    def _drop(self) -> None:
        client, self.client, self.settler = self.client, None, None
        if client is not None:
            client.close()


class GetLinks:
    """This node's ``GetLink``s, made on first use; ``post`` is set once the server exists."""

    def __init__(self, store: ClusterStore, tls: ssl.SSLContext | None = None) -> None:
        self.store = store
        self.tls = tls  # the link's client context (``servers.cluster.tls``), None for plain TCP
        self.post: Any = None
        self._links: dict[tuple[str, str], GetLink] = {}

    def fetch(self, q: Queue, no_ack: bool, reply: GetReply) -> None:
        """``Relays.get``'s I/O (loop thread): a basic.get of ``q`` on its leader."""
        leader, vhost = q.leader or "", q.vhost.name
        link = self._links.get((leader, vhost))
        if link is None:
            link = self._links[(leader, vhost)] = GetLink(self.store, leader, vhost, self.post, self.tls)
        link.requests.put(("get", q.name, no_ack, reply))

    def close(self) -> None:
        for link in self._links.values():
            link.requests.put(None)
        self._links.clear()
