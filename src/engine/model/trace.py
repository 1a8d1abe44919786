"""The firehose (RabbitMQ's tracer): every message published into, and delivered from, a traced vhost
is also published to its ``amq.rabbitmq.trace`` topic exchange.

Routing keys as RabbitMQ's: ``publish.<exchange>`` (the default exchange is ``amq.default``) and
``deliver.<queue>``. The trace message has the original body and these headers: ``exchange_name``,
``routing_keys``, ``properties`` (the message's headers and standard properties as a table),
``node``, ``delivery_mode``, ``user``, ``channel``, ``connection``, ``vhost``, plus
``routed_queues`` (publish) or ``redelivered`` (deliver).

The publish and delivery paths call in here only when ``vhost.trace`` is set (one attribute check
when tracing is off). Messages published *to* the trace exchange are never traced (no feedback
loop), and trace messages go straight to the queues bound to it, never through the publish path."""

from __future__ import annotations

from typing import Any

from .._message import Entry, Message
from .objects import Exchange, Queue, VHost
from .routing import route
from .state import ModelState

__all__ = ["TRACE_EXCHANGE", "Tracer", "Origin", "NO_ORIGIN"]

TRACE_EXCHANGE = "amq.rabbitmq.trace"
#: the node name trace messages carry (RabbitMQ's ``rabbit@host``)
NODE = "sansmq@localhost"

#: who published or received a message: (user name, connection name, channel number)
Origin = tuple[str, str, int]
NO_ORIGIN: Origin = ("", "", 0)


class Tracer:
    """One per broker; a traced vhost points at it (``VHost.trace``)."""

    __slots__ = ("state", "enqueue")

    def __init__(self, state: ModelState) -> None:
        self.state = state
        #: attached by the model: the publisher's enqueue (a trace message skips routing extras)
        self.enqueue: Any = None

    def enable(self, vhost: VHost, on: bool = True) -> None:
        vhost.trace = self if on else None

    def published(self, vhost: VHost, x: Exchange, msg: Message, targets: list[Any], origin: Origin | None) -> None:
        if x.name == TRACE_EXCHANGE:
            return
        headers = self._headers(vhost, x.name, msg, origin or NO_ORIGIN)
        headers["routed_queues"] = [q.name for q in targets if isinstance(q, Queue)]
        self._emit(vhost, "publish." + (x.name or "amq.default"), headers, msg)

    def delivered(self, q: Queue, entry: Entry, origin: Origin) -> None:
        msg = entry.msg
        if msg.exchange == TRACE_EXCHANGE:
            return
        vhost = q.vhost
        headers = self._headers(vhost, msg.exchange, msg, origin)
        headers["redelivered"] = entry.count > 0
        self._emit(vhost, "deliver." + q.name, headers, msg)

    @staticmethod
    def _headers(vhost: VHost, exchange: str, msg: Message, origin: Origin) -> dict[str, Any]:
        user, connection, channel = origin
        return {
            "exchange_name": exchange,
            "routing_keys": [msg.routing_key],
            "properties": dict(msg.headers),
            "node": NODE,
            "delivery_mode": 2 if msg.persistent else 1,
            "user": user,
            "channel": channel,
            "connection": connection,
            "vhost": vhost.name,
        }

    def _emit(self, vhost: VHost, key: str, headers: dict[str, Any], msg: Message) -> None:
        x = vhost.exchanges.get(TRACE_EXCHANGE)
        if x is None:
            return
        targets = route(vhost, x, key, headers)
        if not targets:
            return
        state = self.state
        traced = Message(state.next_message_id(), TRACE_EXCHANGE, key, headers, msg.body)
        enqueue = self.enqueue
        for q in targets:
            enqueue(q, traced)
