"""Deliveries to a STOMP session's subscriptions (it is their ``ConsumerOwner``): a MESSAGE frame
made of the subscription's pre-encoded lines, the tag and the message's shared encoded tail."""

from __future__ import annotations

from typing import Any

from .._message import Entry, Message, SharedMessage
from .._mypyc import interpreted_class
from ..model import Consumer
from .base import DESTS_MAX, StompBase
from .destinations import destination_for
from .subscriptions import AnySubscription, StompSubscription
from .wire import Wire, message_headers

__all__ = ["DeliveryMethods"]

#: late acks for deliveries an ack timeout took back are ignored, up to this many per connection
_TIMED_OUT_MEMORY = 1024


@interpreted_class
class DeliveryMethods(StompBase):
    __slots__ = ()

    def deliver(self, consumer: Any, tag: int, entry: Entry) -> None:
        """``consumer``: one of this session's subscriptions, a ``StompSubscription`` or a
        ``StompLightSubscription`` (the model hands either as its consumer)."""
        msg = entry.msg
        tail: bytes | None  # None: not in the tail cache (the compiled build checks the declared type)
        try:
            wire = consumer.wire
            if wire is None:
                wire = consumer.wire = self._wire(consumer)
            if wire.destination is not None:
                tail = self._tail(msg, wire.destination)
            elif not msg.exchange and type(msg) is not SharedMessage:
                # the default exchange routes to one queue: nothing to share (but a stream record is
                # one SharedMessage for all the stream's readers: shared below)
                tail = self._tail(msg, "/queue/" + msg.routing_key)
            else:
                tail = wire.tails.get(msg)
                if tail is None:
                    tail = self._tail(msg, destination_for(msg.exchange, msg.routing_key))
                    self._tail_cache.put(wire.tails, msg, tail)
            t = b"%d" % tag
            if wire.ack is None:
                head = wire.pre + t + b"\n"
            else:
                head = wire.pre + t + wire.ack + t + b"\n"
            if entry.count:
                head += b"redelivered:true\nx-delivery-count:%d\n" % entry.count
            self.write(self.conn.send_message_bytes(head + tail, self.host.now))
        except Exception as exc:  # noqa: BLE001 - a delivery must never break dispatch for others
            self.host.internal_error(self, exc)
            self.abort("internal error")  # the delivery counts as unacked and is requeued by the teardown

    def _wire(self, consumer: AnySubscription) -> Wire:
        """Encode the subscription's own MESSAGE lines (see ``Wire``)."""
        conn = self.conn
        message_id = f"T_{consumer.id}@@"
        # each ends in "\n": cut it, the tag follows (digits never need escaping)
        pre = b"MESSAGE\n" + conn.encode_headers({"subscription": consumer.id, "message-id": message_id})[:-1]
        ack = None
        if consumer.ack_mode != "auto" and self.version == "1.2":
            ack = b"\n" + conn.encode_headers({"ack": message_id})[:-1]
        own = consumer.destination if consumer.destination.startswith("/temp-queue/") else None
        return Wire(pre, ack, own, self._tail_cache.by_escape[conn.escape])

    def _tail(self, msg: Message, destination: str) -> bytes:
        """``destination``, the message's own headers, content-length, body and NUL, encoded."""
        if msg.headers:
            return self.conn.message_tail(message_headers(msg, destination), msg.body)
        # no headers of its own (a plain SEND): only the destination line needs encoding, once
        lines = self._dest_lines
        line = lines.get(destination)
        if line is None:
            if len(lines) >= DESTS_MAX:
                lines.clear()
            line = lines[destination] = self.conn.encode_headers({"destination": destination})
        body = msg.body
        return b"".join((line, b"content-length:%d\n\n" % len(body), body, b"\x00"))

    def consumer_cancelled(self, consumer: Consumer) -> None:
        assert isinstance(consumer, StompSubscription)
        if self.subs.get(consumer.id) is consumer:
            del self.subs[consumer.id]

    def delivery_timed_out(self, consumer: Any, tag: int) -> None:  # a Consumer or a LightConsumer
        if self.timed_out is None:
            self.timed_out = {}
        self.timed_out[tag] = None
        if len(self.timed_out) > _TIMED_OUT_MEMORY:
            del self.timed_out[next(iter(self.timed_out))]
