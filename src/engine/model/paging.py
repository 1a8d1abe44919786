"""Paging: a queue keeps at most ``page_window`` ready messages in memory; later arrivals go to the
store's page for the queue (``Store.page_out``/``page_in``) and come back in order as the window
drains below half. The queue only counts them (``Queue.paged``, ``Queue.paged_bytes``).

Expired messages met while paging in are handed to ``on_expired`` (the publish layer dead-letters
them); live ones get their expiry timer with ``on_expiry`` as the callback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._message import Entry, Message
from .objects import Queue
from .state import ModelState

__all__ = ["Pager"]


class Pager:
    __slots__ = ("state", "on_expired", "on_expiry")

    def __init__(self, state: ModelState, on_expired: Callable[[Queue, Entry], None],
                 on_expiry: Callable[[Any, float], None]) -> None:
        self.state = state
        self.on_expired = on_expired
        self.on_expiry = on_expiry

    def pop(self, q: Queue) -> Entry | None:
        """``q.pop()`` after refilling the in-memory window from the page when it ran low."""
        state = self.state
        if q.paged and (q.count == q.paged or (q.count - q.paged < state.page_window // 2
                                               and q.bytes < state.page_window_bytes // 2)):
            self.page_in(q)
            while q.paged and q.count == q.paged:  # everything paged in had expired: next batch
                self.page_in(q)
        return q.pop()

    def page_out(self, q: Queue, msg: Message, count: int, expires: float | None, stored: bool) -> None:
        self.state.store.page_out(q.vhost.name, q.name, msg, count, expires, stored)
        q.paged += 1
        q.count += 1
        q.paged_bytes += len(msg.body)

    def page_in(self, q: Queue) -> None:
        """Bring the next paged messages into memory, in order, up to the window. Expiry of paged
        messages is checked here (RabbitMQ, too, only expires messages at the head)."""
        state = self.state
        want = state.page_window - (q.count - q.paged)
        if q.paged_bytes:  # as many as fit the byte window at the paged messages' average size
            want = min(want, (state.page_window_bytes - q.bytes) * q.paged // q.paged_bytes)
        want = max(1, want)
        items, consumed = state.store.page_in(q.vhost.name, q.name, want)
        if not consumed:  # the store has nothing left: do not count phantoms
            consumed = q.paged
        consumed = min(consumed, q.paged)
        q.paged -= consumed
        q.count -= consumed  # the live ones are counted again by push()
        q.paged_bytes = max(0, q.paged_bytes - sum(len(m.body) for m, _, _ in items)) if q.paged else 0
        now = state.now
        for msg, count, expires in items:
            entry = Entry(msg, state.next_seq(), count, expires)
            state.queued_bytes += len(msg.body)  # in memory now; forget takes it off
            if expires is not None and expires <= now:
                self.on_expired(q, entry)
                continue
            q.push(entry)
            if expires is not None:
                entry.timer = state.timers.add(expires, self.on_expiry, (q, entry))

    def drop(self, q: Queue, forget_stored: bool) -> int:
        """Forget every paged message of ``q`` (purge, delete); returns how many."""
        n = q.paged
        if n:
            state = self.state
            state.store.page_drop(q.vhost.name, q.name, forget_stored)
            if forget_stored and q.durable:
                state.store_write()
            q.paged = 0
            q.paged_bytes = 0
            q.count -= n
        return n

    def paged_messages(self, q: Queue) -> list[Message]:
        """The paged messages of ``q`` in order (reads them all back: for inspection and tests)."""
        return [m for m, _, _ in self.state.store.paged(q.vhost.name, q.name)]
