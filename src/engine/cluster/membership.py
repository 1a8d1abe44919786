"""What a cluster node's model does when the database says something changed.

All of it runs on the loop thread, through the broker's own operations, with the store muted where
the change came from another node (it is in the database already):

- ``apply_change``: another node changed a definition; do the same here (a declare, a delete, a
  user, a policy), so every node routes and authorises alike;
- ``mark_remote``/``take_over``/``step_down``: queue leadership as the leases have it. A remote queue
  keeps its definition and bindings (this node routes to it) but no messages or consumers' state;
  taking one over loads its messages as a restart would; stepping down cancels its consumers
  (they get basic.cancel when they asked for cancel notifications) and forgets its messages here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from ..model.errors import ModelError
from ..model.objects import Queue
from ..model.policies import POLICY_DOC, Policy
from ..model.security import PERMISSION_DOC, TOPIC_PERMISSION_DOC, USER_DOC, Permission, TopicPermission, UserRecord
from ..store import StoredMessage, StoreError
from .changes import decode_args as _args

if TYPE_CHECKING:
    from .._broker import Broker

__all__ = ["apply_change", "mark_remote", "take_over", "step_down", "place_declared"]

log = logging.getLogger("sansmq.cluster")

Key = tuple[str, str]


class NodeStore(Protocol):
    """What the model side needs of a cluster node's store (``storage.postgres.cluster``)."""

    node: str

    def mute(self) -> AbstractContextManager[None]: ...
    def forget_queue(self, vhost: str, name: str, qid: int | None = None, led: bool = False) -> None: ...
    def adopt(self, vhost: str, name: str, epoch: int) -> None: ...


def _queue(broker: Broker, key: Key) -> Queue | None:
    vhost = broker.model.vhosts.get(key[0])
    return None if vhost is None else vhost.queues.get(key[1])


# -- leadership ---------------------------------------------------------------------------------------
def mark_remote(broker: Broker, leaders: dict[Key, str]) -> None:
    """Queues led elsewhere, as the leases say (``leaders``: (vhost, queue) -> leader node)."""
    me = broker.store.node  # type: ignore[attr-defined]
    for key, leader in leaders.items():
        q = _queue(broker, key)
        if q is None:
            continue
        if leader == me:
            continue
        if q.leader is None and (q.count or q.consumers):
            step_down(broker, [key], leader)
        else:
            q.leader = leader


def take_over(broker: Broker, key: Key, messages: list[StoredMessage], epoch: int) -> None:
    """This node now leads ``key`` at lease ``epoch``: its messages, read back from the database,
    become its queue.

    Only now does the store write for it (``adopt``): until the loop got here, what this node still
    held of the queue from an earlier lease (it lost the lease and is taking it back) is stale, and a
    write from it must be fenced off, not committed after the messages were read back (it would be
    missing here). That stale state is dropped first, as a step-down does."""
    q = _queue(broker, key)
    if q is None:
        return
    if q.leader is None and (q.count or q.consumers):
        step_down(broker, [key], broker.store.node)  # type: ignore[attr-defined]
    if broker.model.relays is not None:
        broker.model.relays.stop_queue(q)  # its consumers here take from it directly now
    broker.store.adopt(key[0], key[1], epoch)  # type: ignore[attr-defined]
    q.leader = None
    if q.stream:  # recovery of a stream: its log as the last leader committed it (producers too)
        broker.model.streams.log(q).refresh()
    enqueue = broker.model.publisher.enqueue
    for sm in messages:
        enqueue(q, sm.message, sm.delivery_count, persist=False)
    broker.model.dirty[q] = None
    log.info("cluster: took over queue '%s' in vhost '%s' with %d messages", key[1], key[0], len(messages))


def step_down(broker: Broker, keys: list[Key], leader: str = "(another node)") -> None:
    """This node lost the lease of ``keys``: consumers cancelled, messages forgotten here (the new
    leader has them from the database; unacked ones come back redelivered there). Nothing is
    removed from the store: the stored messages are the leader's, and this node may lead the queue
    again by now (its removes would pass the fence and delete them)."""
    model = broker.model
    for key in keys:
        q = _queue(broker, key)
        if q is None:
            continue
        if q.stream:
            _follow_stream(broker, q, leader)
            continue
        for consumer in list(q.consumers or ()):
            for held in (consumer.unacked or {}).values():
                model.forget(q, held, keep_stored=True)
            consumer.unacked = None
            consumer.owner.consumer_cancelled(consumer)
        q.consumers = None
        model.pager.drop(q, False)
        while (entry := q.pop()) is not None:
            model.forget(q, entry, keep_stored=True)
        q.count = q.paged = q.bytes = 0
        q.leader = leader
        log.warning("cluster: stepped down from queue '%s' in vhost '%s' (now led by %s)", key[1], key[0], leader)


def _follow_stream(broker: Broker, q: Queue, leader: str) -> None:
    """A stream led elsewhere now: its consumers here stay and read on (the log is shared), fed by
    the new leader; what this node appended and did not commit is dropped (fenced: never confirmed)."""
    q.leader = leader
    try:
        broker.model.streams.log(q).refresh()
    except StoreError as exc:  # the database is away: the feed's deliveries move the end on
        log.warning("cluster: stream '%s' not read back from the database: %s", q.name, exc)
    relays = broker.model.relays
    if relays is not None:
        relays.stop_queue(q)
        if q.consumers:
            relays.consumed(q)
    log.warning("cluster: stepped down from stream '%s' in vhost '%s' (now led by %s)", q.name, q.vhost.name, leader)


