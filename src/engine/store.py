"""The storage interface the broker writes through, and the transient ``MemoryStore``.

Only durable things reach the store: durable exchanges, queues and bindings, and persistent
messages routed into durable queues. Routing code never sees a store; the model calls these
methods, so the durable ``SegmentStore`` (and a PostgreSQL store) plug in without touching it.

A durable STOMP topic subscription is a durable queue plus its binding(s) to ``amq.topic``, so it is
persisted through the queue and binding operations. Recovery rebuilds each durable queue's messages in
enqueue order (a requeued message keeps its delivery count, not its place at the front).

Threading: every method but ``sync`` is called on the broker's (loop) thread. ``sync(token)`` runs in
a server worker thread and must make durable everything appended before the ``Sync(token)`` action
was emitted, while appends may continue concurrently on the loop thread.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from ._message import Message

__all__ = [
    "Store",
    "MemoryStore",
    "ExchangeDef",
    "QueueDef",
    "BindingDef",
    "StoredMessage",
    "Recovered",
    "StoreError",
]


class StoreError(Exception):
    """The store could not persist something (disk full, I/O error, crash injected by a test)."""


@dataclass(slots=True)
class ExchangeDef:
    vhost: str
    name: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    args: dict[str, Any] | None = None


@dataclass(slots=True)
class QueueDef:
    vhost: str
    name: str
    durable: bool = True
    auto_delete: bool = False
    args: dict[str, Any] | None = None


@dataclass(slots=True)
class BindingDef:
    vhost: str
    source: str  # exchange name
    dest: str  # queue or exchange name
    dest_is_exchange: bool
    key: str
    args: dict[str, Any] | None = None

    def ident(self) -> tuple[str, str, str, bool, str, str]:
        return (self.vhost, self.source, self.dest, self.dest_is_exchange, self.key, repr(sorted((self.args or {}).items())))


@dataclass(slots=True)
class StoredMessage:
    """A persistent message as it sits in one durable queue."""

    message: Message
    delivery_count: int = 0


@dataclass(slots=True)
class Recovered:
    """What the broker rebuilds on start, in creation order."""

    vhosts: list[str] = field(default_factory=list)
    exchanges: list[ExchangeDef] = field(default_factory=list)
    queues: list[QueueDef] = field(default_factory=list)
    bindings: list[BindingDef] = field(default_factory=list)
    #: (vhost, queue) -> messages in queue order
    messages: dict[tuple[str, str], list[StoredMessage]] = field(default_factory=dict)


class Store(ABC):
    #: True when receipts/confirms must wait for ``sync``; the engine emits no Sync actions otherwise.
    needs_sync: bool = False

    @abstractmethod
    def recover(self) -> Recovered: ...

    # entities
    @abstractmethod
    def add_vhost(self, name: str) -> None: ...
    @abstractmethod
    def delete_vhost(self, name: str) -> None: ...
    @abstractmethod
    def add_exchange(self, xdef: ExchangeDef) -> None: ...
    @abstractmethod
    def delete_exchange(self, vhost: str, name: str) -> None: ...
    @abstractmethod
    def add_queue(self, qdef: QueueDef) -> None: ...
    @abstractmethod
    def delete_queue(self, vhost: str, name: str) -> None:
        """Also forgets the queue's messages."""
    @abstractmethod
    def add_binding(self, bdef: BindingDef) -> None: ...
    @abstractmethod
    def delete_binding(self, bdef: BindingDef) -> None: ...

    # messages
    @abstractmethod
    def enqueue(self, vhost: str, queue: str, msg: Message) -> None:
        """Append a persistent message to a durable queue (same ``msg.id`` may go to many queues)."""
    @abstractmethod
    def remove(self, vhost: str, queue: str, msg_id: int) -> None:
        """The message left the queue for good (acked, expired, dead-lettered, dropped)."""
    @abstractmethod
    def update_delivery(self, vhost: str, queue: str, msg_id: int, delivery_count: int) -> None:
        """The message was returned to the queue (redelivered flag and x-delivery-count survive a restart)."""

    @abstractmethod
    def sync(self, token: int) -> None:
        """Block until everything appended before ``Sync(token)`` was emitted is durable."""

    def close(self) -> None:
        pass


class MemoryStore(Store):
    """Transient: keeps the durable state in dicts (so ``recover()`` works within one process)."""

    needs_sync = False

    def __init__(self) -> None:
        self._vhosts: dict[str, None] = {}
        self._exchanges: dict[tuple[str, str], ExchangeDef] = {}
        self._queues: dict[tuple[str, str], QueueDef] = {}
        self._bindings: dict[tuple[Any, ...], BindingDef] = {}
        self._messages: dict[tuple[str, str], dict[int, StoredMessage]] = {}

    def recover(self) -> Recovered:
        return Recovered(
            vhosts=list(self._vhosts),
            exchanges=list(self._exchanges.values()),
            queues=list(self._queues.values()),
            bindings=list(self._bindings.values()),
            messages={k: list(v.values()) for k, v in self._messages.items() if v},
        )

    def add_vhost(self, name: str) -> None:
        self._vhosts[name] = None

    def delete_vhost(self, name: str) -> None:
        self._vhosts.pop(name, None)

    def add_exchange(self, xdef: ExchangeDef) -> None:
        self._exchanges[(xdef.vhost, xdef.name)] = xdef

    def delete_exchange(self, vhost: str, name: str) -> None:
        self._exchanges.pop((vhost, name), None)
        for ident, b in list(self._bindings.items()):
            if b.vhost == vhost and (b.source == name or (b.dest_is_exchange and b.dest == name)):
                del self._bindings[ident]

    def add_queue(self, qdef: QueueDef) -> None:
        self._queues[(qdef.vhost, qdef.name)] = qdef

    def delete_queue(self, vhost: str, name: str) -> None:
        self._queues.pop((vhost, name), None)
        self._messages.pop((vhost, name), None)
        for ident, b in list(self._bindings.items()):
            if b.vhost == vhost and not b.dest_is_exchange and b.dest == name:
                del self._bindings[ident]

    def add_binding(self, bdef: BindingDef) -> None:
        self._bindings[bdef.ident()] = bdef

    def delete_binding(self, bdef: BindingDef) -> None:
        self._bindings.pop(bdef.ident(), None)

    def enqueue(self, vhost: str, queue: str, msg: Message) -> None:
        self._messages.setdefault((vhost, queue), {})[msg.id] = StoredMessage(msg, 0)

    def remove(self, vhost: str, queue: str, msg_id: int) -> None:
        msgs = self._messages.get((vhost, queue))
        if msgs is not None:
            msgs.pop(msg_id, None)

    def update_delivery(self, vhost: str, queue: str, msg_id: int, delivery_count: int) -> None:
        msgs = self._messages.get((vhost, queue))
        if msgs is not None and msg_id in msgs:
            msgs[msg_id].delivery_count = delivery_count

    def sync(self, token: int) -> None:
        return None
