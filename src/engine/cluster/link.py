"""The node-to-node link: AMQP 0-9-1 on a listener of its own (``--cluster-address``), served by
``ClusterLinkSession``, an ``AmqpSession`` that only peers can open.

Why a dedicated listener rather than the clients' AMQP listener with a cluster user: the link's
credential is the cluster's secret (in the database, so only nodes can read it), it needs no user
in the shared user database nor permissions in every vhost, and operators can firewall it apart as
RabbitMQ's inter-node port 25672.

A peer publishes a message it routed (its client's publish) to the queue's leader through the
default exchange, confirm mode on; the leader confirms once its commit holds the message, and only
then does the peer confirm to its client. The ``x-sansmq-relay`` header carries what the default
exchange would lose (the original exchange, routing key and absolute expiry); it is honoured on
this listener only and taken off before the message is enqueued.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import amqpproto as A
from amqpproto import spec

from .._message import Message
from ..amqp.channel import AmqpConnectionError
from ..amqp.session import AmqpSession
from ..model.security import UserAccess, UserRecord

if TYPE_CHECKING:
    from ..model.security import Access

__all__ = ["ClusterLinkSession", "LINK_USER", "RELAY_HEADER", "relay_header"]

#: the login peers use on the link (its password is the cluster's secret)
LINK_USER = "sansmq-cluster"
RELAY_HEADER = "x-sansmq-relay"


def relay_header(msg: Message) -> list[Any]:
    """What the receiving leader restores: [exchange, routing key, expiry in ms since the epoch or 0]."""
    return [msg.exchange, msg.routing_key, 0 if msg.expires_at is None else int(msg.expires_at * 1000)]


class _PeerAccess(UserAccess):
    """A peer may do anything in any vhost: it only carries what its own node already authorised."""

    __slots__ = ()

    def allows(self, access: Access, resource: str) -> bool:
        return True


class ClusterLinkSession(AmqpSession):
    """An AMQP session for the peers of this node (the cluster's secret as the password)."""

    PROTOCOL = "cluster"
    __slots__ = ()
    relay = True
    durable_locally = True

    def _on_start_ok(self, m: spec.ConnectionStartOk) -> None:
        self.client_properties = m.client_properties or {}
        self.mechanism = m.mechanism
        try:
            login, password = A.parse_sasl_response(m.mechanism, m.response)
        except ValueError:
            self._refuse(None, f"malformed {m.mechanism} response")
        secret = getattr(self.model.store, "secret", "")
        if login != LINK_USER or not secret or password != secret:
            self._refuse(login, "the cluster link takes only the cluster's own credential")
        self.user = UserRecord(LINK_USER, "", tags=("administrator",))
        self.send(self.conn.tune())

    def _on_open(self, m: spec.ConnectionOpen) -> None:
        name = m.virtual_host or self.host.config.default_vhost
        if name not in self.model.vhosts:
            raise AmqpConnectionError(spec.NOT_ALLOWED, f"vhost {name} not found", type(m))
        self.vhost = self.model.vhosts[name]
        self.access = _PeerAccess(self.model.security, LINK_USER, name)
        self.send(spec.ConnectionOpenOk())

    def relayed(self, msg: Message) -> Message:
        """A message a peer routed: its own exchange, routing key and expiry back."""
        route = msg.headers.pop(RELAY_HEADER, None)
        if isinstance(route, list) and len(route) == 3:
            msg.exchange, msg.routing_key = str(route[0]), str(route[1])
            msg.expires_at = route[2] / 1000 if route[2] else None
        return msg
