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
