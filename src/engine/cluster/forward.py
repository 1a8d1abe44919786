"""A message routed to a queue another node leads: handed to the store's outbox, which sends it to
the leader with the next sync (``storage.postgres.cluster.ClusterStore.sync``). It counts as a
store write, so its publisher's confirm (or STOMP receipt) waits for the leader's commit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .._message import Message
from ..model.objects import Queue
from ..model.state import ModelState

__all__ = ["make_forward"]


class Outbox(Protocol):
    def forward(self, leader: str, vhost: str, queue: str, msg: Message) -> None: ...


def make_forward(state: ModelState, outbox: Outbox) -> Callable[[Queue, Message], bool]:
    """The model's ``Publisher.forward`` for a node whose store sends to other leaders."""
    def forward(q: Queue, msg: Message) -> bool:
        outbox.forward(q.leader, q.vhost.name, q.name, msg)  # type: ignore[arg-type]  # set: q is remote
        state.store_write()
        return True

    return forward
