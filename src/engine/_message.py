"""Messages and their per-queue entries (protocol-neutral).

A ``Message`` is immutable content shared by every queue it was routed to; an ``Entry`` is its place
in one queue: how often it was delivered and returned, whether it is ready/unacked/gone, its own
expiry and the one timer of its current phase (expiry while ready, ack timeout while unacked).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Message", "SharedMessage", "EncodedMessage", "Entry", "READY", "UNACKED", "GONE"]

READY, UNACKED, GONE = 0, 1, 2


class Message:
    __slots__ = (
        "id",
        "exchange",
        "routing_key",
        "headers",
        "body",
        "priority",
        "expires_at",
        "persistent",
        "ack_timeout",
    )

    def __init__(
        self,
        id: int,
        exchange: str,
        routing_key: str,
        headers: dict[str, Any],
        body: bytes,
        priority: int = 0,
        expires_at: float | None = None,
        persistent: bool = False,
        ack_timeout: float | None = None,
    ) -> None:
        self.id = id
        self.exchange = exchange
        self.routing_key = routing_key
        #: application headers and standard properties (content-type, reply-to, ...), str -> value
        self.headers = headers
        self.body = body
        self.priority = priority
        #: absolute expiry (seconds since the epoch) or None
        self.expires_at = expires_at
        self.persistent = persistent
        #: seconds a delivery may stay unacked before it is taken back, or None
        self.ack_timeout = ack_timeout

    def __repr__(self) -> str:
        return f"Message(id={self.id}, exchange={self.exchange!r}, key={self.routing_key!r}, body={self.body[:32]!r})"


class SharedMessage(Message):
    """A message delivered many times from one copy (a stream record read by many consumers):
    the protocol layers keep its wire encoding here, so N deliveries encode it once."""

    __slots__ = ("amqp_props",)

    def __init__(self, id: int, exchange: str, routing_key: str, headers: dict[str, Any], body: bytes,
                 priority: int = 0, persistent: bool = False) -> None:
        # Message.__init__ inlined: one of these is made per record read, on the delivery hot path
        self.id = id
        self.exchange = exchange
        self.routing_key = routing_key
        self.headers = headers
        self.body = body
        self.priority = priority
        self.expires_at = None
        self.persistent = persistent
        self.ack_timeout = None
        #: its encoded AMQP content properties, once a delivery needed them
        self.amqp_props: bytes | None = None


class EncodedMessage(Message):
    """A message built with its headers' field table already encoded (``table``, what
    ``amqpproto.write_table(headers)`` gives, byte for byte): the firehose's trace messages, whose
    tables are assembled from cached pieces. The stores write ``table`` instead of encoding the
    headers again; its headers must not change in place (every copy-on-change is a plain Message)."""

    __slots__ = ("table",)

    def __init__(self, id: int, exchange: str, routing_key: str, headers: dict[str, Any], body: bytes,
                 table: bytes) -> None:
        super().__init__(id, exchange, routing_key, headers, body)
        self.table = table


class Entry:
    __slots__ = ("msg", "count", "state", "expires", "timer", "seq")

    def __init__(self, msg: Message, seq: int, count: int = 0, expires: float | None = None) -> None:
        self.msg = msg
        #: its place in the queue: a requeued entry goes back where this puts it (RabbitMQ keeps
        #: a returned message's original position). From the model's counter (``next_seq``):
        #: increasing in creation order, which is a queue's enqueue order (an entry is made when
        #: its message enters the queue's memory, paged ones when read back in order)
        self.seq = seq
        #: deliveries that were returned (nack, timeout, disconnect): redelivered when > 0
        self.count = count
        self.state = READY
        self.expires = expires
        self.timer: tuple[float, int] | None = None
