"""One AMQP channel: exchange/queue/basic/confirm/tx methods mapped onto the model.

A channel numbers its deliveries (delivery tags 1, 2, ... per channel) and keeps each one's model
consumer, model tag and ack deadline, so ack/nack/reject (``multiple`` included) map back to the
model and RabbitMQ's consumer timeout can close the channel. Errors are raised as
:class:`ChannelError` (the session closes this channel only) or :class:`AmqpConnectionError`
(hard errors).

The methods are grouped by job in modules of their own: ``topology`` (exchange.* and queue.*),
``consume`` (qos, consume, cancel, get, deliveries, consumer timeout), ``acks`` (ack, nack,
reject, recover, tx), ``publish`` (publish, confirms); ``permissions`` and ``stream_consume`` hold
the checks they share. This module puts them together and dispatches a method by its type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amqpproto import PublishRun, spec

from .._mypyc import interpreted_class
from ..model import ModelError
from .acks import AckMethods
from .base import REPLY_TO, AmqpConsumer, ChannelOwner
from .consume import ConsumeMethods
from .errors import AmqpConnectionError, ChannelError
from .properties import props_bytes
from .publish import PublishMethods
from .topology import TopologyMethods

__all__ = ["AmqpChannel", "AmqpConsumer", "ChannelError", "AmqpConnectionError", "REPLY_TO", "ChannelOwner",
           "props_bytes"]


@interpreted_class
class AmqpChannel(TopologyMethods, ConsumeMethods, AckMethods, PublishMethods):
    __slots__ = ()

    def handle(self, m: Any) -> None:
        handler = _HANDLERS.get(type(m))
        if handler is None:
            raise ChannelError(spec.NOT_IMPLEMENTED, f"{m.NAME} is not implemented", type(m))
        try:
            handler(self, m)
        except ModelError as exc:
            if exc.code == spec.NOT_IMPLEMENTED:  # a hard error, as RabbitMQ's
                raise AmqpConnectionError(exc.code, exc.text, type(m)) from None
            raise ChannelError(exc.code, exc.text, type(m)) from None

    def teardown(self) -> None:
        """The channel is gone: cancel its consumers and requeue every unacked delivery."""
        model = self.session.model
        consumers = self.consumers
        self.consumers = {}
        self._restore_tx_settles()  # an uncommitted ack settles nothing: requeued below
        for c in consumers.values():
            model.cancel(c, requeue=True)
        # cancelled consumers and basic.get holders may still hold deliveries of this channel
        holders = {c: None for c, _, _ in self.unacked.values() if c.unacked}
        for holder in holders:
            model.return_unacked(holder, requeue=True)
        self.getters = None
        self.unacked = {}
        self.tx = None
        self.session.host.cancel_timer(self.timeout_key)
        self.timeout_key = None
        model.events.channel("closed", self)

    # -- channel ------------------------------------------------------------------------------------
    def on_close(self, m: spec.ChannelClose) -> None:
        self.session.channel_closed(self.id)
        self.teardown()
        self.send(spec.ChannelCloseOk())

    def on_close_ok(self, m: spec.ChannelCloseOk) -> None:
        self.session.channel_closed(self.id)

    def on_flow(self, m: spec.ChannelFlow) -> None:
        self.flow_paused = not m.active
        if m.active:
            for c in self.consumers.values():
                self.session.model.mark_dirty(c.queue)
        self.send(spec.ChannelFlowOk(m.active))

    def on_access_request(self, m: spec.AccessRequest) -> None:
        self.send(spec.AccessRequestOk(1))


_HANDLERS: dict[type, Callable[[AmqpChannel, Any], None]] = {
    spec.ChannelClose: AmqpChannel.on_close,
    spec.ChannelCloseOk: AmqpChannel.on_close_ok,
    spec.ChannelFlow: AmqpChannel.on_flow,
    spec.AccessRequest: AmqpChannel.on_access_request,
    spec.ExchangeDeclare: AmqpChannel.on_exchange_declare,
    spec.ExchangeDelete: AmqpChannel.on_exchange_delete,
    spec.ExchangeBind: AmqpChannel.on_exchange_bind,
    spec.ExchangeUnbind: AmqpChannel.on_exchange_unbind,
    spec.QueueDeclare: AmqpChannel.on_queue_declare,
    spec.QueueBind: AmqpChannel.on_queue_bind,
    spec.QueueUnbind: AmqpChannel.on_queue_unbind,
    spec.QueuePurge: AmqpChannel.on_queue_purge,
    spec.QueueDelete: AmqpChannel.on_queue_delete,
    spec.BasicQos: AmqpChannel.on_qos,
    spec.BasicConsume: AmqpChannel.on_consume,
    spec.BasicCancel: AmqpChannel.on_cancel,
    spec.BasicGet: AmqpChannel.on_get,
    spec.BasicPublish: AmqpChannel.on_publish,
    PublishRun: AmqpChannel.on_publish_run,
    spec.BasicAck: AmqpChannel.on_ack,
    spec.BasicNack: AmqpChannel.on_nack,
    spec.BasicReject: AmqpChannel.on_reject,
    spec.BasicRecover: AmqpChannel.on_recover,
    spec.BasicRecoverAsync: AmqpChannel.on_recover,
    spec.ConfirmSelect: AmqpChannel.on_confirm_select,
    spec.TxSelect: AmqpChannel.on_tx_select,
    spec.TxCommit: AmqpChannel.on_tx_commit,
    spec.TxRollback: AmqpChannel.on_tx_rollback,
}
