"""A connection to a peer's node-to-node link listener (``engine.cluster.link``) in one vhost, on our
own AMQP client, logged in with the cluster's secret, TLS when the link is (``servers.cluster.tls``):
what forwarding, relays and remote gets all open."""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import quote

from engine._props import props_to_headers
from engine.cluster.link import LINK_USER
from engine.storage.postgres.cluster import ClusterStore

from .client import BrokerError, Client, Delivery

__all__ = ["connect_peer", "delivery_fields"]


def connect_peer(store: ClusterStore, node: str, vhost: str, tls: ssl.SSLContext | None,
                 timeout: float | None = None) -> Client:
    """Log in to ``node``'s link listener, vhost ``vhost`` (BrokerError when its address is unknown).
    ``timeout``: seconds the peer may take to connect or answer before the link counts as failed
    (default: the lease, or half a second; a peer stalled that long has lost its queues anyway)."""
    address = store.addresses.get(node)
    if not address:
        raise BrokerError(f"cluster node {node} has no known link address")
    url = f"amqp://{LINK_USER}:{quote(store.secret, safe='')}@{address}/{quote(vhost, safe='')}"
    return Client(url, timeout=max(store.lease, 0.5) if timeout is None else timeout, tls=tls)


def delivery_fields(d: Delivery) -> tuple[dict[str, Any], bool, int]:
    """What the model keeps of a leader's delivery besides its route and body: (headers with the
    properties, persistent, priority)."""
    props = d.properties
    if props is None:
        return {}, False, 0
    return props_to_headers(props), props.delivery_mode == 2, props.priority or 0
