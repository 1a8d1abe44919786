"""The store's value types: durable entity definitions, stored and paged messages, what a store
hands back on start, and its error. Below ``store`` (the interface) so that the stores' record
codecs and the stream logs use them without importing the interface that uses them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._message import Message

__all__ = ["ExchangeDef", "QueueDef", "BindingDef", "StoredMessage", "Recovered", "StoreError", "PagedMessage"]


#: a paged message as handed back by ``page_in``: (message, delivery count, expiry in this queue)
PagedMessage = tuple[Message, int, float | None]


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
        return (self.vhost, self.source, self.dest, self.dest_is_exchange, self.key,
                repr(sorted((self.args or {}).items())))


@dataclass(slots=True)
class StoredMessage:
    """A persistent message as it sits in one durable queue."""

    message: Message
    delivery_count: int = 0
    #: this queue's own expiry of the message (``x-message-ttl``) when it differs from
    #: ``message.expires_at``; None when the store does not know it
    expires: float | None = None


@dataclass(slots=True)
class Recovered:
    """What the broker rebuilds on start: vhosts, exchanges, queues, then bindings (each list in an order
    that respects dependencies within it; queues need none among themselves)."""

    vhosts: list[str] = field(default_factory=list)
    exchanges: list[ExchangeDef] = field(default_factory=list)
    queues: list[QueueDef] = field(default_factory=list)
    bindings: list[BindingDef] = field(default_factory=list)
    #: (vhost, queue) -> messages in queue order
    messages: dict[tuple[str, str], list[StoredMessage]] = field(default_factory=dict)
    #: (vhost, queue) -> how many more messages, after ``messages``, the store already holds in the
    #: queue's page (a large recovered backlog is not materialised; see ``Store.page_in``)
    paged: dict[tuple[str, str], int] = field(default_factory=dict)
    #: the highest message id the store holds (paged messages are not in ``messages``)
    max_message_id: int = 0
