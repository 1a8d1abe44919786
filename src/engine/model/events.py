"""The event exchange (RabbitMQ's rabbitmq_event_exchange plugin): the broker's own life as messages
on the ``amq.rabbitmq.event`` topic exchange.

As the plugin, the exchange (topic, durable, internal) lives in one vhost (``Config.event_vhost``,
RabbitMQ's ``rabbitmq_event_exchange.vhost``) and gets the events of every vhost. An event is a
message with routing key ``<object>.<verb>`` (``queue.created``, ``connection.closed``, ...), an
empty body, ``delivery_mode`` 2, the ``timestamp`` property in seconds and the event's properties
as headers, plus ``timestamp_in_ms``. A property naming a queue or exchange is its name plus a
``vhost`` header (the plugin's resource formatting). Actions carry ``user_who_performed_action``:
the user of the connection that caused them, ``rmq-internal`` for the broker's own (an expiry, a
management command). Nothing is built while no queue is bound for the key (as the plugin skips
work without bindings); when the exchange is off every hook costs one attribute check.

Times come from the model's clock (``state.now``), never read here. Event messages go straight to
the bound queues (as the plugin's internal publish): they are not traced by the firehose."""

from __future__ import annotations

from typing import Any

from .._message import Message
from .objects import Exchange, Queue, VHost
from .origin import connection_name, peer_fields, user_name
from .routing import route
from .state import ModelState
from .trace import NODE

__all__ = ["EVENT_EXCHANGE", "INTERNAL_USER", "Events"]

EVENT_EXCHANGE = "amq.rabbitmq.event"
#: who performed what the broker did by itself (RabbitMQ's ?INTERNAL_USER)
INTERNAL_USER = "rmq-internal"
_ACTOR = "user_who_performed_action"


def _channel_name(channel: Any) -> str:
    """RabbitMQ's ``<connection> (<number>)``."""
    return f"{connection_name(channel.session)} ({channel.id})"


