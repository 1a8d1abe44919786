"""SEND: the destination names the exchange and routing key (declaring a ``/queue/`` as RabbitMQ's
adapter does), the headers become the message (priority, expiry, ack-timeout, persistence), and
``/control/`` destinations answer counts in the receipt."""

from __future__ import annotations

from stompproto import Frame

from .._message import Message
from .._mypyc import interpreted_class
from ..model import ModelError
from ..model.origin import session_origin
from .base import StompBase, num
from .destinations import Destination
from .errors import StompError, model_error_title
from .permissions import permit_publish, permit_topic

__all__ = ["SendMethods"]

#: SEND headers that only steer this frame and are not part of the message
_TRANSPORT_HEADERS = frozenset(("destination", "receipt", "transaction", "content-length"))
#: SEND headers that change how the broker treats the message
_STEERING = frozenset(("priority", "expires", "ttl", "expiration", "ack-timeout"))


@interpreted_class
class SendMethods(StompBase):
    __slots__ = ()

    def _apply_send(self, frame: Frame) -> dict[str, str] | None:
        headers = frame.headers
        dest = self._parse(headers.get("destination"))
        if dest.kind == "control":
            return self._control(dest)
        model = self.model
        vhost = self.vhost
        assert vhost is not None
        now = self.host.now
        msg_headers = {k: v for k, v in headers.items() if k not in _TRANSPORT_HEADERS}
        reply_to = msg_headers.get("reply-to")
        if reply_to is not None and reply_to.startswith("/temp-queue/"):
            q = self._temp_queue(reply_to[12:])
            msg_headers["reply-to"] = f"/reply-queue/{q.name}"
        exchange, key = self._publish_target(dest, headers)
        permit_publish(self.access, exchange)
        permit_topic(self.access, vhost.exchanges.get(exchange), key, "write")
        priority = 0
        expires_at = None
        ack_timeout = None
        if not _STEERING.isdisjoint(msg_headers):  # rare: skip the parsing on the common path
            prio = num(msg_headers.get("priority"))
            if prio is not None:
                priority = max(0, min(9, int(prio)))
                msg_headers["priority"] = str(priority)
            for name, relative in (("expires", False), ("ttl", True), ("expiration", True)):
                value = num(msg_headers.get(name))
                if value is None:
                    continue
                when = now + value / 1000.0 if relative else value / 1000.0
                expires_at = when if expires_at is None else min(expires_at, when)
            ack_timeout = num(msg_headers.get("ack-timeout"))
            if ack_timeout is not None and ack_timeout <= 0:
                ack_timeout = None
        persistent = msg_headers.get("persistent", "").lower() == "true"
        msg = Message(model.next_message_id(), exchange, key, msg_headers, frame.body, priority,
                      expires_at, persistent, ack_timeout)
        try:
            model.publish(vhost, exchange, msg, False, session_origin(self) if vhost.trace is not None else None)
        except ModelError as exc:
            raise StompError(model_error_title(exc), exc.text) from None
        return None

    def _publish_target(self, dest: Destination, headers: dict[str, str]) -> tuple[str, str]:
        vhost = self.vhost
        assert vhost is not None
        kind = dest.kind
        if kind == "queue":
            self._declare(dest.name, headers)
            return "", dest.name
        if kind == "amq-queue":
            if dest.name not in vhost.queues:
                raise StompError("not_found", f"no queue '{dest.name}' in vhost '{vhost.name}'")
            return "", dest.name
        if kind == "topic":
            return "amq.topic", dest.key
        if kind == "exchange":
            if dest.name not in vhost.exchanges:
                raise StompError("not_found", f"no exchange '{dest.name}' in vhost '{vhost.name}'")
            return dest.name, dest.key
        if kind == "temp-queue":
            return "", self._temp_queue(dest.name).name
        if kind == "reply-queue":
            return "", dest.name
        raise StompError("Invalid destination", f"cannot send to '{kind}' destinations")

    def _control(self, dest: Destination) -> dict[str, str]:
        vhost = self.vhost
        assert vhost is not None
        model = self.model
        what, _, target = dest.name.partition("/")
        extra: dict[str, str]
        if what == "count-msgs" and target.startswith("queue/"):
            q = vhost.queues.get(target[6:])
            extra = {"num-messages": str(q.count if q else 0)}
        elif what == "count-subscribers" and target.startswith("queue/"):
            q = vhost.queues.get(target[6:])
            extra = {"num-subscribers": str(q.consumer_count() if q else 0)}
        elif what == "count-subscribers" and target.startswith("topic/"):
            topic = vhost.exchanges["amq.topic"]
            queues = model.route(vhost, topic, target[6:], None)
            extra = {"num-subscribers": str(sum(q.consumer_count() for q in queues))}
        else:
            raise StompError("Invalid destination", f"unknown control destination '/control/{dest.name}'")
        return extra
