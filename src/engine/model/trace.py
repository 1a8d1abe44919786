"""The firehose (RabbitMQ's tracer): every message published into, and delivered from, a traced vhost
is also published to its ``amq.rabbitmq.trace`` topic exchange.

Routing keys as RabbitMQ's: ``publish.<exchange>`` (the default exchange is ``amq.default``) and
``deliver.<queue>``. The trace message has the original body and these headers: ``exchange_name``,
``routing_keys``, ``properties`` (AMQP's property names, the application headers under
``headers``), ``node``, ``delivery_mode``, ``user``, ``channel``, ``connection``, ``vhost``, plus
``routed_queues`` (publish) or ``redelivered`` (deliver, 0 or 1), and ``timestamp_in_ms`` (the
broker's clock when it traced, as the event exchange stamps its messages).

The publish and delivery paths call in here only when ``vhost.trace`` is set (one attribute check
when tracing is off). Messages published *to* the trace exchange are never traced (no feedback
loop), and trace messages go straight to the queues bound to it, never through the publish path."""

from __future__ import annotations

from typing import Any

from .._message import Entry, Message
from .objects import Exchange, Queue, VHost
from .routing import route
from .state import ModelState

__all__ = ["TRACE_EXCHANGE", "Tracer", "Origin", "NO_ORIGIN", "amqp_properties"]

TRACE_EXCHANGE = "amq.rabbitmq.trace"
#: the node name trace messages carry (RabbitMQ's ``rabbit@host``)
NODE = "sansmq@localhost"

#: the model's property header names (STOMP's, see engine._props) -> AMQP's property names
_PROPERTY_NAMES = {
    "content-type": "content_type", "content-encoding": "content_encoding", "correlation-id": "correlation_id",
    "reply-to": "reply_to", "expiration": "expiration", "amqp-message-id": "message_id", "type": "type",
    "user-id": "user_id", "app-id": "app_id", "priority": "priority", "timestamp": "timestamp",
}
_INT_PROPERTIES = frozenset(("priority", "timestamp"))

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
        key = "publish." + (x.name or "amq.default")
        trace_targets = self._targets(vhost, key)
        if trace_targets:
            headers = self._headers(vhost, x.name, msg, origin or NO_ORIGIN)
            headers["routed_queues"] = [q.name for q in targets if isinstance(q, Queue)]
            self._emit(trace_targets, key, headers, msg)

    def delivered(self, q: Queue, entry: Entry, origin: Origin) -> None:
        msg = entry.msg
        if msg.exchange == TRACE_EXCHANGE:
            return
        vhost = q.vhost
        key = "deliver." + q.name
        trace_targets = self._targets(vhost, key)
        if trace_targets:
            headers = self._headers(vhost, msg.exchange, msg, origin)
            headers["redelivered"] = int(entry.count > 0)
            self._emit(trace_targets, key, headers, msg)

    def _headers(self, vhost: VHost, exchange: str, msg: Message, origin: Origin) -> dict[str, Any]:
        user, connection, channel = origin
        return {
            "exchange_name": exchange,
            "routing_keys": [msg.routing_key],
            "properties": amqp_properties(msg),
            "node": NODE,
            "delivery_mode": 2 if msg.persistent else 1,
            "user": user,
            "channel": channel,
            "connection": connection,
            "vhost": vhost.name,
            "timestamp_in_ms": int(self.state.now * 1000),
        }

    @staticmethod
    def _targets(vhost: VHost, key: str) -> list[Any]:
        """The queues bound to the trace exchange for ``key`` (routing first: an unbound firehose
        builds no trace message)."""
        x = vhost.exchanges.get(TRACE_EXCHANGE)
        return route(vhost, x, key, None) if x is not None else []

    def _emit(self, targets: list[Any], key: str, headers: dict[str, Any], msg: Message) -> None:
        state = self.state
        traced = Message(state.next_message_id(), TRACE_EXCHANGE, key, headers, msg.body)
        enqueue = self.enqueue
        for q in targets:
            enqueue(q, traced)


def amqp_properties(msg: Message) -> dict[str, Any]:
    """The message's properties as RabbitMQ's trace table has them: AMQP names, application headers
    in ``headers``, ``delivery_mode`` 1 or 2."""
    props: dict[str, Any] = {"delivery_mode": 2 if msg.persistent else 1}
    app: dict[str, Any] = {}
    for name, value in msg.headers.items():
        field = _PROPERTY_NAMES.get(name)
        if field is None:
            if name != "persistent":
                app[name] = value
        elif field in _INT_PROPERTIES:
            try:
                props[field] = int(value)
            except (TypeError, ValueError):
                pass  # not a number (STOMP headers are free text): left out, as AMQP cannot carry it
        else:
            props[field] = str(value)
    if app:
        props["headers"] = app
    return props
