"""``Links``: this node's connections to its peers' link listeners (``engine.cluster.link``), one
per (peer, vhost), on the cluster's own blocking AMQP client (``client``, amqpproto's client role).

``send`` runs on a leader's sender thread (``forwarders``, fed by the store's sync): it publishes a leader's
messages in confirm mode and returns once the leader confirmed every one, i.e. after the leader's
commit holds them. A link that fails is dropped (made again on the next send) and the failure is a
StoreError: the publishers whose messages it held get a nack, never a confirm.
"""

from __future__ import annotations

import logging
import ssl

from engine._message import Message
from engine.amqp.properties import message_props
from engine.cluster.link import RELAY_HEADER, relay_header
from engine.storage.postgres.cluster import ClusterStore
from engine.store import StoreError

from .client import BrokerError, Client
from .forwarders import Forwarders
from .gets import GetLinks
from .peer import connect_peer
from .relay import RelayLinks

__all__ = ["Links"]

log = logging.getLogger("sansmq.cluster")

class Links:
    """Publishing links to the leaders (TLS with ``tls``)."""

    def __init__(self, store: ClusterStore, tls: ssl.SSLContext | None = None) -> None:
        self.store = store
        self.tls = tls
        self._clients: dict[tuple[str, str], Client] = {}
        #: consumers of queues led elsewhere, served through their leaders
        self.relays = RelayLinks(store, tls)
        #: basic.get of queues led elsewhere, served by their leaders
        self.gets = GetLinks(store, tls)
        #: a sender thread per leader: the store's sync hands them its forwards (``store.dispatch``)
        self.forwarders = Forwarders(self.send)

    def _client(self, leader: str, vhost: str) -> Client:
        client = self._clients.get((leader, vhost))
        if client is None:
            client = connect_peer(self.store, leader, vhost, self.tls)
            client.confirm_select()
            self._clients[(leader, vhost)] = client
        return client

    def send(self, leader: str, vhost: str, items: list[tuple[str, Message]]) -> None:
        """Publish ``items`` ((queue, message)) to their queues on ``leader``; return once confirmed."""
        try:
            client = self._client(leader, vhost)
            for queue, msg in items:
                props = message_props(msg)
                props.headers = {**(props.headers or {}), RELAY_HEADER: relay_header(msg)}
                last = client.publish("", queue, props, msg.body)
            client.flush()
            client.wait_confirms(last)
        except (OSError, BrokerError, TimeoutError) as exc:
            self.drop(leader, vhost)
            raise StoreError(f"forwarding to cluster node {leader}: {exc}") from None

    def drop(self, leader: str, vhost: str) -> None:
        client = self._clients.pop((leader, vhost), None)
        if client is not None:
            client.close()

    def close(self) -> None:
        self.forwarders.close()
        for leader, vhost in list(self._clients):
            self.drop(leader, vhost)
        self.gets.close()
