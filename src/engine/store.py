"""The storage interface the broker writes through, and the transient ``MemoryStore``.

Only durable things reach the store: durable exchanges, queues and bindings, and persistent
messages routed into durable queues. Routing code never sees a store; the model calls these
methods, so the durable ``SegmentStore`` (and a PostgreSQL store) plug in without touching it.

A durable STOMP topic subscription is a durable queue plus its binding(s) to ``amq.topic``, so it is
persisted through the queue and binding operations. Recovery rebuilds each durable queue's messages in
enqueue order (a requeued message keeps its delivery count, not its place at the front).
Messages held until a due time (a durable delayed exchange's, a durable queue's pending retries) are
persisted the same way, in a hidden queue per holder whose copies carry their due time in a header
(``engine.model.holding``): a store needs nothing more for them.

Paging (LavinMQ's design): a queue keeps only a window of ready messages as Python objects; the
model hands the rest to ``page_out`` and takes them back in order with ``page_in``. The defaults
here keep paged messages in memory, so a store that does not implement paging stays correct;
``SegmentStore`` keeps them in its segment files and only a few bytes per message in memory.

Threading: every method but ``sync`` is called on the broker's (loop) thread. ``sync(token)`` runs in
a server worker thread and must make durable everything appended before the ``Sync(token)`` action
was emitted, while appends may continue concurrently on the loop thread.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from typing import TYPE_CHECKING, Any

from ._message import Message
from .store_types import (
    BindingDef,
    ExchangeDef,
    PagedMessage,
    QueueDef,
    Recovered,
    StoredMessage,
    StoreError,
)

if TYPE_CHECKING:
    from .streams import StreamLog, StreamSettings

__all__ = [
    "Store",
    "MemoryStore",
    "ExchangeDef",
    "QueueDef",
    "BindingDef",
    "StoredMessage",
    "Recovered",
    "StoreError",
    "PagedMessage",
]

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

    def removals_must_sync(self) -> None:  # noqa: B027 - optional: stores that sync every write need nothing
        """The next sync must make the removals written so far durable, not only the enqueues (a
        dead-lettered message: its copy and its removal from the queue it died in go together)."""

    def close(self) -> None:  # noqa: B027 - optional: stores holding nothing open need no close
        pass

    # -- optional: per-queue expiry (x-message-ttl) that survives a restart ----------------------------
    def enqueue_expiring(self, vhost: str, queue: str, msg: Message, expires: float) -> None:
        """``enqueue`` for a queue whose ``x-message-ttl`` gives this copy its own absolute expiry;
        recovery hands it back as ``StoredMessage.expires``. Default: the expiry is not kept."""
        self.enqueue(vhost, queue, msg)

    # -- documents: users, permissions, policies (JSON, by kind and key) ------------------------------
    def put_doc(self, kind: str, key: str, doc: str) -> None:
        """Keep the JSON ``doc`` as ``(kind, key)`` (replacing one); ``recover()`` hands it back in
        ``Recovered.docs``. The default keeps it in memory only (a transient store)."""
        docs = self._default_docs()
        docs.pop((kind, key), None)
        docs[(kind, key)] = doc

    def delete_doc(self, kind: str, key: str) -> None:
        self._default_docs().pop((kind, key), None)

    def _default_docs(self) -> dict[tuple[str, str], str]:
        docs = self.__dict__.get("_store_default_docs")
        if docs is None:
            docs = self.__dict__["_store_default_docs"] = {}
        return docs

    # -- optional: paging (defaults keep paged messages in memory) -------------------------------------
    def _default_pages(self) -> dict[tuple[str, str], deque[tuple[Message, int, float | None, bool]]]:
        pages = self.__dict__.get("_store_default_pages")
        if pages is None:
            pages = self.__dict__["_store_default_pages"] = {}
        return pages

    def page_out(self, vhost: str, queue: str, msg: Message, count: int, expires: float | None,
                 stored: bool) -> None:
        """Keep ``msg`` at the tail of ``queue``'s page instead of in memory. ``stored``: it is a
        persistent message this store already holds for that durable queue (``enqueue`` or recovery);
        otherwise it is transient for the store (never made durable, gone after a restart)."""
        self._default_pages().setdefault((vhost, queue), deque()).append((msg, count, expires, stored))

    def page_in(self, vhost: str, queue: str, n: int) -> tuple[list[PagedMessage], int]:
        """Take up to ``n`` messages from the head of ``queue``'s page, in order. Returns them and how
        many page slots were consumed (more than returned when unreadable records were dropped)."""
        pages = self._default_pages()
        page = pages.get((vhost, queue))
        if not page:
            return [], 0
        out: list[PagedMessage] = []
        for _ in range(min(n, len(page))):
            msg, count, expires, _ = page.popleft()
            out.append((msg, count, expires))
        if not page:
            del pages[(vhost, queue)]
        return out, len(out)

    def page_drop(self, vhost: str, queue: str, forget_stored: bool) -> None:
        """Forget ``queue``'s page (purge, delete). ``forget_stored``: also ``remove`` the stored
        (persistent) ones; a queue being deleted passes False (``delete_queue`` forgets them)."""
        page = self._default_pages().pop((vhost, queue), None)
        if page and forget_stored:
            for msg, _, _, stored in page:
                if stored:
                    self.remove(vhost, queue, msg.id)

    def paged(self, vhost: str, queue: str) -> list[PagedMessage]:
        """Everything in ``queue``'s page, in order, without taking it (inspection and tests)."""
        return [(m, c, e) for m, c, e, _ in self._default_pages().get((vhost, queue), ())]

    # -- stream queues (engine.streams; the default keeps the logs in memory) ------------------------
    def _stream_logs(self) -> Any:
        logs = self.__dict__.get("_store_streams")
        if logs is None:
            from .streams.memory import MemoryStreams

            logs = self.__dict__["_store_streams"] = MemoryStreams(not self.needs_sync)
        return logs

    def stream(self, vhost: str, name: str, settings: StreamSettings | None = None) -> StreamLog:
        """The log of stream queue ``name`` (empty when new). ``settings`` (from the queue's
        arguments, ``streams.stream_settings``) replace the log's when given."""
        return self._stream_logs().open(vhost, name, settings)  # type: ignore[no-any-return]

    def delete_stream(self, vhost: str, name: str) -> None:
        """Forget a stream's log, records and tracking (``delete_queue`` does it too)."""
        self._stream_logs().delete(vhost, name)


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
            messages={k: [StoredMessage(m.message, m.delivery_count, m.expires) for m in v.values()]
                      for k, v in self._messages.items() if v},
            docs=dict(self._default_docs()),
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
        self.delete_stream(vhost, name)
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

    def enqueue_expiring(self, vhost: str, queue: str, msg: Message, expires: float) -> None:
        self._messages.setdefault((vhost, queue), {})[msg.id] = StoredMessage(msg, 0, expires)

    def sync(self, token: int) -> None:
        return None
