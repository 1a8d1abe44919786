"""A message routed to a queue another node leads: handed to the store's outbox, which hands it to
the leader's sender with the next sync (``storage.postgres.cluster.ClusterStore.sync``). It counts
as a store write, and the sync's token completes only once the leader confirmed it
(``settle_forwards``), so its publisher's confirm (or STOMP receipt) waits for the leader's commit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .._message import Message
from ..model.objects import Queue
from ..model.state import ModelState
from ..store import StoreError

__all__ = ["make_forward", "settle_forwards"]


class Outbox(Protocol):
    def forward(self, token: int, leader: str, vhost: str, queue: str, msg: Message) -> None: ...


def make_forward(state: ModelState, outbox: Outbox, sync_token: Callable[[bool], int | None]
                 ) -> Callable[[Queue, Message], bool]:
    """The model's ``Publisher.forward`` for a node whose store sends to other leaders.
    ``sync_token``: the broker's (``Host.sync_token``): the token whose sync will send the message
    is the one its publisher's confirm waits for, so the store knows whose confirm a failed send
    must fail."""
    def forward(q: Queue, msg: Message) -> bool:
        state.store_write()
        token = sync_token(True) or 0
        outbox.forward(token, q.leader, q.vhost.name, q.name, msg)  # type: ignore[arg-type]  # q is remote
        return True

    return forward


class Outcome(Protocol):
    """``storage.postgres.cluster.Forwarded``."""

    @property
    def failed_token(self) -> int: ...
    @property
    def sync_needed(self) -> bool: ...


class Settling(Protocol):
    local_through: int

    def forwarded(self, items: list[Any], error: StoreError | None) -> Outcome: ...


def settle_forwards(broker: Any, store: Settling, items: list[Any], error: StoreError | None, now: float) -> None:
    """The leader confirmed ``items`` (``error`` None) or they could not be sent: on the loop
    thread, as a broker entry point. A failure nacks their publishers first; then the confirms
    the forwards held back go (``Broker.synced`` capped by the forwards still waiting), and a
    removal they let go gets a sync of its own."""
    outcome = store.forwarded(items, error)
    if outcome.failed_token:
        broker.sync_failed(outcome.failed_token, now)
    if outcome.sync_needed:
        broker.run_command(lambda b: b.model.store_write(), now)
    broker.synced(store.local_through, now)
