"""SUBSCRIBE, UNSUBSCRIBE, ACK and NACK: a subscription reads a queue (declared and bound for a
topic or exchange destination, as RabbitMQ's adapter does) or, for a non-durable topic, binds a
light consumer without a queue; acks map a message's ack id back to its subscription and tag."""

from __future__ import annotations

from stompproto import Ack, Frame, Subscribe, Unsubscribe

from .._mypyc import interpreted_class
from ..model import ModelError, Queue
from ..model.routers import PREFIX_ARG
from ..model.streams import check_not_stream_consumer
from .base import QUEUE_ARGS, StompBase, num, queue_args
from .destinations import Destination, is_prefix_topic
from .errors import StompError, model_error_title
from .permissions import permit, permit_light_subscription, permit_subscription_queue, permit_topic
from .stream_subscribe import consume_stream
from .subscriptions import ACK_MODES, StompLightSubscription, StompSubscription

__all__ = ["SubscribeMethods"]


@interpreted_class
class SubscribeMethods(StompBase):
    __slots__ = ()

    def _on_subscribe(self, frame: Subscribe) -> None:
        headers = frame.headers
        destination = headers.get("destination")
        dest = self._parse(destination)
        assert destination is not None
        sub_id = headers.get("id", destination)
        if sub_id in self.subs:
            raise StompError("Duplicated subscription identifier", f"subscription '{sub_id}' already exists")
        self._check_subscription_limit()
        ack_mode = headers.get("ack", "auto")
        if ack_mode not in ACK_MODES:
            raise StompError("Invalid ack mode", f"ack mode '{ack_mode}' is not one of {', '.join(ACK_MODES)}")
        prefetch = self.host.config.limits.default_prefetch
        for name in ("prefetch-count", "prefetch"):
            value = num(headers.get(name))
            if value is not None:
                prefetch = max(0, int(value))
                break
        before = self.model.store_writes
        light = self._light_subscription(dest, sub_id, headers, prefetch, ack_mode)
        if light is not None:
            self.model.bind_light(light)
            self.subs[sub_id] = light
            self._receipt(frame, False)
            return
        q, owns = self._subscription_queue(dest, sub_id, headers)
        permit(self.access, "read", "queue", q.name)
        sub = StompSubscription(q, self, prefetch, sub_id, destination, ack_mode, owns)
        try:
            if q.stream:
                consume_stream(self.model, q, sub, headers)
            else:
                check_not_stream_consumer(q, headers)
                self.model.consume(q, sub)
        except ModelError as exc:
            raise StompError(model_error_title(exc), exc.text) from None
        self.subs[sub_id] = sub
        self._receipt(frame, self.model.store_writes != before)

    def _light_subscription(self, dest: Destination, sub_id: str, headers: dict[str, str], prefetch: int,
                            ack_mode: str) -> StompLightSubscription | None:
        """A light subscription for a non-durable topic (or topic-exchange) destination without
        queue arguments; None when it needs a real queue."""
        kind = dest.kind
        if kind not in ("topic", "exchange") or (kind == "topic" and _durable(headers)):
            return None
        if any(k in headers for k in QUEUE_ARGS):
            return None
        assert self.vhost is not None
        exchange = self.vhost.exchanges.get(dest.name)
        if exchange is None or not self.model.supports_light(exchange):
            return None  # the queue path reports a missing exchange
        permit_light_subscription(self.access, sub_id, exchange.name)
        permit_topic(self.access, exchange, dest.key, "read")
        key, prefix = dest.key, False
        if kind == "topic" and is_prefix_topic(key):
            key, prefix = key[:-1], True
        return StompLightSubscription(self, exchange, key, prefix, prefetch, sub_id, ack_mode)

    def _subscription_queue(self, dest: Destination, sub_id: str, headers: dict[str, str]) -> tuple[Queue, bool]:
        vhost = self.vhost
        assert vhost is not None
        model = self.model
        kind = dest.kind
        if kind == "queue":
            return self._declare(dest.name, headers), False
        if kind in ("amq-queue", "reply-queue"):
            q = vhost.queues.get(dest.name)
            if q is None:
                raise StompError("not_found", f"no queue '{dest.name}' in vhost '{vhost.name}'")
            return q, False
        if kind == "temp-queue":
            return self._temp_queue(dest.name), False
        if kind not in ("topic", "exchange"):
            raise StompError("Invalid destination", f"cannot subscribe to '{kind}' destinations")
        exchange = vhost.exchanges.get(dest.name)
        if exchange is None:
            raise StompError("not_found", f"no exchange '{dest.name}' in vhost '{vhost.name}'")
        key, bind_args = dest.key, None
        if kind == "topic" and is_prefix_topic(key):
            key, bind_args = key[:-1], {PREFIX_ARG: True}
        durable = kind == "topic" and _durable(headers)
        args = queue_args(headers)
        if durable:
            if "id" not in headers:
                raise StompError("Missing id", "a durable subscription needs an id header")
            auto_delete = headers.get("auto-delete", "false").lower() == "true"
            name = _durable_queue_name(sub_id)
        else:
            name = self.host.new_name("stomp-sub-")
        permit_subscription_queue(self.access, name, exchange.name)
        permit_topic(self.access, exchange, dest.key, "read")
        if durable:
            q = model.declare_queue(vhost, name, durable=True, auto_delete=auto_delete, args=args)
            owns = False
        else:
            q = model.declare_queue(vhost, name, durable=False, auto_delete=True, exclusive_owner=self, args=args)
            owns = True
        model.bind(vhost, q, exchange, key, bind_args)
        return q, owns

    def _on_unsubscribe(self, frame: Unsubscribe) -> None:
        headers = frame.headers
        sub_id = headers.get("id", headers.get("destination"))
        if sub_id is None:
            raise StompError("Missing id", "UNSUBSCRIBE needs an id header")
        model = self.model
        before = model.store_writes
        sub = self.subs.pop(sub_id, None)
        durable = _durable(headers)
        if sub is None and not durable:
            raise StompError("Subscription not found", f"no subscription '{sub_id}'")
        if sub is not None:
            model.cancel(sub, requeue=True)
            if isinstance(sub, StompSubscription) and sub.owns_queue:
                model.delete_queue(sub.queue)
        if durable:
            assert self.vhost is not None
            q = self.vhost.queues.get(_durable_queue_name(sub_id))
            if q is not None:
                model.delete_queue(q)
        self._receipt(frame, model.store_writes != before)

    def _apply_ack(self, frame: Frame) -> None:  # returns no receipt headers
        headers = frame.headers
        ack_id = headers.get("id") if self.version == "1.2" else None
        if ack_id is None:
            ack_id = headers.get("message-id", headers.get("id"))
        if ack_id is None:
            raise StompError("Missing ack id", f"{frame.command} needs an id (1.2) or message-id header")
        sub_id, sep, tag_text = ack_id.rpartition("@@")
        sub = self.subs.get(sub_id[2:]) if sep and sub_id.startswith("T_") else None
        tag = int(tag_text) if tag_text.isdigit() else -1
        model = self.model
        # a light subscription stands in for a Consumer here (see engine.model.light), which
        # the model's annotations, written for queue consumers, do not say
        if sub is None or not model.has_tag(sub, tag):  # type: ignore[arg-type]
            if self.timed_out is not None and tag in self.timed_out:
                return  # the ack timeout already took it back
            raise StompError("Unknown ack id", f"no unacknowledged message with id '{ack_id}'")
        multiple = sub.ack_mode == "client"
        if isinstance(frame, Ack):
            model.ack(sub, tag, multiple)  # type: ignore[arg-type]
        else:
            requeue = headers.get("requeue", "true").lower() != "false"
            model.nack(sub, tag, multiple, requeue)  # type: ignore[arg-type]


def _durable(headers: dict[str, str]) -> bool:
    return headers.get("durable", "").lower() == "true" or headers.get("persistent", "").lower() == "true"


def _durable_queue_name(sub_id: str) -> str:
    return f"stomp-subscription-{sub_id}"
