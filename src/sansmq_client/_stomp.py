"""One STOMP 1.2 connection of the client, on stompproto: CONNECT, receipts as confirmations,
subscriptions restored from the Core, and an ERROR frame turned into a typed error."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import stompproto as stomp

from ._bulk import BatchSink, OnConfirm
from ._errors import BrokerError, ClientError, ConnectionClosedByUser, ConnectionLost, NotSupported
from ._model import ConsumerRecord, Delivery
from ._pending import Pending
from ._session import Session, TxRecord

__all__ = ["StompSession"]


class StompSession(Session):
    NEED_DATA = stomp.NEED_DATA
    REMOTE_ERROR = stomp.RemoteProtocolError
    DELIVERY = stomp.Message

    def __init__(self, core: Any, now: float) -> None:
        super().__init__(core)
        self.conn = stomp.Connection(stomp.CLIENT)
        self.receipts: dict[str, tuple[str, Pending[None]]] = {}  # receipt id -> (command, outcome)
        self.ids = itertools.count(1)
        self.subscriptions: dict[str, ConsumerRecord] = {}
        ms = round(self.params.heartbeat * 1000)
        self.out += self.conn.send(stomp.Connect({
            "accept-version": "1.2", "host": self.params.vhost, "login": self.params.user,
            "passcode": self.params.password, "heart-beat": f"{ms},{ms}"}), now=now)

    def _send(self, frame: stomp.Frame, now: float, receipt: bool = False) -> Pending[None]:
        pending: Pending[None] = Pending.resolved(None)
        if receipt:
            rid = f"r{next(self.ids)}"
            frame.headers["receipt"] = rid
            pending = Pending()
            self.receipts[rid] = (frame.command, pending)
        self.out += self.conn.send(frame, now=now)
        return pending

    # -- input ----------------------------------------------------------------------------
    def _handle(self, event: Any, now: float) -> None:
        match event:
            case stomp.Receipt():
                command, pending = self.receipts.pop(event.headers.get("receipt-id", ""), ("", None))
                if pending is not None:
                    pending.resolve(None)
                if command == "DISCONNECT":
                    self.end(ConnectionClosedByUser("the connection was closed"), fatal=True)
            case stomp.HeartbeatDue():
                self.out += self.conn.send(stomp.Heartbeat(), now=now)
            case stomp.PeerTimedOut():
                self.end(ConnectionLost("the broker stopped sending heart-beats"))
            case stomp.ConnectionClosed():
                self.end(ConnectionLost("the broker closed the socket"))
            case stomp.Connected():
                self.restore_consumers(now)
                self.ready.resolve(None)
            case stomp.Error():
                self._error(event)

    def _error(self, frame: stomp.Error) -> None:
        command, pending = self.receipts.pop(frame.headers.get("receipt-id", ""), ("", None))
        error = BrokerError(frame.headers.get("message", ""), frame.body, command)
        if pending is not None:
            pending.fail(error)
        # An ERROR before CONNECTED refused the log-in: reconnecting would be refused the same way.
        self.end(error, fatal=not self.ready.done)

    def fail_in_flight(self, error: BaseException) -> None:
        receipts, self.receipts = self.receipts, {}
        for _, pending in receipts.values():
            pending.fail(error)

    # -- operations -------------------------------------------------------------------------
    def publish(self, target: str, body: bytes, headers: dict[str, Any], options: dict[str, Any],
                confirm: bool, tx: TxRecord | None, now: float) -> Pending[None]:
        frame = stomp.Send(_send_headers(target, headers, options), body)
        if tx is not None:
            frame.headers["transaction"] = tx.name
        return self._send(frame, now, receipt=confirm and tx is None)

    def publish_burst(self, target: str, bodies: Sequence[bytes], headers: dict[str, Any], options: dict[str, Any],
                      first_number: int, on_confirm: OnConfirm | None, confirm_every: int, now: float) -> Pending[None]:
        send_headers = _send_headers(target, headers, options)  # one dict for every SEND of the burst
        send, frame, start = self.conn.send, stomp.Send, 0
        # the publishes that ask for a receipt: the broker handles a connection's frames in order, so a
        # receipt covers every earlier SEND
        receipted = [] if on_confirm is None else [len(bodies) - 1] if not confirm_every else range(
            -first_number % confirm_every, len(bodies), confirm_every)
        for i in receipted:
            self.out += b"".join([send(frame(send_headers, body)) for body in bodies[start:i]])
            self._send(frame(dict(send_headers), bodies[i]), now, receipt=True).add_done_callback(
                _receipted(on_confirm, first_number + i))  # type: ignore[arg-type]
            start = i + 1
        self.out += b"".join([send(frame(send_headers, body)) for body in bodies[start:]])
        return _DONE

    def subscribe(self, consumer: ConsumerRecord, now: float) -> Pending[None]:
        self.subscriptions[consumer.tag] = consumer
        ack = ("auto" if consumer.auto_ack else
               "client" if consumer.batch is not None and consumer.batch.cumulative else "client-individual")
        headers = {"id": consumer.tag, "destination": consumer.source, "ack": ack,
                   **{k: str(v) for k, v in consumer.arguments.items()}}
        if consumer.prefetch:
            headers["prefetch-count"] = str(consumer.prefetch)
        if (offset := consumer.resume_offset()) is not None:
            headers["x-stream-offset"] = str(offset)
        return self._send(stomp.Subscribe(headers), now, receipt=True)

    def cancel(self, consumer: ConsumerRecord, now: float) -> Pending[None]:
        if self.subscriptions.pop(consumer.tag, None) is None:
            return Pending.resolved(None)
        return self._send(stomp.Unsubscribe({"id": consumer.tag}), now, receipt=True)

    def _deliver(self, m: stomp.Message) -> None:
        consumer = self.subscriptions.get(m.headers.get("subscription", ""))
        if consumer is None:
            return
        if consumer.batch is not None:
            self.add_to_batch(consumer.tag, consumer, m, m.body, m.headers.get("ack"))
            return
        offset = m.headers.get("x-stream-offset")
        delivery = Delivery(m.body, m.headers, consumer, m.headers.get("redelivered") == "true",
                            m.headers.get("destination", ""), "", None,
                            int(offset) if offset and offset.isdigit() else None, m.headers.get("ack"),
                            self.generation)
        if consumer.auto_ack and delivery.offset is not None:
            consumer.last_offset = delivery.offset
        consumer.on_delivery(delivery)

    def settle(self, delivery: Delivery, how: str, requeue: bool, tx: TxRecord | None, now: float) -> None:
        if delivery.consumer.tag not in self.subscriptions:
            return  # unsubscribed: the broker already requeued what was unacked
        headers = {"id": str(delivery.ack_id)}
        if tx is not None:
            headers["transaction"] = tx.name
        if how == "ack":
            self._send(stomp.Ack(headers), now)
        else:  # RabbitMQ's NACK requeues unless told not to; a reject never requeues
            headers["requeue"] = "true" if how == "nack" and requeue else "false"
            self._send(stomp.Nack(headers), now)

    def settle_raw(self, route: Any, sink: BatchSink, ack_id: Any, how: str, multiple: bool, requeue: bool) -> None:
        if multiple and not sink.cumulative:
            raise ClientError("a settle with multiple needs a cumulative STOMP subscription (ack:client)")
        if route in self.subscriptions:  # else unsubscribed: the broker already requeued what was unacked
            self.out += self.conn.send(stomp.Ack({"id": ack_id}) if how == "ack" else
                                       stomp.Nack({"id": ack_id, "requeue": "true" if requeue else "false"}))

    def ack_each(self, route: Any, ack_ids: list[Any]) -> None:
        if route in self.subscriptions:
            send, ack = self.conn.send, stomp.Ack
            self.out += b"".join([send(ack({"id": ack_id})) for ack_id in ack_ids])

    def cumulative_settle(self, sink: BatchSink) -> bool:
        return sink.cumulative

    def stream_offset(self, event: Any) -> int | None:
        offset = event.headers.get("x-stream-offset")
        return int(offset) if offset and offset.isdigit() else None

    def declare(self, kind: str, args: dict[str, Any], now: float) -> Pending[Any]:
        raise NotSupported("STOMP has no declarations: the broker declares on SUBSCRIBE/SEND "
                           "(queue arguments go in their headers)")

    def tx_begin(self, tx: TxRecord, now: float) -> Pending[None]:
        return self._send(stomp.Begin({"transaction": tx.name}), now, receipt=True)

    def tx_end(self, tx: TxRecord, commit: bool, now: float) -> Pending[None]:
        frame = stomp.Commit({"transaction": tx.name}) if commit else stomp.Abort({"transaction": tx.name})
        return self._send(frame, now, receipt=True)

    def close(self, now: float) -> Pending[None]:
        return self._send(stomp.Disconnect({}), now, receipt=True)


_DONE: Pending[None] = Pending.resolved(None)


def _receipted(on_confirm: OnConfirm, number: int) -> Callable[[Pending[None]], None]:
    return lambda p: on_confirm(number, True, p.error)


def _send_headers(target: str, headers: dict[str, Any], options: dict[str, Any]) -> dict[str, str]:
    if options:
        raise NotSupported(f"STOMP SEND takes a destination and headers, not {sorted(options)}")
    return {"destination": target, **{k: str(v) for k, v in headers.items()}}