class Events:
    """One per broker. ``exchange`` is the event exchange while it is on, else None; ``actor`` is
    the session whose request the broker is serving (set by the broker), None for its own work."""

    __slots__ = ("state", "enqueue", "exchange", "actor")

    def __init__(self, state: ModelState) -> None:
        self.state = state
        #: attached by the model: the publisher's enqueue
        self.enqueue: Any = None
        self.exchange: Exchange | None = None
        self.actor: Any = None

    def enable(self, vhost: VHost) -> None:
        """Declare the exchange in ``vhost`` (not stored: it exists while the config turns it on)."""
        x = vhost.exchanges.get(EVENT_EXCHANGE)
        if x is None:
            x = vhost.exchanges[EVENT_EXCHANGE] = Exchange(vhost, EVENT_EXCHANGE, "topic", True, False, True, None)
        self.exchange = x

    # -- emitting ---------------------------------------------------------------------------------
    def emit(self, key: str, props: dict[str, Any]) -> None:
        """Publish event ``key`` with ``props`` as headers to the queues bound for it."""
        x = self.exchange
        if x is None:
            return
        targets = route(x.vhost, x, key, None)
        if not targets:
            return
        state = self.state
        now = state.now
        headers = dict(props)
        headers["timestamp_in_ms"] = int(now * 1000)
        headers["timestamp"] = int(now)  # the AMQP property: seconds (0-9-1's POSIX timestamp)
        msg = Message(state.next_message_id(), EVENT_EXCHANGE, key, headers, b"", 0, None, True)
        enqueue = self.enqueue
        for q in targets:
            if isinstance(q, Queue):
                enqueue(q, msg)

    def _acted(self, props: dict[str, Any]) -> dict[str, Any]:
        actor = self.actor
        props[_ACTOR] = (user_name(actor) if actor is not None else "") or INTERNAL_USER
        return props

    # -- the model's objects ------------------------------------------------------------------------
    def queue_created(self, q: Queue) -> None:
        if self.exchange is not None:
            self.emit("queue.created", self._acted({
                "name": q.name, "vhost": q.vhost.name, "durable": q.durable, "auto_delete": q.auto_delete,
                "exclusive": q.exclusive_owner is not None, "arguments": dict(q.args or {})}))

    def queue_deleted(self, q: Queue) -> None:
        if self.exchange is not None:
            self.emit("queue.deleted", self._acted({"name": q.name, "vhost": q.vhost.name}))

    def exchange_created(self, x: Exchange) -> None:
        if self.exchange is not None:
            self.emit("exchange.created", self._acted({
                "name": x.name, "vhost": x.vhost.name, "type": x.type, "durable": x.durable,
                "auto_delete": x.auto_delete, "internal": x.internal, "arguments": dict(x.args or {}),
                "policy": x.policy or ""}))

    def exchange_deleted(self, x: Exchange) -> None:
        if self.exchange is not None:
            self.emit("exchange.deleted", self._acted({"name": x.name, "vhost": x.vhost.name}))

    def binding(self, verb: str, source: Exchange, dest: Queue | Exchange, key: str,
                args: dict[str, Any] | None) -> None:
        """``binding.created`` / ``binding.deleted``."""
        if self.exchange is not None:
            self.emit("binding." + verb, self._acted({
                "source_name": source.name, "source_kind": "exchange", "destination_name": dest.name,
                "destination_kind": "queue" if isinstance(dest, Queue) else "exchange",
                "routing_key": key, "arguments": dict(args or {}), "vhost": source.vhost.name}))

    def consumer(self, verb: str, c: Any) -> None:
        """``consumer.created`` / ``consumer.deleted`` for an AMQP consumer or a STOMP subscription."""
        if self.exchange is None:
            return
        q = c.queue
        channel = getattr(c, "channel", None)
        # a STOMP subscription's tag is T_<id>, as RabbitMQ's STOMP adapter names its consumers
        tag = getattr(c, "tag", None) or f"T_{getattr(c, 'id', '')}"
        props: dict[str, Any] = {
            "consumer_tag": tag,
            "channel": _channel_name(channel) if channel is not None else connection_name(c.owner),
            "queue": q.name, "vhost": q.vhost.name}
        if verb == "created":
            props.update(exclusive=bool(getattr(c, "exclusive", False)), ack_required=not c.auto_ack,
                         prefetch_count=c.prefetch, arguments={})
        self.emit("consumer." + verb, self._acted(props))

    # -- connections and channels (the sessions call these) ----------------------------------------
    def connection_created(self, session: Any, protocol: str) -> None:
        if self.exchange is None:
            return
        vhost = getattr(session, "vhost", None)
        props: dict[str, Any] = {
            "name": connection_name(session), "protocol": protocol, "node": NODE,
            "user": user_name(session), "vhost": vhost.name if vhost is not None else "",
            "connected_at": int(self.state.now * 1000), "type": "network", **peer_fields(session)}
        mechanism = getattr(session, "mechanism", None)
        if mechanism:
            props["auth_mechanism"] = mechanism
        client = getattr(session, "client_properties", None)
        if client:
            props["client_properties"] = client
        props[_ACTOR] = props["user"]
        self.emit("connection.created", props)

    def authentication(self, session: Any, protocol: str, name: str | None, mechanism: str,
                       error: str | None = None) -> None:
        """``user.authentication.success`` / ``.failure`` (with ``error``): no vhost, as RabbitMQ's."""
        if self.exchange is None:
            return
        props: dict[str, Any] = {
            "name": name or "", "connection_name": connection_name(session), "connection_type": "network",
            "protocol": protocol, "auth_mechanism": mechanism, **peer_fields(session)}
        if error is not None:
            props["error"] = error
        self.emit("user.authentication." + ("success" if error is None else "failure"), props)

    def connection_closed(self, session: Any) -> None:
        """Only for a connection that was announced (logged in); no acting user, as RabbitMQ."""
        if self.exchange is not None and getattr(session, "vhost", None) is not None:
            self.emit("connection.closed", {"name": connection_name(session), "node": NODE})

    def channel(self, verb: str, channel: Any) -> None:
        """``channel.created`` / ``channel.closed`` of an AMQP channel."""
        if self.exchange is None:
            return
        session = channel.session
        user = user_name(session)
        props: dict[str, Any] = {"name": _channel_name(channel), _ACTOR: user}
        if verb == "created":
            vhost = session.vhost
            props.update(connection=connection_name(session), number=channel.id, user=user,
                         vhost=vhost.name if vhost is not None else "")
        self.emit("channel." + verb, props)

    # -- the broker's administration ------------------------------------------------------------------
    def admin(self, key: str, **props: Any) -> None:
        """``user.created``, ``vhost.deleted``, ``permission.created``, ... (management commands)."""
        if self.exchange is not None:
            self.emit(key, self._acted(props))

    def alarm(self, on: bool, source: str) -> None:
        if self.exchange is not None:
            self.emit("alarm.set" if on else "alarm.cleared", {"source": source, "node": NODE})
