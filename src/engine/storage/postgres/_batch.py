"""The in-memory batch the loop thread appends to and ``sync`` writes in one transaction.

A batch is a list of items in append order: entity operations (an SQL statement name and its
parameters) and ``_Group``s of message changes between them. Within a group changes are coalesced
to their net effect, which is valid because no entity operation falls between them: a message
enqueued and removed before the sync never reaches the database; a delivery count updated twice is
written once. Groups are written with one ``unnest`` statement per kind of change.
"""

from __future__ import annotations

from typing import Any

from ..._message import Message

Key = tuple[int, int]  # (queue id, message id)


class _Group:
    """Net message changes since the last entity operation."""

    __slots__ = ("msgs", "ins", "cnt", "dels", "touched")

    def __init__(self) -> None:
        self.msgs: dict[int, Message] = {}  # new message rows (written if some entry still needs them)
        self.ins: dict[Key, int] = {}  # new queue entries -> delivery count
        self.cnt: dict[Key, int] = {}  # delivery counts of entries already in the database
        self.dels: set[Key] = set()  # entries already in the database that left their queue
        self.touched: set[int] = set()  # message ids whose row may now be unreferenced

    def enqueue(self, qid: int, msg: Message) -> None:
        key = (qid, msg.id)
        self.msgs[msg.id] = msg
        self.ins[key] = 0
        self.dels.discard(key)

    def remove(self, qid: int, msg_id: int) -> None:
        key = (qid, msg_id)
        if self.ins.pop(key, None) is None:
            self.cnt.pop(key, None)
            self.dels.add(key)
            self.touched.add(msg_id)

    def count(self, qid: int, msg_id: int, count: int) -> None:
        key = (qid, msg_id)
        if key in self.ins:
            self.ins[key] = count
        elif key not in self.dels:
            self.cnt[key] = count

    def __bool__(self) -> bool:
        return bool(self.ins or self.cnt or self.dels)


Item = _Group | tuple[str, tuple[Any, ...]]
