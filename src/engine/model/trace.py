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
loop), and trace messages go straight to the queues bound to it, never through the publish path.

Cost: a trace message's headers table is what a stream bound to the firehose stores for every
record, so it is assembled here from encoded pieces (``TraceTables``) rather than encoded field by
field: the part naming the node, user, connection and vhost is the same for every message of one
channel, the exchange's and the properties' parts repeat too. ``EncodedMessage`` carries it to the
store; ``tests/engine/test_trace_tables.py`` holds it to ``write_table`` of the headers, byte for byte."""

from __future__ import annotations

from collections.abc import Hashable
from struct import Struct
from typing import Any

from amqpproto import write_table, write_value

from .._message import EncodedMessage, Entry, Message
from .light import LightConsumer
from .objects import Exchange, Queue, VHost
from .routing import route
from .state import ModelState

__all__ = ["TRACE_EXCHANGE", "Tracer", "TraceTables", "Origin", "NO_ORIGIN", "amqp_properties"]

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


def _key(name: str) -> bytes:
    """A field table key as encoded (shortstr)."""
    b = name.encode()
    return bytes((len(b),)) + b


_U32 = Struct(">I")
_EXCHANGE, _ROUTING_KEYS, _PROPERTIES = _key("exchange_name"), _key("routing_keys"), _key("properties")
_TIMESTAMP, _ROUTED, _REDELIVERED = _key("timestamp_in_ms"), _key("routed_queues"), _key("redelivered")
_REDELIVERED_PARTS = (_REDELIVERED + write_value(0), _REDELIVERED + write_value(1))
#: entries kept per piece cache before it starts afresh (names and origins of a busy broker)
_CACHE_MAX = 4096


class TraceTables:
    """Trace messages' headers, the dict and its encoded field table together, the table joined
    from cached pieces in the order RabbitMQ's tracer writes them."""

    __slots__ = ("exchanges", "keys", "origins", "routed", "plain_props")

    def __init__(self) -> None:
        self.exchanges: dict[str, bytes] = {}
        self.keys: dict[str, bytes] = {}
        #: (persistent, origin, vhost) -> node .. vhost entries, contiguous in the table
        self.origins: dict[Hashable, bytes] = {}
        self.routed: dict[tuple[str, ...], bytes] = {}
        #: the properties entry of a message with no headers, by delivery mode
        self.plain_props = {dm: _PROPERTIES + write_value({"delivery_mode": dm}) for dm in (1, 2)}

    @staticmethod
    def _keep(cache: dict[Any, bytes], key: Hashable, piece: bytes) -> bytes:
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        cache[key] = piece
        return piece

    def build(self, vhost: str, exchange: str, msg: Message, origin: Origin, now_ms: int,
              routed: list[str] | None, redelivered: int = 0) -> tuple[dict[str, Any], bytes]:
        """The headers of the trace of ``msg`` and their table: ``routed`` (a publish's queues) or
        ``redelivered`` (a delivery's flag, when ``routed`` is None) last."""
        user, connection, channel = origin
        dm = 2 if msg.persistent else 1
        rk = msg.routing_key
        props = amqp_properties(msg) if msg.headers else {"delivery_mode": dm}
        headers: dict[str, Any] = {
            "exchange_name": exchange, "routing_keys": [rk], "properties": props, "node": NODE,
            "delivery_mode": dm, "user": user, "channel": channel, "connection": connection, "vhost": vhost,
            "timestamp_in_ms": now_ms,
        }
        keep = self._keep
        ex_part = self.exchanges.get(exchange) or keep(self.exchanges, exchange, _EXCHANGE + write_value(exchange))
        rk_part = self.keys.get(rk) or keep(self.keys, rk, _ROUTING_KEYS + write_value([rk]))
        who = (dm, origin, vhost)
        who_part = self.origins.get(who) or keep(self.origins, who, write_table({
            "node": NODE, "delivery_mode": dm, "user": user, "channel": channel, "connection": connection,
            "vhost": vhost})[4:])
        if routed is None:
            headers["redelivered"] = redelivered
            last = _REDELIVERED_PARTS[redelivered]
        else:
            headers["routed_queues"] = routed
            names = tuple(routed)
            last = self.routed.get(names) or keep(self.routed, names, _ROUTED + write_value(routed))
        props_part = self.plain_props[dm] if len(props) == 1 else _PROPERTIES + write_value(props)
        body = b"".join((ex_part, rk_part, props_part, who_part, _TIMESTAMP + write_value(now_ms), last))
        return headers, _U32.pack(len(body)) + body


class Tracer:
    """One per broker; a traced vhost points at it (``VHost.trace``)."""

    __slots__ = ("state", "enqueue", "tables", "routes")

    def __init__(self, state: ModelState) -> None:
        self.state = state
        #: attached by the model: the publisher's enqueue (a trace message skips routing extras)
        self.enqueue: Any = None
        self.tables = TraceTables()
        #: (trace exchange, routing key) -> (its router's version, the queues): every message
        #: routes by its exchange's or queue's key, which repeat, through bindings that rarely change
        self.routes: dict[tuple[Exchange, str], tuple[int, list[Any]]] = {}

    def enable(self, vhost: VHost, on: bool = True) -> None:
        vhost.trace = self if on else None

    def published(self, vhost: VHost, x: Exchange, msg: Message, targets: list[Any], origin: Origin | None) -> None:
        if x.name == TRACE_EXCHANGE:
            return
        key = "publish." + (x.name or "amq.default")
        trace_targets = self._targets(vhost, key)
        if trace_targets:
            # queues and light subscriptions (a delayed exchange's holder routes nowhere yet)
            routed = [q.name if isinstance(q, Queue) else q.trace_name() for q in targets
                      if isinstance(q, Queue | LightConsumer)]
            self._emit(trace_targets, key, msg, *self.tables.build(
                vhost.name, x.name, msg, origin or NO_ORIGIN, int(self.state.now * 1000), routed))

    def delivered(self, q: Queue, entry: Entry, origin: Origin) -> None:
        self.delivered_to(q.vhost, q.name, entry, origin)

    def delivered_to(self, vhost: VHost, queue: str, entry: Entry, origin: Origin) -> None:
        """A delivery from the queue (or light subscription) named ``queue``."""
        msg = entry.msg
        if msg.exchange == TRACE_EXCHANGE:
            return
        key = "deliver." + queue
        trace_targets = self._targets(vhost, key)
        if trace_targets:
            self._emit(trace_targets, key, msg, *self.tables.build(
                vhost.name, msg.exchange, msg, origin, int(self.state.now * 1000), None, int(entry.count > 0)))

    def _targets(self, vhost: VHost, key: str) -> list[Any]:
        """The queues bound to the trace exchange for ``key`` (routing first: an unbound firehose
        builds no trace message). Cached while the exchange's bindings stay as they were, unless
        it is bound to another exchange (whose bindings would change the answer unseen)."""
        x = vhost.exchanges.get(TRACE_EXCHANGE)
        if x is None:
            return []
        version = x.router.version
        hit = self.routes.get((x, key))
        if hit is not None and hit[0] == version:
            return hit[1]
        targets = route(vhost, x, key, None)
        if all(type(dest) is not Exchange for dest, _, _ in x.router.bindings()):
            if len(self.routes) >= _CACHE_MAX:
                self.routes.clear()
            self.routes[(x, key)] = (version, targets)
        return targets

    def _emit(self, targets: list[Any], key: str, msg: Message, headers: dict[str, Any], table: bytes) -> None:
        traced = EncodedMessage(self.state.next_message_id(), TRACE_EXCHANGE, key, headers, msg.body, table)
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
