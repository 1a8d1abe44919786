"""A connection to a peer's node-to-node link listener (``engine.cluster.link``): our own AMQP
client, logged in with the cluster's secret, TLS when the link is (``servers.cluster.tls``)."""

from __future__ import annotations

import ssl
from urllib.parse import quote

from engine.cluster.link import LINK_USER
from engine.storage.postgres.cluster import ClusterStore
from pipeline.client import BrokerError, Client

__all__ = ["link_client"]


def link_client(store: ClusterStore, leader: str, vhost: str, tls: ssl.SSLContext | None) -> Client:
    """A connection to ``leader``'s link listener, logged in with the cluster's secret, TLS with
    ``tls`` (``servers.cluster.tls``); it gives up on a peer after a lease (or half a second)."""
    address = store.addresses.get(leader)
    if not address:
        raise BrokerError(f"cluster node {leader} has no known link address")
    url = f"amqp://{LINK_USER}:{quote(store.secret, safe='')}@{address}/{quote(vhost, safe='')}"
    return Client(url, timeout=max(store.lease, 0.5), tls=tls)
