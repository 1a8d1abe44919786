"""Messages held until a due time: what delayed exchanges (``delayed``) and retry back-off
(``retry``) share.

A ``Holder`` keeps messages out of every queue until their due time, one timer each in the model's
``TimerQueue``; timers keyed ``(deadline, seq)`` release them ordered by due time, then arrival.
A durable holder keeps its persistent messages in the store as a hidden durable queue (a queue
definition marked with ``HOLDER_ARG``, named under ``HOLDER_PREFIX``, which no client queue may
take), each stored copy carrying its due time in milliseconds in the ``DUE_HEADER`` header, so
every store keeps the due time without knowing about delays. Recovery hands the stored copies back
to ``restore``, which arms their timers again (a copy already due is released at once).

Held messages stay in memory until due (their timers carry them), so their body bytes count in
the model's ``queued_bytes``, which the memory alarm compares against the watermark: a flood of
delayed or retried messages blocks publishers as one of ready messages does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .._message import Message
from .._timers import TimerKey
from ..store import QueueDef, StoreError
from .state import ModelState

__all__ = ["Holder", "HOLDER_ARG", "HOLDER_PREFIX", "DUE_HEADER", "RELEASE_RETRY", "holder_queue_name"]

log = logging.getLogger("sansmq.store")
#: seconds before a release the store refused (a full disk) is tried again
RELEASE_RETRY = 1.0

#: names of the holders' store queues; no client queue may take one (topology refuses them)
HOLDER_PREFIX = "amq.sansmq."

#: argument of the store queue definition of a holder: its kind (``delayed`` or ``retry``)
HOLDER_ARG = "x-sansmq-holder"
#: header of a held message's stored copy: its due time (ms since the epoch); never delivered
DUE_HEADER = "x-sansmq-due"

#: ``release(msg, count)``: a held message is due (``count``: its delivery count so far)
Release = Callable[[Message, int], None]


def holder_queue_name(kind: str, owner: str) -> str:
    """The store queue holding ``owner``'s (an exchange's or a queue's) messages of ``kind``."""
    return f"{HOLDER_PREFIX}{kind}.{owner}"


class Holder:
    __slots__ = ("state", "vhost", "name", "durable", "release", "held", "bytes")

    def __init__(self, state: ModelState, vhost: str, kind: str, owner: str, durable: bool, release: Release,
                 persist: bool = True) -> None:
        self.state = state
        self.vhost = vhost
        self.name = holder_queue_name(kind, owner)
        self.durable = durable
        self.release = release
        #: held message id -> its timer
        self.held: dict[int, TimerKey] = {}
        #: body bytes of the held messages (counted in the model's ``queued_bytes`` too)
        self.bytes = 0
        if durable and persist:
            state.store.add_queue(QueueDef(vhost, self.name, True, False, {HOLDER_ARG: kind}))
            state.store_write()

    def __len__(self) -> int:
        return len(self.held)

    def hold(self, msg: Message, headers: dict[str, Any], due: float, count: int = 0) -> None:
        """Hold a copy of ``msg`` with ``headers`` until ``due`` (``count``: its delivery count).
        A persistent message in a durable holder is written to the store (a store write, so a
        confirm or receipt waits for its sync)."""
        state = self.state
        held = Message(state.next_message_id(), msg.exchange, msg.routing_key, headers, msg.body, msg.priority,
                       msg.expires_at, msg.persistent, msg.ack_timeout)
        stored = self.durable and msg.persistent
        if stored:
            held.headers = {**headers, DUE_HEADER: round(due * 1000)}
            state.store.enqueue(self.vhost, self.name, held)
            if count:
                state.store.update_delivery(self.vhost, self.name, held.id, count)
            state.store_write()
        self.held[held.id] = state.timers.add(due, self._due, (held, count))
        self._count(len(held.body))

    def restore(self, stored: Message, count: int) -> None:
        """A stored copy read back on start: due again at its stored due time."""
        due = stored.headers.get(DUE_HEADER)
        due_s = int(due) / 1000.0 if isinstance(due, (int, str)) else self.state.now
        self.held[stored.id] = self.state.timers.add(due_s, self._due, (stored, count))
        self._count(len(stored.body))

    def _count(self, size: int) -> None:
        self.bytes += size
        self.state.queued_bytes += size

    def _due(self, arg: tuple[Message, int], now: float) -> None:
        held, count = arg
        if self.held.pop(held.id, None) is None:
            return
        self._count(-len(held.body))  # released: the queues it reaches count it again
        state = self.state
        headers = held.headers
        if DUE_HEADER in headers:
            headers = dict(headers)
            del headers[DUE_HEADER]
        # a new id: the released message is a new record for the store, never the held copy
        out = Message(state.next_message_id(), held.exchange, held.routing_key, headers, held.body, held.priority,
                      held.expires_at, held.persistent, held.ack_timeout)
        # released before the stored copy goes: a crash in between repeats it rather than losing it
        try:
            self.release(out, count)
        except StoreError as exc:
            # the store refuses writes (a full disk): held on and tried again later, never lost
            # (raising would escape the timer and take the broker down)
            log.warning("releasing a held message from '%s' failed, retrying in %s s: %s", self.name,
                        RELEASE_RETRY, exc)
            self.held[held.id] = state.timers.add(now + RELEASE_RETRY, self._due, arg)
            self._count(len(held.body))
            return
        if self.durable and held.persistent:
            # the stored copy goes once the released one is durable: a power cut in between
            # repeats the release rather than losing the message
            state.when_durable(lambda: self._unstore(held.id))

    def _unstore(self, msg_id: int) -> None:
        self.state.store.remove(self.vhost, self.name, msg_id)
        self.state.store_write()

    def drop(self) -> None:
        """The owner is gone: its held messages go with it."""
        state = self.state
        for key in self.held.values():
            state.timers.cancel(key)
        self.held.clear()
        self._count(-self.bytes)
        if self.durable:
            state.store.delete_queue(self.vhost, self.name)
            state.store_write()