def place_declared(model: Any, placed: dict[Key, str]) -> None:
    """A queue declared here whose placement chose another leader (``balanced``) is remote at once:
    chained after the model's own ``on_declared`` (``placed``: the store's decisions)."""
    declared = model.topology.on_declared

    def on_declared(obj: Any) -> None:
        if declared is not None:
            declared(obj)
        if isinstance(obj, Queue):
            leader = placed.pop((obj.vhost.name, obj.name), None)
            if leader is not None:
                obj.leader = leader

    model.topology.on_declared = on_declared


# -- definitions ----------------------------------------------------------------------------------------
def apply_change(broker: Broker, op: str, params: dict[str, Any]) -> None:
    """Apply another node's definition change ``op`` here (the store muted: it is stored already).
    A change that no longer applies (deleted meanwhile, declared differently) is logged, not raised."""
    store: NodeStore = broker.store  # type: ignore[assignment]
    handler = _HANDLERS.get(op)
    if handler is None:
        log.warning("cluster: unknown definition change %r ignored", op)
        return
    with store.mute():
        try:
            handler(broker, store, params)
        except ModelError as exc:
            log.warning("cluster: definition change %s %s not applied: %s", op, params, exc)


def _vhost_add(broker: Broker, store: NodeStore, p: dict[str, Any]) -> None:
    if p["name"] not in broker.model.vhosts:
        broker.add_vhost(p["name"])


def _vhost_delete(broker: Broker, store: NodeStore, p: dict[str, Any]) -> None:
    if p["name"] in broker.model.vhosts:
        broker.delete_vhost(p["name"], broker.now)


def _doc_put(broker: Broker, store: NodeStore, p: dict[str, Any]) -> None:
    kind, doc = p["kind"], json.loads(p["doc"])
    sec = broker.model.security
    if kind == USER_DOC:
        sec.put_user(UserRecord.from_json(doc), persist=False)
    elif kind == PERMISSION_DOC:
        sec.set_permissions(Permission.from_json(doc), persist=False)
    elif kind == TOPIC_PERMISSION_DOC:
        sec.set_topic_permission(TopicPermission.from_json(doc), persist=False)
    elif kind == POLICY_DOC:
        if doc.get("vhost") in broker.model.vhosts:
            broker.set_policy(Policy.from_json(doc))
    else:
        sec.restore({(kind, p["key"]): p["doc"]})


def _doc_delete(broker: Broker, store: NodeStore, p: dict[str, Any]) -> None:
    kind, key = p["kind"], p["key"]
    sec = broker.model.security
    if kind == USER_DOC:
        if key in sec.users:
            broker.delete_user(key, broker.now)
    elif kind == PERMISSION_DOC:
        vhost, user = json.loads(key)
        sec.clear_permissions(user, vhost)
    elif kind == TOPIC_PERMISSION_DOC:
        vhost, user, exchange = json.loads(key)
        sec.clear_topic_permission(user, vhost, exchange)
    elif kind == POLICY_DOC:
        vhost, name = json.loads(key)
        if (vhost, name) in broker.model.policies.policies:
            broker.delete_policy(vhost, name)


def _exchange_add(broker: Broker, store: NodeStore, p: dict[str, Any]) -> None:
    model = broker.model
    vhost = model.add_vhost(p["vhost"], persist=False)
    model.declare_exchange(vhost, p["name"], p["type"], p["durable"], p["auto_delete"], p["internal"],
                           _args(p["args"]))


def _exchange_delete(broker: Broker, store: NodeStore, p: dict[str, Any]) -> None:
    vhost = broker.model.vhosts.get(p["vhost"])
    if vhost is not None and p["name"] in vhost.exchanges:
        broker.model.delete_exchange(vhost, p["name"])


def _queue_add(broker: Broker, store: NodeStore, p: dict[str, Any]) -> None:
    model = broker.model
    vhost = model.add_vhost(p["vhost"], persist=False)
    q = model.declare_queue(vhost, p["name"], p["durable"], p["auto_delete"], None, _args(p["args"]))
    store.forget_queue(p["vhost"], p["name"], p["id"], led=p["leader"] == store.node)
    if p["leader"] != store.node:
        q.leader = p["leader"]


def _queue_delete(broker: Broker, store: NodeStore, p: dict[str, Any]) -> None:
    q = _queue(broker, (p["vhost"], p["name"]))
    if q is not None:
        broker.model.delete_queue(q)
    store.forget_queue(p["vhost"], p["name"])


def _binding(broker: Broker, p: dict[str, Any]) -> tuple[Any, ...] | None:
    vhost = broker.model.vhosts.get(p["vhost"])
    if vhost is None:
        return None
    source = vhost.exchanges.get(p["source"])
    dest = vhost.exchanges.get(p["dest"]) if p["dest_is_exchange"] else vhost.queues.get(p["dest"])
    if source is None or dest is None:
        return None
    return vhost, dest, source, p["key"], _args(p["args"])


def _binding_add(broker: Broker, store: NodeStore, p: dict[str, Any]) -> None:
    found = _binding(broker, p)
    if found is not None:
        broker.model.bind(*found)


def _binding_delete(broker: Broker, store: NodeStore, p: dict[str, Any]) -> None:
    found = _binding(broker, p)
    if found is not None:
        broker.model.unbind(*found)


_HANDLERS: dict[str, Callable[[Broker, NodeStore, dict[str, Any]], None]] = {
    "vhost.add": _vhost_add,
    "vhost.delete": _vhost_delete,
    "doc.put": _doc_put,
    "doc.delete": _doc_delete,
    "exchange.add": _exchange_add,
    "exchange.delete": _exchange_delete,
    "queue.add": _queue_add,
    "queue.delete": _queue_delete,
    "binding.add": _binding_add,
    "binding.delete": _binding_delete,
}
