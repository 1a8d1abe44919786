"""The channel's acknowledgements: basic.ack/nack/reject (``multiple`` included) and basic.recover
map delivery tags back to the model's consumers and tags; tx.select/commit/rollback hold
publishes and settles until commit (a rollback puts the settled deliveries back)."""

from __future__ import annotations

from itertools import islice
from typing import Any

from amqpproto import spec

from .._mypyc import interpreted_class
from ..model import Consumer
from .base import ChannelBase
from .errors import AmqpConnectionError, ChannelError

__all__ = ["AckMethods"]


class _TxSettle:
    """An ack/nack/reject held by an open transaction: run on commit; ``taken`` (channel tag ->
    delivery) is what a rollback puts back into the channel's unacked deliveries."""

    __slots__ = ("chan", "items", "requeue", "taken", "multiple")

    def __init__(self, chan: AckMethods, items: list[tuple[Consumer, int, float]], requeue: bool | None,
                 taken: dict[int, tuple[Consumer, int, float]], multiple: bool) -> None:
        self.chan = chan
        self.items = items
        self.requeue = requeue
        self.taken = taken
        self.multiple = multiple

    def __call__(self) -> None:
        self.chan._settle(self.items, self.requeue, self.multiple)


@interpreted_class
class AckMethods(ChannelBase):
    __slots__ = ()

    # -- basic: acknowledgements --------------------------------------------------------------------
    def _take(self, tag: int, multiple: bool, method: type) -> list[tuple[Consumer, int, float]]:
        unacked = self.unacked
        if multiple:
            if tag == 0:
                taken = list(unacked.values())
                unacked.clear()
                return taken
            if tag not in unacked and (not unacked or tag < next(iter(unacked))):
                raise ChannelError(spec.PRECONDITION_FAILED, f"unknown delivery tag {tag}", method)
            if tag >= self.next_tag:  # everything delivered so far (the usual cumulative ack)
                taken = list(unacked.values())
                unacked.clear()
                return taken
            first = next(iter(unacked))
            if tag in unacked and next(reversed(unacked)) - first == len(unacked) - 1:
                # tags without gaps (the usual window): counted, not walked
                n = tag - first + 1
                taken = list(islice(unacked.values(), n))
                rest = dict(islice(unacked.items(), n, None))
                unacked.clear()
                unacked.update(rest)
                return taken
            taken = []
            keys = []
            for t, item in unacked.items():  # tag order: stop at the first later tag
                if t > tag:
                    break
                keys.append(t)
                taken.append(item)
            for t in keys:
                del unacked[t]
            return taken
        one: tuple[Consumer, int, float] | None = unacked.pop(tag, None)
        if one is None:
            raise ChannelError(spec.PRECONDITION_FAILED, f"unknown delivery tag {tag}", method)
        return [one]

    def _settle(self, items: list[tuple[Consumer, int, float]], requeue: bool | None, multiple: bool = False) -> None:
        model = self.session.model
        streams: dict[Consumer, int] = {}
        last: dict[Consumer, int] = {}
        if multiple:
            # a stream consumer's tags on this channel are in delivery order, so every one up to the
            # last taken (items are in tag order: the last one seen) was taken: the model settles
            # them at once (nothing goes back into a stream: nack and ack settle alike)
            last = {consumer: mtag for consumer, mtag, _ in items}
            streams = {consumer: mtag for consumer, mtag in last.items() if consumer.queue.stream}
        if not multiple or len(streams) < len(last):  # some are not a stream's
            # nacks go back in reverse so requeued messages keep their order at the head
            for consumer, mtag, _ in (items if requeue is None else reversed(items)):
                if consumer in streams:
                    continue
                if requeue is None:
                    model.ack(consumer, mtag)
                else:
                    model.nack(consumer, mtag, False, requeue)
        for consumer, mtag in streams.items():
            if requeue is None:
                model.ack(consumer, mtag, True)
            else:
                model.nack(consumer, mtag, True, requeue)
        if self.global_prefetch:
            for c in self.consumers.values():
                model.mark_dirty(c.queue)

    def on_ack(self, m: spec.BasicAck) -> None:
        self._settle_tags(m.delivery_tag, m.multiple, None, type(m))

    def on_nack(self, m: spec.BasicNack) -> None:
        self._settle_tags(m.delivery_tag, m.multiple, m.requeue, type(m))

    def on_reject(self, m: spec.BasicReject) -> None:
        self._settle_tags(m.delivery_tag, False, m.requeue, type(m))

    def _settle_tags(self, tag: int, multiple: bool, requeue: bool | None, method: type) -> None:
        if self.tx is None:
            self._settle(self._take(tag, multiple, method), requeue, multiple)
            return
        # in a transaction the settle waits for tx.commit; the deliveries leave ``unacked`` now (a
        # second ack of them is an unknown tag, as RabbitMQ's) but come back on rollback
        before = self.unacked.copy()
        items = self._take(tag, multiple, method)
        taken = {t: before[t] for t in before.keys() - self.unacked.keys()}
        self.tx.append(_TxSettle(self, items, requeue, taken, multiple))

    def _restore_tx_settles(self) -> None:
        """Rollback (or close) of a transaction: its acks, nacks and rejects are discarded and their
        deliveries are unacked on the channel again, in tag order (RabbitMQ's tx.rollback); a
        channel close then requeues them."""
        restored: dict[int, tuple[Consumer, int, float]] = {}
        for fn in self.tx or ():
            if isinstance(fn, _TxSettle):
                restored.update(fn.taken)
        if restored:
            restored.update(self.unacked)
            self.unacked = dict(sorted(restored.items()))

    def on_recover(self, m: Any) -> None:
        if not m.requeue:  # RabbitMQ: a hard error
            raise AmqpConnectionError(spec.NOT_IMPLEMENTED, "requeue=false", type(m))
        items = list(self.unacked.values())
        self.unacked.clear()
        self._settle(items, True, True)  # RabbitMQ requeues whatever ``requeue`` says (all: a multiple settle)
        if type(m) is spec.BasicRecover:
            self.send(spec.BasicRecoverOk())

    # -- transactions -------------------------------------------------------------------------------
    def on_tx_select(self, m: spec.TxSelect) -> None:
        if self.confirm:
            raise ChannelError(spec.PRECONDITION_FAILED, "cannot switch from confirm to tx mode", type(m))
        if self.tx is None:
            self.tx = []
        self.send(spec.TxSelectOk())

    def on_tx_commit(self, m: spec.TxCommit) -> None:
        if self.tx is None:
            raise ChannelError(spec.PRECONDITION_FAILED, "channel is not transactional", type(m))
        work, self.tx = self.tx, []
        model = self.session.model
        before = model.store_writes
        for fn in work:
            fn()
        self.session.after_sync(model.store_writes != before, self._commit_ok)

    def _commit_ok(self) -> None:
        if self.session.channels.get(self.id) is self:
            self.send(spec.TxCommitOk())

    def on_tx_rollback(self, m: spec.TxRollback) -> None:
        if self.tx is None:
            raise ChannelError(spec.PRECONDITION_FAILED, "channel is not transactional", type(m))
        self._restore_tx_settles()
        self.tx = []
        self.send(spec.TxRollbackOk())
